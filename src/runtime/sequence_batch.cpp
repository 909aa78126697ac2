// sequence_batch.cpp: see sequence_batch.h. The batches share the request checks and the KV
// budget (BatchBase, sequence_batch_base.h); the CPU batch steps every open sequence in one decode_batch call plus up to
// one chunk of prefill tokens (prefilling sequences take turns), the serial batch runs one whole
// sequence per step.
#include "runtime/sequence_batch.h"

#include <chrono>
#include <cmath>
#include <map>
#include <vector>

#include "methods/method.h"
#include "model/transformer.h"
#include "runtime/sequence_batch_base.h"
#include "runtime/sequence_run.h"
#include "util/error.h"

namespace longctx {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The fixed cost of one prefill forward call (every layer's small ops and thread-pool rounds), in
// prompt tokens: on the 2-core CPU a 16-token prefill of SmolLM2-135M takes ~28% of a 512-token
// one. A step's prefill budget counts it, so many short prompts do not stall the decode streams
// longer than one chunk does.
constexpr int64_t kPieceOverheadTokens = 128;

// ---- CPU: batched decode + interleaved prefill chunks ----

class CpuBatch final : public BatchBase {
 public:
  CpuBatch(const CpuBatchModel& m, const BatchOptions& o) : BatchBase(m.max_context, o), m_(m) {
    chunk_ = opts_.prefill_chunk > 0 ? opts_.prefill_chunk : m_.prefill_chunk;
  }

  int64_t open(const SequenceRequest& r) override {
    admit(r);
    auto s = std::make_unique<Slot>(next_id_++, r);
    s->state = m_.model.new_sequence(s->reserved, method_for(r.attn));
    open_.push_back(std::move(s));
    ++stats_.prefilling;
    return open_.back()->id;
  }

  void step(const SequenceEventFn& on_event) override {
    ++stats_.steps;
    decode(on_event);
    prefill(on_event);
    sweep();
  }

  void close(int64_t id) override {
    for (auto& s : open_)
      if (s->id == id) s->closed = true;
    sweep();
  }

  BatchStats stats() const override {
    BatchStats st = stats_;
    st.kv_used = 0;
    for (const auto& s : open_) st.kv_used += s->state->cache.size();
    return st;
  }

 private:
  struct Slot {
    int64_t id;
    std::vector<int32_t> prompt;
    int64_t reserved;
    bool logprobs;
    SequenceRun run;
    std::unique_ptr<SequenceState> state;
    int64_t prefilled = 0;  // prompt tokens in the cache
    int32_t pending = -1;   // the last sampled token, which the next decode step appends
    bool closed = false;
    Slot(int64_t i, const SequenceRequest& r)
        : id(i), prompt(r.prompt), reserved(reservation(r)), logprobs(r.logprobs), run(r.sp, int64_t(r.prompt.size())) {}
    bool prefilling() const { return prefilled < int64_t(prompt.size()); }
  };

  std::string check_attn(const SequenceRequest& r) const override {
    try {
      method_for(r.attn);
    } catch (const Error& e) {
      return fmt::format("attention method '{}': {}", r.attn, e.what());
    }
    return {};
  }
  // The method of a spec (made once per spec, shared by its sequences); null = the model's own.
  std::shared_ptr<const AttentionMethod> method_for(const std::string& spec) const {
    if (spec.empty() || spec == m_.attn) return nullptr;
    auto it = methods_.find(spec);
    if (it != methods_.end()) return it->second;
    const ModelConfig& c = m_.cfg;
    const MethodContext mc{c.n_layer, c.n_head, c.n_kv_head, c.head_dim, c.name};
    std::shared_ptr<const AttentionMethod> m = make_attention_method(spec, mc);
    methods_.emplace(spec, m);
    return m;
  }

  // Samples slot s's next token from its logits row and reports it.
  void emit(Slot& s, std::span<const float> row, const SequenceEventFn& on_event) {
    const SequenceEvent e = sample_event(s.id, s.run, m_.tok, row, s.logprobs, int64_t(s.prompt.size()), &s.pending);
    if (!on_event(e) || e.finished) s.closed = true;
  }

  // One batched decode step over every sequence with a pending token.
  void decode(const SequenceEventFn& on_event) {
    std::vector<Slot*> rows;
    std::vector<SequenceState*> seqs;
    std::vector<int32_t> ids;
    for (auto& s : open_)
      if (!s->closed && s->pending >= 0) {
        rows.push_back(s.get());
        seqs.push_back(s->state.get());
        ids.push_back(s->pending);
      }
    if (rows.empty()) return;
    const auto t0 = Clock::now();
    m_.model.decode_batch(seqs, ids, logits_);  // [rows, vocab]
    stats_.decode_s += seconds_since(t0);
    stats_.decode_tokens += int64_t(rows.size());
    const size_t V = size_t(m_.cfg.vocab_size);
    for (size_t r = 0; r < rows.size(); ++r) {
      emit(*rows[r], std::span<const float>(logits_.data() + r * V, V), on_event);
    }
  }

  // Prefill of the sequences still in their prompt, taken in turn (round robin) within a budget of
  // one chunk of tokens per step: several short prompts share a step, a long prompt takes one
  // chunk of it, so a short prompt behind a long one waits one chunk, not all. Each sequence's
  // pieces are generate's chunks (the same boundaries: the same greedy tokens); MInference-style
  // methods that estimate per prompt take the whole prompt, layer-major, as generate does.
  void prefill(const SequenceEventFn& on_event) {
    int64_t budget = chunk_ + kPieceOverheadTokens;  // one full chunk always fits
    for (size_t tries = open_.size(); tries > 0; --tries) {
      Slot* s = next_prefilling();
      if (!s) return;
      const int64_t cost = std::min(chunk_, int64_t(s->prompt.size()) - s->prefilled) + kPieceOverheadTokens;
      if (cost > budget) return;  // the step's budget is spent; its turn comes next step
      last_prefill_ = s->id;
      prefill_piece(*s, on_event);
      budget -= cost;
    }
  }

  // The next prefilling sequence after the last one served, else the first (nullptr: none).
  Slot* next_prefilling() const {
    Slot* s = nullptr;
    for (auto& o : open_)
      if (!o->closed && o->prefilling() && (!s || (s->id <= last_prefill_ && o->id > last_prefill_))) s = o.get();
    return s;
  }

  // Runs slot s's next chunk (or its whole prompt: prompt-wide methods).
  void prefill_piece(Slot& s, const SequenceEventFn& on_event) {
    const int64_t n = int64_t(s.prompt.size()), c0 = s.prefilled;
    const auto t0 = Clock::now();
    int64_t c1 = n;
    {
      const Attached on(m_.model, s.state.get());
      const std::span<const int32_t> p(s.prompt);
      if (c0 == 0 && m_.model.prompt_wide(n, chunk_)) {
        m_.model.forward_prompt(p, chunk_, 1, &logits_);
      } else {
        c1 = std::min(n, c0 + chunk_);
        m_.model.forward(p.subspan(size_t(c0), size_t(c1 - c0)), c1 == n ? 1 : 0, &logits_);
      }
    }
    stats_.prefill_s += seconds_since(t0);
    stats_.prefill_tokens += c1 - c0;
    s.prefilled = c1;
    if (c1 == n) {
      --stats_.prefilling;
      emit(s, std::span<const float>(logits_.data(), size_t(m_.cfg.vocab_size)), on_event);
    }
  }

  // Frees the closed sequences.
  void sweep() {
    std::erase_if(open_, [&](const std::unique_ptr<Slot>& s) {
      if (!s->closed) return false;
      if (s->prefilling()) --stats_.prefilling;
      release(s->reserved);
      return true;
    });
  }

  CpuBatchModel m_;
  int64_t chunk_;
  std::vector<std::unique_ptr<Slot>> open_;  // in arrival order (the oldest prefills first)
  std::vector<float> logits_;                // [rows, vocab] scratch
  int64_t last_prefill_ = 0;                 // id of the sequence the last prefill chunk was of
  mutable std::map<std::string, std::shared_ptr<const AttentionMethod>> methods_;
};

// ---- Serial: one whole sequence per step over Engine::generate ----

class SerialBatch final : public BatchBase {
 public:
  SerialBatch(Engine& eng, std::string attn, const BatchOptions& o)
      : BatchBase(eng.max_context(), o), eng_(eng), attn_(std::move(attn)) {}

  int64_t open(const SequenceRequest& r) override {
    admit(r);
    queue_.push_back({next_id_++, r});
    ++stats_.prefilling;
    return queue_.back().id;
  }

  void step(const SequenceEventFn& on_event) override {
    ++stats_.steps;
    if (queue_.empty()) return;
    const Item it = std::move(queue_.front());
    queue_.erase(queue_.begin());
    --stats_.prefilling;
    SequenceEvent e;
    e.id = it.id;
    e.prompt_tokens = int64_t(it.r.prompt.size());
    bool gone = false;
    std::string rest;  // generate's last text (id -1), sent with the finished event
    const TokenFn on_token = [&](int32_t id, const std::string& piece) {
      if (id < 0) {
        rest = piece;
        return true;
      }
      e.token = id;
      e.text = piece;
      ++e.completion_tokens;
      gone = !on_event(e);
      return !gone;
    };
    GenerateResult res;
    try {
      res = eng_.generate(it.r.prompt, it.r.sp, {}, on_token);
    } catch (...) {
      release(reservation(it.r));
      throw;
    }
    release(reservation(it.r));
    stats_.prefill_tokens += res.prompt_tokens;
    stats_.decode_tokens += int64_t(res.tokens.size());
    stats_.prefill_s += res.prefill_s;
    stats_.decode_s += res.decode_s;
    if (gone) return;
    e.token = -1;
    e.text = rest;
    e.finished = true;
    e.stop_reason = res.stop_reason;
    e.completion_tokens = int64_t(res.tokens.size());
    on_event(e);
  }

  void close(int64_t id) override {
    std::erase_if(queue_, [&](const Item& it) {
      if (it.id != id) return false;
      --stats_.prefilling;
      release(reservation(it.r));
      return true;
    });
  }

 private:
  struct Item {
    int64_t id;
    SequenceRequest r;
  };
  std::string check_attn(const SequenceRequest& r) const override {
    if (r.logprobs) return fmt::format("logprobs: this engine ({}) does not report them yet", eng_.device());
    if (r.attn.empty() || r.attn == attn_) return {};
    return fmt::format("attention method '{}' per request: this engine ({}) runs only its own ('{}')", r.attn,
                       eng_.device(), attn_);
  }
  Engine& eng_;
  std::string attn_;
  std::vector<Item> queue_;
};

}  // namespace

std::unique_ptr<SequenceBatch> make_cpu_batch(const CpuBatchModel& m, const BatchOptions& o) {
  return std::make_unique<CpuBatch>(m, o);
}

std::unique_ptr<SequenceBatch> make_serial_batch(Engine& eng, std::string attn, const BatchOptions& o) {
  return std::make_unique<SerialBatch>(eng, std::move(attn), o);
}

std::unique_ptr<SequenceBatch> Engine::start_batch(const BatchOptions& opts) {
  return make_serial_batch(*this, "", opts);
}

}  // namespace longctx

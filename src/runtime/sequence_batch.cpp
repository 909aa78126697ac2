// sequence_batch.cpp: see sequence_batch.h. The batches share the request checks and the KV
// budget (BatchBase, sequence_batch_base.h); the CPU batch runs the step loop it shares with the
// GPU batch (SteppingBatch, stepping_batch.h: one decode_batch call over every open sequence plus
// up to one chunk of prefill tokens, prefilling sequences in turn); the serial batch runs one
// whole sequence per step.
#include "runtime/sequence_batch.h"

#include <cmath>
#include <map>
#include <vector>

#include "methods/method.h"
#include "model/transformer.h"
#include "runtime/sequence_batch_base.h"
#include "runtime/sequence_run.h"
#include "runtime/stepping_batch.h"
#include "util/error.h"

namespace longctx {

namespace {

// The fixed cost of one prefill forward call (every layer's small ops and thread-pool rounds), in
// prompt tokens: on the 2-core CPU a 16-token prefill of SmolLM2-135M takes ~28% of a 512-token
// one. A step's prefill budget counts it, so many short prompts do not stall the decode streams
// longer than one chunk does.
constexpr int64_t kPieceOverheadTokens = 128;

// ---- CPU: batched decode + interleaved prefill chunks ----

class CpuBatch final : public SteppingBatch<SequenceState> {
 public:
  CpuBatch(const CpuBatchModel& m, const BatchOptions& o)
      : SteppingBatch(m.max_context, o, m.tok, m.cfg.vocab_size, kPieceOverheadTokens), m_(m) {
    chunk_ = opts_.prefill_chunk > 0 ? opts_.prefill_chunk : m_.prefill_chunk;
  }

  int64_t open(const SequenceRequest& r) override {
    return open_slot(r, [&](int64_t reserved) { return m_.model.new_sequence(reserved, method_for(r.attn)); });
  }

 private:
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

  void decode_rows(const std::vector<SequenceState*>& seqs, const std::vector<int32_t>& ids) override {
    m_.model.decode_batch(seqs, ids, logits_);
  }

  // Slot s's next chunk (generate's boundaries: the same greedy tokens), or its whole prompt,
  // layer-major, for methods that estimate per prompt (MInference), as generate does.
  int64_t prefill_piece(Slot& s) override {
    const int64_t n = int64_t(s.prompt.size()), c0 = s.prefilled;
    const Attached on(m_.model, s.seq.get());
    const std::span<const int32_t> p(s.prompt);
    if (c0 == 0 && m_.model.prompt_wide(n, chunk_)) {
      m_.model.forward_prompt(p, chunk_, 1, &logits_);
      return n;
    }
    const int64_t c1 = std::min(n, c0 + chunk_);
    m_.model.forward(p.subspan(size_t(c0), size_t(c1 - c0)), c1 == n ? 1 : 0, &logits_);
    return c1;
  }

  int64_t seq_tokens(const SequenceState& seq) const override { return seq.cache.size(); }

  CpuBatchModel m_;
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

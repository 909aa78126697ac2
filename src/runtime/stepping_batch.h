// stepping_batch.h: the step loop that the CPU batch (sequence_batch.cpp) and the GPU batch
// (sequence_batch_gpu.cpp) share: open slots, one batched decode step over every sequence with a
// pending token, then prefill pieces of the newcomers taken in turn within one chunk of tokens,
// then the closed slots freed.
//
// Why one loop: the scheduling rules (which sequence prefills next, the per-step prefill budget,
// when a slot closes) decide the greedy tokens a request gets, so both devices must apply the
// same ones. A device batch supplies only what differs (the Model's calls):
//   Seq       its per-sequence state (CPU: SequenceState, GPU: gpu::GpuSequence);
//   decode_rows   one batched decode over seqs [rows] with tokens ids [rows] -> logits [rows, vocab];
//   prefill_piece runs slot s's next piece from s.prefilled and returns the new prefilled count
//                 (logits_ row 0 = the last prompt token's logits when the prompt is done);
//   seq_tokens    tokens in a sequence's KV cache (stats).
// Prefill budget: chunk_ + piece_overhead tokens per step; a piece costs its tokens plus the
// overhead (the fixed cost of one forward call in tokens, measured per device), so one full chunk
// always fits and many short prompts do not stretch a step far past one chunk.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/sequence_batch_base.h"
#include "runtime/sequence_run.h"

namespace longctx {

template <class Seq>
class SteppingBatch : public BatchBase {
 public:
  SteppingBatch(int64_t max_context, const BatchOptions& o, const Tokenizer& tok, int64_t vocab, int64_t piece_overhead)
      : BatchBase(max_context, o), tok_(tok), vocab_(vocab), piece_overhead_(piece_overhead) {}

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
    for (const auto& s : open_) st.kv_used += seq_tokens(*s->seq);
    return st;
  }

 protected:
  struct Slot {
    int64_t id;
    std::vector<int32_t> prompt;
    int64_t reserved;  // prompt + max_tokens: the tokens it may reach
    bool logprobs;
    SequenceRun run;
    std::unique_ptr<Seq> seq;
    int64_t prefilled = 0;  // prompt tokens in the cache
    int32_t pending = -1;   // the last sampled token, which the next decode step appends
    bool closed = false;
    Slot(int64_t i, const SequenceRequest& r)
        : id(i), prompt(r.prompt), reserved(reservation(r)), logprobs(r.logprobs), run(r.sp, int64_t(r.prompt.size())) {}
    bool prefilling() const { return prefilled < int64_t(prompt.size()); }
  };

  virtual void decode_rows(const std::vector<Seq*>& seqs, const std::vector<int32_t>& ids) = 0;
  virtual int64_t prefill_piece(Slot& s) = 0;
  virtual int64_t seq_tokens(const Seq& seq) const = 0;

  // Admits r (check() and fits_now(), or an Error) and opens its slot with the state made by
  // make_seq(reserved tokens); returns the id.
  template <class MakeSeq>
  int64_t open_slot(const SequenceRequest& r, MakeSeq make_seq) {
    admit(r);
    auto s = std::make_unique<Slot>(next_id_++, r);
    try {
      s->seq = make_seq(s->reserved);
    } catch (...) {
      release(s->reserved);
      throw;
    }
    open_.push_back(std::move(s));
    ++stats_.prefilling;
    return open_.back()->id;
  }

  int64_t chunk_ = 0;
  std::vector<std::unique_ptr<Slot>> open_;  // in arrival order (the oldest prefills first)
  std::vector<float> logits_;                // [rows, vocab] scratch

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  // Samples slot s's next token from its logits row and reports it.
  void emit(Slot& s, std::span<const float> row, const SequenceEventFn& on_event) {
    const SequenceEvent e = sample_event(s.id, s.run, tok_, row, s.logprobs, int64_t(s.prompt.size()), &s.pending);
    if (!on_event(e) || e.finished) s.closed = true;
  }

  void decode(const SequenceEventFn& on_event) {
    std::vector<Slot*> rows;
    std::vector<Seq*> seqs;
    std::vector<int32_t> ids;
    for (auto& s : open_)
      if (!s->closed && s->pending >= 0) {
        rows.push_back(s.get());
        seqs.push_back(s->seq.get());
        ids.push_back(s->pending);
      }
    if (rows.empty()) return;
    const auto t0 = Clock::now();
    decode_rows(seqs, ids);  // logits_ [rows, vocab]
    stats_.decode_s += seconds_since(t0);
    stats_.decode_tokens += int64_t(rows.size());
    const size_t V = size_t(vocab_);
    for (size_t r = 0; r < rows.size(); ++r) emit(*rows[r], std::span<const float>(logits_.data() + r * V, V), on_event);
  }

  // Prefill of the sequences still in their prompt, in turn (round robin), within one chunk of
  // tokens per step: a short prompt behind a long one waits one chunk, not the whole prompt.
  void prefill(const SequenceEventFn& on_event) {
    int64_t budget = chunk_ + piece_overhead_;
    for (size_t tries = open_.size(); tries > 0; --tries) {
      Slot* s = next_prefilling();
      if (!s) return;
      const int64_t cost = std::min(chunk_, int64_t(s->prompt.size()) - s->prefilled) + piece_overhead_;
      if (cost > budget) return;  // the step's budget is spent; its turn comes next step
      last_prefill_ = s->id;
      const int64_t c0 = s->prefilled;
      const auto t0 = Clock::now();
      const int64_t c1 = prefill_piece(*s);
      stats_.prefill_s += seconds_since(t0);
      stats_.prefill_tokens += c1 - c0;
      s->prefilled = c1;
      if (!s->prefilling()) {
        --stats_.prefilling;
        emit(*s, std::span<const float>(logits_.data(), size_t(vocab_)), on_event);
      }
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

  // Frees the closed sequences (their KV goes back with their Seq).
  void sweep() {
    std::erase_if(open_, [&](const std::unique_ptr<Slot>& s) {
      if (!s->closed) return false;
      if (s->prefilling()) --stats_.prefilling;
      release(s->reserved);
      return true;
    });
  }

  const Tokenizer& tok_;
  int64_t vocab_;
  int64_t piece_overhead_;
  int64_t last_prefill_ = 0;  // id of the sequence the last prefill piece was of
};

}  // namespace longctx

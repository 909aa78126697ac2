// sequence_batch_base.h: what every SequenceBatch shares (sequence_batch.cpp: CPU and serial;
// sequence_batch_gpu.cpp: GPU): the request checks (check()), the KV budget in tokens and the
// open-sequence count (admit/release), the stats. A subclass adds its attention check and may
// tighten fits_now (the GPU batch: free pages of its pool).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "longctx/engine.h"
#include "runtime/sequence_run.h"
#include "util/error.h"

namespace longctx {

// KV tokens a request reserves for its whole life (its cache never grows past this).
inline int64_t reservation(const SequenceRequest& r) { return int64_t(r.prompt.size()) + std::max(0, r.sp.max_tokens); }

// The checks and the KV budget of the batches; open sequences are counted by the subclass.
class BatchBase : public SequenceBatch {
 public:
  BatchBase(int64_t max_context, const BatchOptions& o) : max_ctx_(max_context), opts_(o) {
    if (opts_.kv_tokens <= 0) opts_.kv_tokens = max_context;
    if (opts_.max_sequences <= 0) fail("a batch needs room for at least one sequence (got {})", opts_.max_sequences);
    stats_.kv_capacity = opts_.kv_tokens;
  }

  std::string check(const SequenceRequest& r) const override {
    const SamplingParams& sp = r.sp;
    const int64_t n = int64_t(r.prompt.size());
    if (n == 0) return "the prompt is empty (no tokens)";
    if (sp.max_tokens < 0) return fmt::format("max_tokens must be >= 0 (got {})", sp.max_tokens);
    if (!std::isfinite(sp.temperature) || sp.temperature < 0)
      return fmt::format("temperature must be a finite number >= 0 (got {})", sp.temperature);
    if (!(sp.top_p > 0 && sp.top_p <= 1)) return fmt::format("top_p must be in (0, 1] (got {})", sp.top_p);
    if (sp.top_k < 0) return fmt::format("top_k must be >= 0 (got {})", sp.top_k);
    if (n > max_ctx_) return fmt::format("the prompt has {} tokens, more than the model's context of {} tokens", n, max_ctx_);
    if (n + sp.max_tokens > max_ctx_)
      return fmt::format("the prompt ({} tokens) plus max_tokens {} exceeds the context of {} tokens; lower max_tokens "
                         "to at most {}", n, sp.max_tokens, max_ctx_, max_ctx_ - n);
    if (reservation(r) > opts_.kv_tokens)
      return fmt::format("the request needs {} KV cache tokens (prompt + max_tokens) but the whole KV budget is {}",
                         reservation(r), opts_.kv_tokens);
    return check_attn(r);
  }
  bool fits_now(const SequenceRequest& r) const override {
    return stats_.sequences < opts_.max_sequences && stats_.kv_tokens + reservation(r) <= opts_.kv_tokens;
  }
  BatchStats stats() const override { return stats_; }

 protected:
  virtual std::string check_attn(const SequenceRequest& r) const = 0;
  // Throws unless the request can open now; reserves its KV tokens.
  void admit(const SequenceRequest& r) {
    if (const std::string why = check(r); !why.empty()) throw Error(why);
    if (!fits_now(r))
      fail("no room for the request now ({} of {} KV tokens and {} of {} sequences in use)", stats_.kv_tokens,
           opts_.kv_tokens, stats_.sequences, opts_.max_sequences);
    stats_.kv_tokens += reservation(r);
    ++stats_.sequences;
  }
  void release(int64_t reserved) {
    stats_.kv_tokens -= reserved;
    --stats_.sequences;
  }

  int64_t max_ctx_;
  BatchOptions opts_;
  BatchStats stats_;
  int64_t next_id_ = 1;
};

// Samples sequence `id`'s next token from its logits row [vocab] into an event (its text, and its
// end when the run finishes). *pending = the token the next decode step appends, -1 when none.
inline SequenceEvent sample_event(int64_t id, SequenceRun& run, const Tokenizer& tok, std::span<const float> row,
                                  bool logprobs, int64_t prompt_tokens, int32_t* pending) {
  SequenceEvent e;
  e.id = id;
  int32_t t = -1;
  if (run.next(tok, row, &t)) {
    e.token = t;
    if (logprobs) e.logprob = log_prob(row.data(), int64_t(row.size()), t);
    e.text = run.stream.take_ready();
  }
  *pending = -1;
  if (run.finished()) {
    e.finished = true;
    e.stop_reason = run.res.stop_reason;
    e.text += run.stream.take_rest();
  } else {
    *pending = t;
  }
  e.prompt_tokens = prompt_tokens;
  e.completion_tokens = int64_t(run.res.tokens.size());
  return e;
}

}  // namespace longctx

// sequence_run.h: one sequence's sampling and stopping (SequenceRun), shared by the engine's
// generate/generate_batch and the step-level batch (sequence_batch.cpp); the scope guard that
// attaches a sequence to a model; log p(token) from a row of logits.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

#include "longctx/engine.h"
#include "model/transformer.h"
#include "runtime/sampler.h"
#include "runtime/text_stream.h"

namespace longctx {

// Attaches a sequence to a model (CPU Transformer or GpuTransformer) for a scope (the model's own
// sequence again after it, also on an error).
template <class Model, class Seq>
struct Attached {
  Model& model;
  Attached(Model& m, Seq* s) : model(m) { model.attach(s); }
  ~Attached() { model.attach(nullptr); }
  Attached(const Attached&) = delete;
  Attached& operator=(const Attached&) = delete;
};

// One sequence's sampler, text stream (stop strings) and result so far.
struct SequenceRun {
  SamplingParams sp;
  Sampler sampler;
  TextStream stream;
  GenerateResult res;
  bool done = false;

  SequenceRun(const SamplingParams& p, int64_t prompt_tokens) : sp(p), sampler(p), stream(p.stop) {
    res.prompt_tokens = prompt_tokens;
    res.stop_reason = "length";
    done = p.max_tokens <= 0;
  }
  // Samples the next token from logits [vocab]. False when the sequence ends without a token
  // (EOS, or already finished); else *id is the token, and finished() says whether it was the last
  // (it completed a stop string, or reached max_tokens).
  bool next(const Tokenizer& tok, std::span<const float> logits, int32_t* id) {
    if (done) return false;
    const int32_t t = sampler.sample(logits);
    if (sp.stop_at_eos && tok.is_end_of_generation(t)) {
      res.stop_reason = "eos";
      done = true;
      return false;
    }
    res.tokens.push_back(t);
    if (stream.push(tok.token_bytes(t))) {
      res.stop_reason = "stop";
      done = true;
    } else if (int64_t(res.tokens.size()) >= sp.max_tokens) {
      done = true;  // "length"
    }
    *id = t;
    return true;
  }
  bool finished() const { return done; }
};

// log p(token `next` | row) from one row of logits [V], in double (stable log-sum-exp).
inline float log_prob(const float* row, int64_t V, int32_t next) {
  float mx = row[0];
  for (int64_t j = 1; j < V; ++j) mx = std::max(mx, row[j]);
  double sum = 0;
  for (int64_t j = 0; j < V; ++j) sum += std::exp(double(row[j] - mx));
  return float(row[next] - mx - std::log(sum));
}

}  // namespace longctx

// transformer.h: the CPU forward pass of Llama-family decoders (Llama 2/3/3.1, Mistral,
// SmolLM2, Qwen2/2.5), over one sequence with a KV cache, one chunk of tokens at a time.
//
// Per layer: x += Wo * attn(rope(Wq h), rope(Wk h), Wv h) with h = rmsnorm(x);
//            x += Wdown (silu(Wgate h) * Wup h)          with h = rmsnorm(x).
// Attention goes through an AttentionMethod (dense, a_shape, minference, ...); the LM head runs
// only for the positions the caller asks for, so a long prefill never holds [T, vocab] logits.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "longctx/engine.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/weights.h"
#include "sparse/attention_method.h"

namespace longctx {

class ThreadPool;

class Transformer {
 public:
  Transformer(ModelConfig cfg, ModelWeights w, std::unique_ptr<AttentionMethod> method, ThreadPool& pool);

  const ModelConfig& config() const { return cfg_; }
  KvCache& cache() { return cache_; }
  void set_method(std::unique_ptr<AttentionMethod> m) { method_ = std::move(m); }

  // Clears the cache and reserves room for `capacity` tokens.
  void reset(int64_t capacity);

  // Runs tokens at positions cache.size() .. cache.size()+T-1 and appends their K/V.
  // Writes logits [n_logits, vocab] of the last n_logits positions (0 = none) into `logits`.
  // observer (optional) receives each layer's Q/K/V (K/V = the whole cached prefix).
  void forward(std::span<const int32_t> tokens, int64_t n_logits, std::vector<float>* logits,
               const AttnObserver* observer = nullptr);

 private:
  ModelConfig cfg_;
  ModelWeights w_;
  std::unique_ptr<AttentionMethod> method_;
  ThreadPool& pool_;
  KvCache cache_;
  std::vector<float> inv_freq_;  // [head_dim/2]
};

}  // namespace longctx

// attention_method.h: the interface between the model and an attention method.
//
// The model computes Q/K/V, appends K/V to the cache and calls the method once per layer and
// chunk; the method decides which keys each query attends to and computes the output. Methods
// never see weights; the model never knows which method runs. Dense is the default method.
//
// Created from the --attn string: "dense", "a_shape[=SINK,WINDOW]", "minference[=CONFIG.json]".
#pragma once
#include <memory>
#include <string>

#include "kernels/params/attention.h"

namespace longctx {

class ThreadPool;

struct MethodContext {
  int n_layer = 0;
  int n_head = 0;
  int n_kv_head = 0;
  int head_dim = 0;
  std::string model_name;  // for messages ("no MInference config for <model>")
};

class AttentionMethod {
 public:
  virtual ~AttentionMethod() = default;
  virtual std::string name() const = 0;
  // Prefill: p.n_q queries (positions q_pos0..) against p.n_kv cached keys, causal.
  virtual void prefill(const AttnParams& p, ThreadPool& pool) = 0;
  // Decode: one query per call (p.n_q == 1). Dense unless the method sparsifies decode.
  virtual void decode(const AttnParams& p, ThreadPool& pool) = 0;

  // Prompt-wide estimation (layer-major prefill, Transformer::forward_prompt). A method that
  // estimates from the whole prompt at `layer` (MInference's vertical-slash lines, from the
  // prompt's last 64 queries as in the paper's reference) says so here; the model then computes
  // every chunk's K/V of the layer first and calls prepare_prompt with the prompt's last queries
  // (p.n_q rows at p.q_pos0) against all its keys (p.n_kv), then prefill() per chunk, then
  // end_prompt(). Default: no prompt-wide estimate (every chunk stands alone).
  virtual bool estimates_per_prompt(int /*layer*/, int64_t /*n_kv*/) const { return false; }
  virtual void prepare_prompt(const AttnParams& /*p*/, ThreadPool& /*pool*/) {}
  virtual void end_prompt() {}
};

// Parses the --attn spec; throws Error naming the unknown method or bad parameter.
std::unique_ptr<AttentionMethod> make_attention_method(const std::string& spec, const MethodContext& ctx);

}  // namespace longctx

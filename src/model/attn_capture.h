// attn_capture.h: one layer's attention inputs handed to an observer during a capture (attention
// fidelity evaluation, MInference pattern search). Below the engine so that the CPU and GPU models
// can produce it without including the public API (include/longctx/engine.h re-exports it).
#pragma once
#include <cstdint>
#include <functional>

namespace longctx {

// One layer's attention inputs during a capture (post-RoPE Q and K), host fp32.
struct AttnCapture {
  int layer = 0;
  int64_t n_tokens = 0;
  int n_head = 0, n_kv_head = 0, head_dim = 0;
  const float* q = nullptr;  // [n_tokens, n_head, head_dim]
  const float* k = nullptr;  // [n_tokens, n_kv_head, head_dim]
  const float* v = nullptr;  // [n_tokens, n_kv_head, head_dim]
};
using AttnObserver = std::function<void(const AttnCapture&)>;

}  // namespace longctx

// attention.h: parameters of one attention call (one layer, a chunk of queries vs the KV prefix).
//
// Plain data, no CUDA types, shared by the CPU reference (kernels/ref) and the methods in
// sparse/. Layout (row-major, fp32 on the CPU path):
//   q   [n_q,  n_head,    head_dim]   rows at q + (i*n_head + h)*head_dim
//   k,v [n_kv, n_kv_head, head_dim]   key j has absolute position j (the cache prefix)
//   o   [n_q,  n_head,    head_dim]
//   lse [n_head, n_q]  (optional)     natural-log log-sum-exp of the scaled scores per row
// Query i sits at absolute position q_pos0 + i; with causal it sees keys 0..q_pos0+i, and with a
// sliding window w > 0 (a per-layer property of the model) only keys (q_pos0+i - w, q_pos0+i].
// GQA: query head h reads KV head h / (n_head / n_kv_head).
#pragma once
#include <cstdint>

namespace longctx {

struct AttnParams {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* o = nullptr;
  float* lse = nullptr;  // optional
  int64_t n_q = 0;
  int64_t n_kv = 0;
  int n_head = 0;
  int n_kv_head = 0;
  int head_dim = 0;
  int64_t q_pos0 = 0;
  float scale = 0.f;  // usually 1/sqrt(head_dim)
  bool causal = true;
  int64_t window = 0;  // 0: no window; > 0 (causal only): query at p sees keys (p - window, p]
  int layer = -1;  // for methods with per-layer state/configs; -1 if not from a model
};

}  // namespace longctx

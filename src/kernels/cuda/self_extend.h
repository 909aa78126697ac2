// self_extend.h (cuda): the two kernels Self-Extend adds on the GPU: joining its near and far
// attention parts, and preparing a decode step from its device length (methods/self_extend/
// self_extend_gpu.h runs the step; self_extend.h has the positions (SE1)-(SE4)).
//
// self_extend_merge:
// What: per row the near part (keys q - k < W at their own positions) and the far part (keys
// q - k >= W at grouped positions) are disjoint key sets, each attended exactly by the dense
// kernels with its LSE; this merges them as one softmax over both (SE3):
//   lse = log(exp(lse_near) + exp(lse_far)),  o = exp(lse_near - lse) o_near + exp(lse_far - lse) o_far.
// Only rows that have far keys (q >= W) need it: the far part covers chunk rows far_row0..n_q-1,
// the rows before keep o_near as it is. A far lse of -inf (no keys) leaves the row unchanged.
// Why not cuda::merge_attention_states: it takes fp32 parts with one row stride for o and lse,
// while the dense kernels write bf16 o [n_q, n_head, d] and lse [n_head, n_q] (decode: lse
// [1, n_head], the same layout with n_q = 1).
// Tensors (device):
//   o        bf16 [n_q, n_head, head_dim]     in: the near part's output, out: the merged output
//   lse_near fp32 [n_head, n_q]
//   o_far    bf16 [n_far, n_head, head_dim]   row r = chunk row far_row0 + r
//   lse_far  fp32 [n_head, n_far]
// Tested in tests/gpu/test_gpu_self_extend.cpp (through the whole step, against an fp64 oracle).
#pragma once
#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace longctx::cuda {

struct SelfExtendMergeParams {
  void* o = nullptr;
  const float* lse_near = nullptr;
  const void* o_far = nullptr;
  const float* lse_far = nullptr;
  int64_t n_q = 0;       // rows of o (chunk rows)
  int64_t far_row0 = 0;  // the first chunk row with far keys
  int n_head = 0;
  int head_dim = 0;      // even, <= 256
};
void self_extend_merge(const SelfExtendMergeParams& p, Stream s = nullptr);

// self_extend_decode_prep: everything of a decode step (one query at pos = n_kv - 1) that
// depends on its length, read on the device (n_kv_dev: the model's step length, which a replayed
// CUDA graph sees change), so the step can be captured once and replayed:
//   key row pos  rotated into the layer's own copy at pos (SE1) and grouped copy at key_pos[pos] (SE2);
//   the query    rotated at pos (near) and at query_pos[pos] (far, SE2's query position);
//   lens         near = n_kv, far = max(n_kv - W, 0): the two decode attentions' kv_lens.
// A far length of 0 (pos < W) is no refusal: the decode kernel writes that row O = 0, LSE = -inf
// (decode_split.cuh: a row without keys), and self_extend_merge leaves the near part as it is, so
// no host branch is needed. The rotation arithmetic is cuda::rope's (rope_rotate.cuh): a row
// rotated here equals cuda::rope's at the same position bit for bit.
// How: 4 CTAs (own key, grouped key, own query, grouped query), each computes its (cos, sin) once
// and rotates its row's heads; CTA 0 writes lens. Tested against a CPU twin and cuda::rope in
// tests/gpu/test_gpu_self_extend.cpp.
// Tensors (device):
//   k         bf16 [>= n_kv, n_kv_head, head_dim]  un-rotated keys, row = position
//   k_own     bf16 [>= n_kv, n_kv_head, head_dim]  out: row pos only
//   k_grp     bf16 [>= n_kv, n_kv_head, head_dim]  out: row pos only
//   q         bf16 [n_head, head_dim]              the step's query, un-rotated
//   q_own     bf16 [n_head, head_dim]              out
//   q_grp     bf16 [n_head, head_dim]              out
//   key_pos   int32 [>= n_kv]  floor(p / G);  query_pos int32 [>= n_kv]  floor(p / G) + W - floor(W / G)
//   inv_freq  fp32 [head_dim / 2]
//   lens      int32 [2]        out: near, far key counts
struct SelfExtendDecodePrepParams {
  const int32_t* n_kv_dev = nullptr;  // device int32 [1]: the step's key count (null: n_kv below)
  int64_t n_kv = 0;                   // the key count when n_kv_dev is null (>= 1)
  const void* k = nullptr;
  void* k_own = nullptr;
  void* k_grp = nullptr;
  const void* q = nullptr;
  void* q_own = nullptr;
  void* q_grp = nullptr;
  const int32_t* key_pos = nullptr;
  const int32_t* query_pos = nullptr;
  const float* inv_freq = nullptr;
  float attn_factor = 1.f;
  int n_head = 0, n_kv_head = 0;
  int head_dim = 0;       // a multiple of 8, <= 512
  int64_t neighbor = 0;   // W
  int32_t* lens = nullptr;
};
void self_extend_decode_prep(const SelfExtendDecodePrepParams& p, Stream s = nullptr);

}  // namespace longctx::cuda

// self_extend.h (cuda): the one kernel Self-Extend adds on the GPU: joining its near and far
// attention parts (methods/self_extend/self_extend_gpu.h runs the step; self_extend.h has the
// positions (SE1)-(SE4)).
//
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

}  // namespace longctx::cuda

// head_error.h (cuda): per-head sums of squared difference and squared norm of two bf16
// attention outputs, on the GPU: the pattern search's error measure (gpu/gpu_search.h).
//
// What: for a (candidate) and b (reference), both bf16 [n_rows, n_head, head_dim] token-major
// (kernels/cuda/attention.h's o layout), per query head h
//   out[2h] = sum over rows i, dims t of (a[i,h,t] - b[i,h,t])^2,   out[2h+1] = sum of b[i,h,t]^2,
// in fp64. The CPU twin is kernels/ref/head_error.h (fp32 inputs, same sums).
// Why: the search compares every candidate's sparse output with the dense one over all rows of
// a long sample; copying both outputs to the host per candidate would cost more than the kernel.
// How: head_error.cu. Pass 1: a fixed grid of kHeadErrorParts CTAs per head, each summing a
// strided share of the head's elements in fp64 into the workspace; pass 2: one CTA per head adds
// its parts in a fixed order. So the sums are deterministic (same inputs, same bits). Any
// head_dim, any n_rows >= 0; asynchronous on stream s. Tested in tests/cuda/test_head_error.cpp.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace longctx::cuda {

inline constexpr int kHeadErrorParts = 64;  // pass-1 CTAs per head

struct HeadErrorParams {
  const void* a = nullptr;  // bf16 [n_rows, n_head, head_dim] candidate output
  const void* b = nullptr;  // bf16 [n_rows, n_head, head_dim] reference output
  double* out = nullptr;    // device fp64 [n_head, 2]: {sum (a - b)^2, sum b^2}
  int64_t n_rows = 0;
  int n_head = 0, head_dim = 0;
  void* workspace = nullptr;  // device, head_error_workspace_bytes(n_head) bytes
  size_t workspace_bytes = 0;
};

size_t head_error_workspace_bytes(int n_head);
// Throws Error naming the problem on a bad shape, a missing pointer or a short workspace.
void head_error_sums(const HeadErrorParams& p, Stream s = nullptr);

}  // namespace longctx::cuda

// head_error.h (ref): per-head sums of squared difference and squared norm of two attention
// outputs, and the relative L2 error they give: the pattern search's error measure (paper
// Algorithm 1: a candidate's output vs the dense output), on the CPU.
//
// What: for outputs a (candidate) and b (reference), both [n_rows, n_head, head_dim] fp32
// token-major (the layout of kernels/params/attention.h), per query head h
//   diff2[h] = sum over rows i, dims t of (a[i,h,t] - b[i,h,t])^2,   norm2[h] = sum of b[i,h,t]^2,
// accumulated in fp64. rel_l2_error(diff2, norm2) = sqrt(diff2 / norm2) (sqrt(diff2) when b is 0).
// Why: the CPU twin of kernels/cuda/head_error.h (the GPU scorer), so both scorers measure the
// same thing the same way. Tested in tests/sparse/test_pattern_search.cpp (the CPU scorer) and,
// for the GPU kernel, tests/cuda/test_head_error.cpp against an fp64 oracle.
#pragma once
#include <cstdint>
#include <vector>

namespace longctx {

struct HeadErrorRefParams {
  const float* a = nullptr;  // [n_rows, n_head, head_dim] candidate output
  const float* b = nullptr;  // [n_rows, n_head, head_dim] reference (dense) output
  int64_t n_rows = 0;
  int n_head = 0, head_dim = 0;
};

struct HeadErrorSums {
  std::vector<double> diff2;  // [n_head] sum (a - b)^2
  std::vector<double> norm2;  // [n_head] sum b^2
};

HeadErrorSums head_error_sums_ref(const HeadErrorRefParams& p);

// ||a - b|| / ||b|| from the sums (||a - b|| when ||b|| = 0).
double rel_l2_error(double diff2, double norm2);

}  // namespace longctx

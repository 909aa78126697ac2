// selection_cache.h (cuda): TokenSelect's selection-cache test on the device (paper Alg. 1): the
// cosine of a decode step's selection query to the query of the layer's last selection.
//
// What: out[0] = a.b / sqrt(|a|^2 |b|^2) over fp32 vectors a, b [n] (0 when either is zero),
// accumulated in fp64 like the CPU twin (TokenSelectMethod's cosine, tokenselect_method.cpp), so
// a hit or miss differs from the CPU's only when the inputs do (bf16 vs fp32 queries).
// Tested against an fp64 oracle by tests/cuda/test_tokenselect_step.cpp.
// How: one CTA; each thread sums a strided slice, then a shared-memory tree reduction.
#pragma once
#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace longctx::cuda {

struct CosineParams {
  const float* a = nullptr;  // fp32 [n]
  const float* b = nullptr;  // fp32 [n]
  int64_t n = 0;
  float* out = nullptr;      // fp32 [1]
};
void cosine(const CosineParams& p, Stream s = nullptr);

}  // namespace longctx::cuda

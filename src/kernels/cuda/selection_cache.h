// selection_cache.h (cuda): TokenSelect's selection-cache test on the device (paper Alg. 1): the
// cosine of a decode step's selection query to the query of the layer's last selection.
//
// What: out[0] = a.b / sqrt(|a|^2 |b|^2) over fp32 vectors a, b [n] (0 when either is zero),
// accumulated in fp64 like the CPU twin (TokenSelectMethod's cosine, tokenselect_method.cpp), so
// a hit or miss differs from the CPU's only when the inputs do (bf16 vs fp32 queries).
// Tested against an fp64 oracle by tests/cuda/test_tokenselect_step.cpp.
// With `hit` set, the same kernel also decides the cache on the device (no host sync, so the
// decode step needs no host branch): *hit = (*has != 0 && theta <= 1 && double(cosine) >= theta),
// the host rule of TokenSelectMethod (theta > 1: never a hit). The selection kernels then read
// *hit as their skip flag, and cache_update either restores the cached selection (hit) or stores
// the new one (miss), counting hits and misses on the device.
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
  int32_t* hit = nullptr;    // device int32 [1] or nullptr: the cache decision (see above)
  const int32_t* has = nullptr;  // device int32 [1]: a selection is cached (needed with hit)
  double theta = 2.0;
};
void cosine(const CosineParams& p, Stream s = nullptr);

// After a decode step's (possibly skipped) selection: on *hit, selected <- keys and ++counts[0];
// else keys <- selected, q <- q_sel, *has = 1 and ++counts[1].
struct CacheUpdateParams {
  const int32_t* hit = nullptr;  // device int32 [1]
  int32_t* keys = nullptr;       // int32 [k] the layer's cached positions
  int32_t* selected = nullptr;   // int32 [k] the step's selected positions
  int64_t k = 0;
  float* q = nullptr;            // fp32 [n_q] the layer's cached selection query
  const float* q_sel = nullptr;  // fp32 [n_q] the step's selection query
  int64_t n_q = 0;
  int32_t* has = nullptr;        // int32 [1] the layer's "a selection is cached"
  int64_t* counts = nullptr;     // int64 [2] hits, misses
};
void cache_update(const CacheUpdateParams& p, Stream s = nullptr);

}  // namespace longctx::cuda

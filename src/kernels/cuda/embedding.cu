// embedding.cu (cuda): token embedding gather, bf16 table -> bf16 rows.
// What/layout: ops.h (EmbeddingParams). Tested in tests/cuda/test_ops.cpp.
// How: one CTA per token, 16-byte copies; ids outside [0, vocab) produce a zero row (the
// engine validates ids on the host; this only keeps a bad id from reading out of bounds).
#include <cuda_bf16.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/vec.cuh"

namespace longctx::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) embedding_kernel(const EmbeddingParams p) {
  const int64_t t = blockIdx.x;
  const int32_t id = p.ids[t];
  const bool ok = id >= 0 && id < p.vocab;
  const uint4* src = reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p.table) + int64_t(ok ? id : 0) * p.dim);
  uint4* dst = reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.out) + t * p.dim);
  const int64_t n = p.dim / vec::kVec;
  if (p.scale == 1.f) {
    for (int64_t i = threadIdx.x; i < n; i += kThreads) dst[i] = ok ? src[i] : make_uint4(0, 0, 0, 0);
    return;
  }
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    float f[8];
    vec::load8(reinterpret_cast<const __nv_bfloat16*>(src + i), f);
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = ok ? f[e] * p.scale : 0.f;
    vec::store8(reinterpret_cast<__nv_bfloat16*>(dst + i), f);
  }
}

}  // namespace

void embedding(const EmbeddingParams& p, Stream s) {
  LC_REQUIRE(p.table && p.ids && p.out, "embedding: null pointer");
  LC_REQUIRE(p.dim > 0 && p.dim % vec::kVec == 0, "embedding: dim %lld must be a positive multiple of 8",
             (long long)p.dim);
  LC_REQUIRE(vec::aligned16(p.table) && vec::aligned16(p.out), "embedding: table/out must be 16-byte aligned");
  if (p.n_tokens == 0) return;
  LC_REQUIRE(p.n_tokens <= 0x7fffffff, "embedding: too many tokens");
  embedding_kernel<<<unsigned(p.n_tokens), kThreads, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("embedding_kernel n_tokens=%lld dim=%lld vocab=%lld", (long long)p.n_tokens, (long long)p.dim,
                  (long long)p.vocab);
}

}  // namespace longctx::cuda

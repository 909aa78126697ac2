// selection_cache.cu: see selection_cache.h.
#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/selection_cache.h"

namespace longctx::cuda {

namespace {

constexpr int kThreads = 256;  // one CTA: n is n_head * head_dim (a few thousand)

__global__ void __launch_bounds__(kThreads) cosine_kernel(CosineParams p) {
  __shared__ double ab[kThreads], aa[kThreads], bb[kThreads];
  double s_ab = 0, s_aa = 0, s_bb = 0;
  for (int64_t i = threadIdx.x; i < p.n; i += kThreads) {
    const double x = p.a[i], y = p.b[i];
    s_ab += x * y, s_aa += x * x, s_bb += y * y;
  }
  ab[threadIdx.x] = s_ab, aa[threadIdx.x] = s_aa, bb[threadIdx.x] = s_bb;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) {
      ab[threadIdx.x] += ab[threadIdx.x + w];
      aa[threadIdx.x] += aa[threadIdx.x + w];
      bb[threadIdx.x] += bb[threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float c = aa[0] > 0 && bb[0] > 0 ? float(ab[0] / sqrt(aa[0] * bb[0])) : 0.f;
    p.out[0] = c;
    if (p.hit) p.hit[0] = *p.has != 0 && p.theta <= 1.0 && double(c) >= p.theta ? 1 : 0;
  }
}

__global__ void __launch_bounds__(kThreads) cache_update_kernel(CacheUpdateParams p) {
  const bool hit = *p.hit != 0;
  for (int64_t i = threadIdx.x; i < p.k; i += kThreads) {
    if (hit) p.selected[i] = p.keys[i];
    else p.keys[i] = p.selected[i];
  }
  if (!hit)
    for (int64_t i = threadIdx.x; i < p.n_q; i += kThreads) p.q[i] = p.q_sel[i];
  if (threadIdx.x == 0) {
    if (!hit) *p.has = 1;
    ++p.counts[hit ? 0 : 1];
  }
}

}  // namespace

void cosine(const CosineParams& p, Stream s) {
  LC_REQUIRE(!p.hit || p.has, "cosine: a cache decision without its flag");
  LC_REQUIRE(p.a && p.b && p.out && p.n > 0, "cosine: vectors %s, n %lld", p.a && p.b && p.out ? "set" : "missing",
             (long long)p.n);
  cosine_kernel<<<1, kThreads, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("cosine (n %lld)", (long long)p.n);
}

void cache_update(const CacheUpdateParams& p, Stream s) {
  LC_REQUIRE(p.hit && p.keys && p.selected && p.q && p.q_sel && p.has && p.counts && p.k > 0 && p.n_q > 0,
             "cache_update: k %lld, n_q %lld or a pointer missing", (long long)p.k, (long long)p.n_q);
  cache_update_kernel<<<1, kThreads, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("cache_update (k %lld)", (long long)p.k);
}

}  // namespace longctx::cuda

// paged_dot.cu: see paged_dot.h.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/paged_dot.h"

namespace longctx::cuda {

namespace {

constexpr int kWarps = 4;         // warps per CTA
constexpr int kSlotsPerWarp = 32;  // one slot per lane after the reductions

template <int D, int G>
__global__ void paged_dot_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                                 const int32_t* __restrict__ slots, float* __restrict__ scores, int64_t n_slot,
                                 int n_kv_head) {
  constexpr int E = D / 32;  // elements per lane
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, kvh = blockIdx.y;
  const int64_t j0 = (int64_t(blockIdx.x) * kWarps + warp) * kSlotsPerWarp;
  if (j0 >= n_slot) return;
  float qr[G][E];
#pragma unroll
  for (int hh = 0; hh < G; ++hh)
#pragma unroll
    for (int e = 0; e < E; ++e) qr[hh][e] = __bfloat162float(q[(int64_t(kvh) * G + hh) * D + lane * E + e]);
  float mine[G];  // lane t: the scores of slot j0 + t
#pragma unroll
  for (int hh = 0; hh < G; ++hh) mine[hh] = 0.f;
  const int64_t n = n_slot - j0 < kSlotsPerWarp ? n_slot - j0 : int64_t(kSlotsPerWarp);
  for (int t = 0; t < n; ++t) {
    const __nv_bfloat16* kr = k + (int64_t(slots[j0 + t]) * n_kv_head + kvh) * D + lane * E;
    float kv[E];
    if constexpr (E == 4) {
      const uint2 raw = *reinterpret_cast<const uint2*>(kr);
      const __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
      const __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
      kv[0] = __low2float(a), kv[1] = __high2float(a), kv[2] = __low2float(b), kv[3] = __high2float(b);
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e) kv[e] = __bfloat162float(kr[e]);
    }
#pragma unroll
    for (int hh = 0; hh < G; ++hh) {
      float acc = 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) acc = fmaf(qr[hh][e], kv[e], acc);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
      if (lane == t) mine[hh] = acc;
    }
  }
  if (lane < n)
#pragma unroll
    for (int hh = 0; hh < G; ++hh) scores[(int64_t(kvh) * G + hh) * n_slot + j0 + lane] = mine[hh];
}

template <int D, int G>
void launch(const PagedDotParams& p, cudaStream_t s) {
  const int64_t per_cta = int64_t(kWarps) * kSlotsPerWarp;
  const dim3 grid(unsigned((p.n_slot + per_cta - 1) / per_cta), unsigned(p.n_kv_head));
  paged_dot_kernel<D, G><<<grid, kWarps * 32, 0, s>>>(static_cast<const __nv_bfloat16*>(p.q),
                                                      static_cast<const __nv_bfloat16*>(p.k_pool), p.slots, p.scores,
                                                      p.n_slot, p.n_kv_head);
}

template <int D>
void dispatch_g(const PagedDotParams& p, int g, cudaStream_t s) {
  switch (g) {
    case 1: return launch<D, 1>(p, s);
    case 2: return launch<D, 2>(p, s);
    case 4: return launch<D, 4>(p, s);
    case 7: return launch<D, 7>(p, s);
    case 8: return launch<D, 8>(p, s);
    default: LC_REQUIRE(false, "paged_dot: GQA group %d is not built (1, 2, 4, 7, 8)", g);
  }
}

}  // namespace

void paged_dot(const PagedDotParams& p, Stream s) {
  LC_REQUIRE(p.n_head > 0 && p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0, "paged_dot: heads %d / %d", p.n_head, p.n_kv_head);
  LC_REQUIRE(p.head_dim == 64 || p.head_dim == 128, "paged_dot: head_dim %d (64 or 128)", p.head_dim);
  if (p.n_slot <= 0) return;
  const auto st = static_cast<cudaStream_t>(s);
  const int g = p.n_head / p.n_kv_head;
  if (p.head_dim == 128) dispatch_g<128>(p, g, st);
  else dispatch_g<64>(p, g, st);
  LC_LAUNCH_CHECK("paged_dot (n_slot %lld, heads %d/%d, d %d)", (long long)p.n_slot, p.n_head, p.n_kv_head, p.head_dim);
}

}  // namespace longctx::cuda

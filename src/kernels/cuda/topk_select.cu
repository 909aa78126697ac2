// topk_select.cu: see topk_select.h.
#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/topk_select.h"

namespace longctx::cuda {

namespace {

constexpr int kThreads = 1024;  // one CTA: the whole select runs without a grid-wide sync
constexpr int kWarps = kThreads / 32;
constexpr int kDigitBits = 8;   // four radix passes over the 32-bit keys
constexpr int kBins = 1 << kDigitBits;
constexpr int kBinsPerLane = kBins / 32;

// Order-preserving key: a > b (as floats, NaN as -inf, -0 == +0) iff key(a) > key(b).
__device__ uint32_t order_key(float v) {
  if (isnan(v)) v = -INFINITY;
  if (v == 0.f) v = 0.f;
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ uint32_t lanes_below(int lane) { return (1u << lane) - 1u; }

__global__ void __launch_bounds__(kThreads) top_k_select_kernel(TopKSelectParams p) {
  if (p.skip && *p.skip != 0) return;
  const int64_t M = p.m_dev ? min(max(int64_t(*p.m_dev) - p.m_sub, int64_t(0)), p.max_M) : p.max_M;
  const int64_t k = min(p.k, M);
  if (k <= 0) return;
  __shared__ uint32_t hist[kBins];
  __shared__ uint32_t s_prefix, s_need;
  __shared__ uint32_t s_gt[kWarps], s_eq[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  // 1. T = the k-th largest key; need = how many keys equal to T are kept (the first in index order).
  //    k == M keeps everything: T = 0 lies below every key (order_key never gives 0).
  uint32_t T = 0, need = 0;
  if (k < M) {
    uint32_t prefix = 0, mask = 0;
    need = uint32_t(k);
    for (int shift = 32 - kDigitBits; shift >= 0; shift -= kDigitBits) {
      for (int i = threadIdx.x; i < kBins; i += kThreads) hist[i] = 0;
      __syncthreads();
      for (int64_t j0 = 0; j0 < M; j0 += kThreads) {  // M is uniform: whole warps iterate together
        const int64_t j = j0 + threadIdx.x;
        bool in = false;
        uint32_t bin = 0;
        if (j < M) {
          const uint32_t u = order_key(p.vote[j]);
          in = (u & mask) == prefix;
          bin = (u >> shift) & (kBins - 1);
        }
        const uint32_t active = __ballot_sync(0xffffffffu, in);
        if (in) {  // one shared atomic per distinct bin of the warp (votes crowd a few bins)
          const uint32_t peers = __match_any_sync(active, bin);
          if (lane == __ffs(peers) - 1) atomicAdd(&hist[bin], uint32_t(__popc(peers)));
        }
      }
      __syncthreads();
      if (warp == 0) {  // lane l holds bins 255 - 8l .. 248 - 8l (largest first)
        uint32_t c[kBinsPerLane], sum = 0;
        for (int i = 0; i < kBinsPerLane; ++i) sum += c[i] = hist[kBins - 1 - kBinsPerLane * lane - i];
        uint32_t incl = sum;
        for (int off = 1; off < 32; off <<= 1) {
          const uint32_t t = __shfl_up_sync(0xffffffffu, incl, off);
          if (lane >= off) incl += t;
        }
        uint32_t above = incl - sum;
        if (above < need && need <= incl)
          for (int i = 0; i < kBinsPerLane; ++i) {
            if (need <= above + c[i]) {
              s_prefix = prefix | (uint32_t(kBins - 1 - kBinsPerLane * lane - i) << shift);
              s_need = need - above;
              break;
            }
            above += c[i];
          }
      }
      __syncthreads();  // the next pass clears hist only after warp 0 has read it
      prefix = s_prefix;
      need = s_need;
      mask |= uint32_t(kBins - 1) << shift;
    }
    T = prefix;
  }

  // 2. Stable compaction: warp w owns [a, b); keys > T and the first `need` keys == T, ascending.
  const int64_t seg = ((M + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int64_t a = min(M, warp * seg), b = min(M, a + seg);
  uint32_t n_gt = 0, n_eq = 0;
  for (int64_t j0 = a; j0 < b; j0 += 32) {
    const int64_t j = j0 + lane;
    const uint32_t u = j < b ? order_key(p.vote[j]) : 0u;
    n_gt += __popc(__ballot_sync(0xffffffffu, j < b && u > T));
    n_eq += __popc(__ballot_sync(0xffffffffu, j < b && u == T));
  }
  if (lane == 0) s_gt[warp] = n_gt, s_eq[warp] = n_eq;
  __syncthreads();
  uint32_t gt_incl = s_gt[lane], eq_incl = s_eq[lane];
  for (int off = 1; off < 32; off <<= 1) {
    const uint32_t g = __shfl_up_sync(0xffffffffu, gt_incl, off), e = __shfl_up_sync(0xffffffffu, eq_incl, off);
    if (lane >= off) gt_incl += g, eq_incl += e;
  }
  const uint32_t gt_base = __shfl_sync(0xffffffffu, gt_incl - s_gt[lane], warp);
  uint32_t eq_run = __shfl_sync(0xffffffffu, eq_incl - s_eq[lane], warp);
  uint32_t out_run = gt_base + min(eq_run, need);
  for (int64_t j0 = a; j0 < b; j0 += 32) {
    const int64_t j = j0 + lane;
    const uint32_t u = j < b ? order_key(p.vote[j]) : 0u;
    const bool eq = j < b && u == T;
    const uint32_t eq_bits = __ballot_sync(0xffffffffu, eq);
    const bool take = (j < b && u > T) || (eq && eq_run + __popc(eq_bits & lanes_below(lane)) < need);
    const uint32_t take_bits = __ballot_sync(0xffffffffu, take);
    if (take) p.out[out_run + __popc(take_bits & lanes_below(lane))] = int32_t(j) + p.offset;
    out_run += __popc(take_bits);
    eq_run += __popc(eq_bits);
  }
}

}  // namespace

void top_k_select(const TopKSelectParams& p, Stream s) {
  LC_REQUIRE(p.max_M >= 0 && p.max_M < (int64_t(1) << 31) && p.k >= 0 && p.k < (int64_t(1) << 31),
             "top_k_select: max_M %lld, k %lld", (long long)p.max_M, (long long)p.k);
  if (p.max_M == 0 || p.k == 0) return;
  LC_REQUIRE(p.vote && p.out, "top_k_select: vote or out missing");
  top_k_select_kernel<<<1, kThreads, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("top_k_select (max M %lld, k %lld)", (long long)p.max_M, (long long)p.k);
}

}  // namespace longctx::cuda

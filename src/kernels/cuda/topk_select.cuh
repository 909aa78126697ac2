// topk_select.cuh (cuda, device): the CTA-wide top-k, for kernels that rank a few thousand items
// inside one CTA (InfiniteHiP's chunk selection, kernels/cuda/ihip_prune.cuh). The grid-wide
// top-k of a long vote array is topk_select.h; both keep the same rule.
//
// What: the indices of the k largest of n uint32 keys key[0, n) (ties: the smaller index first),
// written ascending to out[0, min(k, n)). Callers map their scores to order-preserving keys (e.g.
// order_bits below), so the result is the total order of a sort by (score desc, index asc): a
// bitonic sort of the same (key, index) pairs keeps exactly the same items.
// How (every thread of the CTA calls it; ~11 barriers whatever n, where a bitonic sort of 4096
// keys takes 78): a radix select of the k-th largest key T, 8 bits a pass from the top
// (warp-aggregated shared-memory histograms, one warp scans the 256 bins and narrows the prefix);
// then each warp walks its contiguous segment of [0, n) and keeps keys > T and the first `need`
// keys == T in index order (need: how many of the k lie at T), its output base the counts of the
// warps before it, ranks inside the segment from ballots: indices come out ascending, no sort.
// Tested through tests/cuda/test_ihip_gpu.cpp (survivor lists equal to the CPU reference's,
// ties included).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace longctx::cuda::topk {

constexpr int kBlockDigitBits = 8;  // four passes over 32-bit keys
constexpr int kBlockPasses = 32 / kBlockDigitBits;
constexpr int kBlockBins = 1 << kBlockDigitBits;

// Order-preserving bits of a float: a > b iff order_bits(a) > order_bits(b) (-0 counts as +0; NaN
// keeps its bits' place: above +inf when positive, below -inf when negative).
__device__ inline uint32_t order_bits(float v) {
  if (v == 0.f) v = 0.f;
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

template <int kThreads>
struct BlockTopKShared {
  static_assert(kThreads % 32 == 0 && kThreads / 32 <= 32, "one warp scans the warps' counts");
  static constexpr int kWarps = kThreads / 32;
  uint32_t hist[kBlockPasses][kBlockBins];
  uint32_t prefix, need;  // the k-th largest key's digits so far; how many keys with them are kept
  uint32_t warp_gt[kWarps], warp_eq[kWarps];  // per warp segment: keys > T, keys == T
};

// See the header comment. key and out may be shared or global memory; out must not alias key.
// Ends with a barrier: out is complete for every thread on return.
template <int kThreads>
__device__ void block_top_k(const uint32_t* key, int n, int k, int32_t* out, BlockTopKShared<kThreads>& s) {
  constexpr int kWarps = kThreads / 32;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const uint32_t below = (1u << lane) - 1u;
  if (k <= 0) return;  // uniform: nothing to keep, no barrier
  if (k >= n) {  // everything is kept
    for (int i = tid; i < n; i += kThreads) out[i] = i;
    __syncthreads();
    return;
  }
  for (int i = tid; i < kBlockPasses * kBlockBins; i += kThreads) (&s.hist[0][0])[i] = 0;
  if (tid == 0) s.prefix = 0, s.need = uint32_t(k);
  __syncthreads();
#pragma unroll 1
  for (int pass = 0; pass < kBlockPasses; ++pass) {
    const int shift = 32 - kBlockDigitBits * (pass + 1);
    const uint32_t mask = pass == 0 ? 0u : ~0u << (shift + kBlockDigitBits);
    const uint32_t prefix = s.prefix;
    uint32_t* hist = s.hist[pass];
    for (int i0 = 0; i0 < n; i0 += kThreads) {  // whole warps iterate together (__match_any_sync)
      const int i = i0 + tid;
      const uint32_t u = i < n ? key[i] : 0u;
      const bool in = i < n && (u & mask) == prefix;
      const uint32_t dg = in ? (u >> shift) & (kBlockBins - 1) : uint32_t(kBlockBins);
      const unsigned peers = __match_any_sync(0xffffffffu, dg);
      if (in && lane == __ffs(peers) - 1) atomicAdd(&hist[dg], uint32_t(__popc(peers)));
    }
    __syncthreads();
    if (warp == 0) {  // the bin (largest first) where the running count reaches need
      constexpr int kPer = kBlockBins / 32;  // lane l: bins 255 - 8l down to 248 - 8l
      const uint32_t need = s.need;
      uint32_t c[kPer], sum = 0;
#pragma unroll
      for (int b = 0; b < kPer; ++b) sum += c[b] = hist[kBlockBins - 1 - kPer * lane - b];
      uint32_t incl = sum;
#pragma unroll
      for (int off = 1; off < 32; off *= 2) {
        const uint32_t v = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += v;
      }
      __syncwarp();
      uint32_t above = incl - sum;
      if (above < need && need <= incl) {
#pragma unroll
        for (int b = 0; b < kPer; ++b) {
          if (need <= above + c[b]) {
            s.prefix = prefix | (uint32_t(kBlockBins - 1 - kPer * lane - b) << shift);
            s.need = need - above;
            break;
          }
          above += c[b];
        }
      }
    }
    __syncthreads();
  }
  const uint32_t T = s.prefix, need = s.need;
  // Warp segments: contiguous, multiples of 32 long.
  const int seg = ((n + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int a = min(n, warp * seg), b = min(n, a + seg);
  uint32_t gt = 0, eq = 0;
  for (int i0 = a; i0 < b; i0 += 32) {
    const int i = i0 + lane;
    const uint32_t u = i < b ? key[i] : 0u;
    gt += __popc(__ballot_sync(0xffffffffu, i < b && u > T));
    eq += __popc(__ballot_sync(0xffffffffu, i < b && u == T));
  }
  if (lane == 0) s.warp_gt[warp] = gt, s.warp_eq[warp] = eq;
  __syncthreads();
  uint32_t gt_base = 0, eq_run = 0;
  for (int w = 0; w < warp; ++w) gt_base += s.warp_gt[w], eq_run += s.warp_eq[w];
  uint32_t out_run = gt_base + min(eq_run, need);
  for (int i0 = a; i0 < b; i0 += 32) {
    const int i = i0 + lane;
    const uint32_t u = i < b ? key[i] : 0u;
    const bool is_eq = i < b && u == T;
    const uint32_t eq_bits = __ballot_sync(0xffffffffu, is_eq);
    const bool take = (i < b && u > T) || (is_eq && eq_run + __popc(eq_bits & below) < need);
    const uint32_t take_bits = __ballot_sync(0xffffffffu, take);
    if (take) out[out_run + __popc(take_bits & below)] = i;
    out_run += __popc(take_bits);
    eq_run += __popc(eq_bits);
  }
  __syncthreads();
}

}  // namespace longctx::cuda::topk

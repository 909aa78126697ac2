// topk_select.cu: see topk_select.h.
#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/topk_select.h"

namespace longctx::cuda {

namespace {

constexpr int kThreads = 256;  // per CTA
constexpr int kWarps = kThreads / 32;
constexpr int kMaxCtas = kThreads;  // a CTA sums the counts of the CTAs before it with one thread each
constexpr int kItemsPerCta = 512;   // enough CTAs to keep every SM's loads in flight (the passes are latency-bound)
constexpr int kDigitBits = 8;       // four radix passes over the 32-bit keys
constexpr int kPasses = 32 / kDigitBits;
constexpr int kBins = 1 << kDigitBits;
constexpr int kBinsPerLane = kBins / 32;

// The workspace: the passes' histograms, then each CTA's counts of keys > T and == T.
struct Workspace {
  uint32_t hist[kPasses][kBins];
  uint32_t cta_gt[kMaxCtas], cta_eq[kMaxCtas];
};

// Order-preserving key: a > b (as floats, NaN as -inf, -0 == +0) iff key(a) > key(b).
__device__ uint32_t order_key(float v) {
  if (isnan(v)) v = -INFINITY;
  if (v == 0.f) v = 0.f;
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ uint32_t lanes_below(int lane) { return (1u << lane) - 1u; }

struct Count {
  int64_t M, k;
  bool live;  // false: skipped, or nothing to select
};
__device__ Count count_of(const TopKSelectParams& p) {
  if (p.skip && *p.skip != 0) return {0, 0, false};
  const int64_t M = p.m_dev ? min(max(int64_t(*p.m_dev) - p.m_sub, int64_t(0)), p.max_M) : p.max_M;
  const int64_t k = min(p.k, M);
  return {M, k, k > 0};
}

// The CTA's slice [a, b) of [0, M) and, inside it, warp w's segment; both multiples of 32 long.
__device__ int64_t cta_len(int64_t M) { return ((M + gridDim.x - 1) / gridDim.x + 31) / 32 * 32; }
__device__ int64_t warp_len(int64_t cta) { return ((cta + kWarps - 1) / kWarps + 31) / 32 * 32; }

// Warp 0: the prefix of the k-th largest key after `passes` histograms, and how many keys with
// that prefix are kept (the rest above it are all kept). Written to *prefix, *need.
__device__ void resolve(const Workspace& ws, int passes, uint32_t k, uint32_t* prefix_out, uint32_t* need_out) {
  const int lane = threadIdx.x & 31;
  uint32_t prefix = 0, need = k;
  for (int pass = 0; pass < passes; ++pass) {
    const int shift = 32 - kDigitBits * (pass + 1);
    uint32_t c[kBinsPerLane], sum = 0;  // lane l: bins 255 - 8l .. 248 - 8l (largest first)
    for (int i = 0; i < kBinsPerLane; ++i) sum += c[i] = ws.hist[pass][kBins - 1 - kBinsPerLane * lane - i];
    uint32_t incl = sum;
    for (int off = 1; off < 32; off <<= 1) {
      const uint32_t t = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += t;
    }
    uint32_t above = incl - sum, bin = 0, rest = 0;
    const bool here = above < need && need <= incl;
    if (here)
      for (int i = 0; i < kBinsPerLane; ++i) {
        if (need <= above + c[i]) {
          bin = kBins - 1 - kBinsPerLane * lane - i, rest = need - above;
          break;
        }
        above += c[i];
      }
    const int src = __ffs(__ballot_sync(0xffffffffu, here)) - 1;
    prefix |= __shfl_sync(0xffffffffu, bin, src) << shift;
    need = __shfl_sync(0xffffffffu, rest, src);
  }
  if (lane == 0) *prefix_out = prefix, *need_out = need;
}

// Pass `pass`: the histogram of digit `pass` over the keys whose earlier digits are the k-th's.
__global__ void __launch_bounds__(kThreads) histogram_kernel(TopKSelectParams p, Workspace* ws, int pass) {
  const Count n = count_of(p);
  if (!n.live || n.k >= n.M) return;
  __shared__ uint32_t h[kBins];
  __shared__ uint32_t s_prefix, s_need;
  for (int i = threadIdx.x; i < kBins; i += kThreads) h[i] = 0;
  if (threadIdx.x < 32) resolve(*ws, pass, uint32_t(n.k), &s_prefix, &s_need);
  __syncthreads();
  const uint32_t prefix = s_prefix, mask = pass == 0 ? 0u : ~0u << (32 - kDigitBits * pass);
  const int shift = 32 - kDigitBits * (pass + 1), lane = threadIdx.x & 31;
  const int64_t len = cta_len(n.M), a = min(n.M, blockIdx.x * len), b = min(n.M, a + len);
  for (int64_t j0 = a; j0 < b; j0 += kThreads) {  // whole warps iterate together
    const int64_t j = j0 + threadIdx.x;
    bool in = false;
    uint32_t bin = 0;
    if (j < b) {
      const uint32_t u = order_key(p.vote[j]);
      in = (u & mask) == prefix;
      bin = (u >> shift) & (kBins - 1);
    }
    const uint32_t active = __ballot_sync(0xffffffffu, in);
    if (in) {  // one shared atomic per distinct bin of the warp (votes crowd a few bins)
      const uint32_t peers = __match_any_sync(active, bin);
      if (lane == __ffs(peers) - 1) atomicAdd(&h[bin], uint32_t(__popc(peers)));
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kBins; i += kThreads)
    if (h[i]) atomicAdd(&ws->hist[pass][i], h[i]);
}

// T (the k-th largest key) and need, from the four histograms; k == M keeps everything: T = 0
// lies below every key (order_key never gives 0).
__device__ void threshold(const Count& n, const Workspace& ws, uint32_t* T, uint32_t* need) {
  if (n.k >= n.M) {
    if (threadIdx.x == 0) *T = 0, *need = 0;
  } else if (threadIdx.x < 32) {
    resolve(ws, kPasses, uint32_t(n.k), T, need);
  }
}

// Counts of keys > T and == T in warp segment [a, b) (every lane gets them).
__device__ void count_segment(const float* vote, int64_t a, int64_t b, uint32_t T, uint32_t& gt, uint32_t& eq) {
  const int lane = threadIdx.x & 31;
  gt = eq = 0;
  for (int64_t j0 = a; j0 < b; j0 += 32) {
    const int64_t j = j0 + lane;
    const uint32_t u = j < b ? order_key(vote[j]) : 0u;
    gt += __popc(__ballot_sync(0xffffffffu, j < b && u > T));
    eq += __popc(__ballot_sync(0xffffffffu, j < b && u == T));
  }
}

__global__ void __launch_bounds__(kThreads) count_kernel(TopKSelectParams p, Workspace* ws) {
  const Count n = count_of(p);
  if (!n.live) return;
  __shared__ uint32_t s_T, s_need, s_gt, s_eq;
  threshold(n, *ws, &s_T, &s_need);
  if (threadIdx.x == 0) s_gt = s_eq = 0;
  __syncthreads();
  const int warp = threadIdx.x >> 5;
  const int64_t len = cta_len(n.M), a = min(n.M, blockIdx.x * len), b = min(n.M, a + len), wl = warp_len(len);
  const int64_t wa = min(b, a + warp * wl), wb = min(b, wa + wl);
  uint32_t gt, eq;
  count_segment(p.vote, wa, wb, s_T, gt, eq);
  if ((threadIdx.x & 31) == 0) atomicAdd(&s_gt, gt), atomicAdd(&s_eq, eq);
  __syncthreads();
  if (threadIdx.x == 0) ws->cta_gt[blockIdx.x] = s_gt, ws->cta_eq[blockIdx.x] = s_eq;
}

// Keys > T and the first `need` keys == T (index order), written ascending: each warp's base is
// the counts of every CTA before its CTA plus the warps before it in its CTA.
__global__ void __launch_bounds__(kThreads) write_kernel(TopKSelectParams p, const Workspace* ws) {
  const Count n = count_of(p);
  if (!n.live) return;
  __shared__ uint32_t s_T, s_need, s_gt, s_eq, w_gt[kWarps], w_eq[kWarps];
  threshold(n, *ws, &s_T, &s_need);
  if (threadIdx.x == 0) s_gt = s_eq = 0;
  __syncthreads();
  if (threadIdx.x < blockIdx.x) atomicAdd(&s_gt, ws->cta_gt[threadIdx.x]), atomicAdd(&s_eq, ws->cta_eq[threadIdx.x]);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t len = cta_len(n.M), a = min(n.M, blockIdx.x * len), b = min(n.M, a + len), wl = warp_len(len);
  const int64_t wa = min(b, a + warp * wl), wb = min(b, wa + wl);
  const uint32_t T = s_T, need = s_need;
  uint32_t gt, eq;
  count_segment(p.vote, wa, wb, T, gt, eq);
  if (lane == 0) w_gt[warp] = gt, w_eq[warp] = eq;
  __syncthreads();
  uint32_t gt_base = s_gt, eq_run = s_eq;
  for (int w = 0; w < warp; ++w) gt_base += w_gt[w], eq_run += w_eq[w];
  uint32_t out_run = gt_base + min(eq_run, need);
  for (int64_t j0 = wa; j0 < wb; j0 += 32) {
    const int64_t j = j0 + lane;
    const uint32_t u = j < wb ? order_key(p.vote[j]) : 0u;
    const bool is_eq = j < wb && u == T;
    const uint32_t eq_bits = __ballot_sync(0xffffffffu, is_eq);
    const bool take = (j < wb && u > T) || (is_eq && eq_run + __popc(eq_bits & lanes_below(lane)) < need);
    const uint32_t take_bits = __ballot_sync(0xffffffffu, take);
    if (take) p.out[out_run + __popc(take_bits & lanes_below(lane))] = int32_t(j) + p.offset;
    out_run += __popc(take_bits);
    eq_run += __popc(eq_bits);
  }
}

int ctas_for(int64_t max_M) {
  return int(std::min<int64_t>(std::max<int64_t>((max_M + kItemsPerCta - 1) / kItemsPerCta, 1), kMaxCtas));
}

}  // namespace

size_t top_k_select_workspace_bytes() { return sizeof(Workspace); }

void top_k_select(const TopKSelectParams& p, Stream s) {
  LC_REQUIRE(p.max_M >= 0 && p.max_M < (int64_t(1) << 31) && p.k >= 0 && p.k < (int64_t(1) << 31),
             "top_k_select: max_M %lld, k %lld", (long long)p.max_M, (long long)p.k);
  if (p.max_M == 0 || p.k == 0) return;
  LC_REQUIRE(p.vote && p.out && p.workspace, "top_k_select: vote, out or workspace missing");
  const auto st = static_cast<cudaStream_t>(s);
  auto* ws = static_cast<Workspace*>(p.workspace);
  const int ctas = ctas_for(p.max_M);
  LC_CUDA_CHECK(cudaMemsetAsync(ws->hist, 0, sizeof(ws->hist), st), "top_k_select: clearing the histograms");
  for (int pass = 0; pass < kPasses; ++pass) histogram_kernel<<<ctas, kThreads, 0, st>>>(p, ws, pass);
  count_kernel<<<ctas, kThreads, 0, st>>>(p, ws);
  write_kernel<<<ctas, kThreads, 0, st>>>(p, ws);
  LC_LAUNCH_CHECK("top_k_select (max M %lld, k %lld)", (long long)p.max_M, (long long)p.k);
}

}  // namespace longctx::cuda

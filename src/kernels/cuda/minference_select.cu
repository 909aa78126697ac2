// minference_select.cu (cuda): exact top-k selection for the GPU index builder: the twin of
// top_k_indices() (sparse/topk.cpp) used by select_vs_lines() and build_block_sparse_index().
//
// What: the indices of the k largest scores, ascending, ties broken toward the smaller index
// (score desc, then index asc; NaN = -inf), for
//   - each vertical-slash head: k_v columns of vscore and k_s offsets of sscore (up to n_keys
//     scores each, in global memory), then the slash "gap lists" Algorithm 4 needs (csr.cu);
//   - each block-sparse (head, query block): kk key blocks of the row's pooled scores.
// Why not a sort: k is small next to n (100 of 16K blocks, 6096 of 1M offsets); a radix select
// reads the scores a few times and never moves them.
// How: scores become order-preserving 32-bit keys (minference_kernels.cuh order_key); a min/max
// pass, then histogram passes over (key - min key) from the top bit of the key range down (smem
// histogram, plain atomics: the range-relative digits spread the keys over the bins) find the
// k-th largest key T and how many keys equal to T are still needed; then an ordered pass (ballots)
// writes every index with key > T plus the first `need` indices with key == T, in ascending index
// order - exactly the set topk.cpp's nth_element with that total order selects.
//   VS: one CTA per (head, kind), 11-bit digits, contiguous per-warp segments and a scan over the
//   warps for the ordered pass.
//   BS: one warp per row, 8-bit digits, no block-wide syncs (see "block-sparse rows"); the row's
//   group maxima and candidate groups are read with 16-byte loads (rows padded to kBsRowPad) and
//   turned into keys once (the passes then skip order_key); the groups at or above the maxima's
//   threshold are collected in the pass that finds it (warp_groups_at_or_above).
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/check.h"
#include "kernels/cuda/minference_kernels.cuh"

namespace longctx::cuda::mindex {
namespace {

// ---- the radix select, written once over the sync group --------------------------------------
// Radix digits over the keys' actual range: the passes walk the bits of (key - min key) from the
// top bit of (max key - min key) down, so the first pass already spreads the keys over the bins
// (few same-bin atomics) and narrow ranges need fewer passes. A sync group is
//   WarpGroup       one warp (a block-sparse row): 8-bit digits (256 bins in the warp's smem
//                   slice), __syncwarp, warp scans and ballots, no block-wide syncs; once the
//                   threshold's bin holds <= 32 keys they are ranked by shuffles (early finish);
//   CtaGroup<N>     one CTA of N threads (a vertical-slash line set of up to 1M scores): 11-bit
//                   digits (2048 bins), __syncthreads, a CUB block scan over the bins, contiguous
//                   per-warp segments for the ordered emission.
// Keys: scores read in place (float: order_key on every read) or keys made once while staging
// (uint32: the passes skip order_key, about a third of a pass's instructions).
constexpr int kUnroll = 8;  // independent loads in flight per thread
constexpr int kMaxBins = 2048;

__device__ __forceinline__ uint32_t key_of(float v) { return order_key(v); }
__device__ __forceinline__ uint32_t key_of(uint32_t k) { return k; }

template <int kThreads>
struct TopkSmem {
  static constexpr int kWarps = kThreads / 32;
  uint32_t hist[kMaxBins];
  uint32_t wa[kWarps], wb[kWarps];
  uint32_t digit, above, in_bin, total, kmin, kmax;
  typename cub::BlockScan<uint32_t, kThreads>::TempStorage scan;
};

struct WarpGroup {
  static constexpr int kBits = 8, kThreads = 32, kWarps = 1;
  static constexpr bool kEarlyFinish = true;
  uint32_t* hist;  // 1 << kBits bins
  __device__ uint32_t* bins() const { return hist; }
  __device__ int rank() const { return threadIdx.x & 31; }
  __device__ int warp() const { return 0; }
  __device__ void sync() const { __syncwarp(); }
  // Every thread's (lo, hi) -> the group's, in every thread.
  __device__ void reduce_range(uint32_t& lo, uint32_t& hi) const {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
      hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
    }
  }
  // The bin (digit) holding the rem-th largest key of the filled histogram, the keys in higher
  // bins and in it, in every thread. Lane l owns bins [hi - per + 1, hi] counted from the top, so
  // an exclusive scan over the lanes gives the number of keys in higher bins.
  __device__ void find_digit(int nbins, uint32_t rem, int& digit, uint32_t& dabove, uint32_t& in_bin) const {
    const int lane = threadIdx.x & 31;
    const int per = nbins >= 32 ? nbins / 32 : 1;
    const int hi = nbins - 1 - lane * per;
    uint32_t local = 0;
    for (int q = 0; q < per && hi - q >= 0; ++q) local += hist[hi - q];
    uint32_t above = warp_excl_scan(local);
    digit = -1;
    dabove = 0;
    for (int q = 0; q < per && hi - q >= 0; ++q) {
      const uint32_t cnt = hist[hi - q];
      if (above < rem && rem <= above + cnt) digit = hi - q, dabove = above;
      above += cnt;
    }
    const int src = __ffs(int(__ballot_sync(0xffffffffu, digit >= 0))) - 1;  // exactly one lane
    in_bin = __shfl_sync(0xffffffffu, digit >= 0 ? hist[digit] : 0u, src);
    digit = __shfl_sync(0xffffffffu, digit, src);
    dabove = __shfl_sync(0xffffffffu, dabove, src);
  }
};

template <int N>
struct CtaGroup {
  static constexpr int kBits = 11, kThreads = N, kWarps = N / 32;
  static constexpr bool kEarlyFinish = false;
  static_assert(kMaxBins % N == 0 || N % kMaxBins == 0, "bins split evenly over the threads");
  TopkSmem<N>& sm;
  __device__ uint32_t* bins() const { return sm.hist; }
  __device__ int rank() const { return threadIdx.x; }
  __device__ int warp() const { return threadIdx.x >> 5; }
  __device__ void sync() const { __syncthreads(); }
  __device__ void reduce_range(uint32_t& lo, uint32_t& hi) const {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
      hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
    }
    if (lane == 0) sm.wa[warp()] = lo, sm.wb[warp()] = hi;
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t a = sm.wa[0], b = sm.wb[0];
      for (int w = 1; w < kWarps; ++w) a = min(a, sm.wa[w]), b = max(b, sm.wb[w]);
      sm.kmin = a, sm.kmax = b;
    }
    __syncthreads();
    lo = sm.kmin, hi = sm.kmax;
    __syncthreads();  // sm.wa/wb/kmin/kmax are rewritten later
  }
  // As WarpGroup::find_digit with thread t owning bins from the top and a CUB scan over threads.
  __device__ void find_digit(int nbins, uint32_t rem, int& digit, uint32_t& dabove, uint32_t& in_bin) const {
    const int tid = threadIdx.x;
    const int per = nbins >= N ? nbins / N : 1;
    const int hi = nbins - 1 - tid * per;
    uint32_t local = 0;
    for (int q = 0; q < per && hi - q >= 0; ++q) local += sm.hist[hi - q];
    uint32_t above;
    cub::BlockScan<uint32_t, N>(sm.scan).ExclusiveSum(local, above);
    for (int q = 0; q < per && hi - q >= 0; ++q) {
      const uint32_t cnt = sm.hist[hi - q];
      if (above < rem && rem <= above + cnt) sm.digit = uint32_t(hi - q), sm.above = above, sm.in_bin = cnt;
      above += cnt;
    }
    __syncthreads();
    digit = int(sm.digit), dabove = sm.above, in_bin = sm.in_bin;
  }
};

// Smallest and largest key of x[0, n), in every thread of the group. n > 0.
template <class G, class T>
__device__ void group_key_range(const G& g, const T* x, int n, uint32_t& lo_key, uint32_t& hi_key) {
  const int lane = threadIdx.x & 31;
  lo_key = 0xffffffffu, hi_key = 0;
  for (int base = g.warp() * 32 * kUnroll; base < n; base += G::kThreads * kUnroll) {
    T v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * 32 + lane;
      v[u] = i < n ? x[i] : T(0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * 32 + lane < n) {
        const uint32_t key = key_of(v[u]);
        lo_key = min(lo_key, key);
        hi_key = max(hi_key, key);
      }
  }
  g.reduce_range(lo_key, hi_key);
}

// Where the radix passes stopped: the resolved top bits of (key - min key) (prefix under pmask),
// the rank of the k-th largest among the keys with that prefix (rem), how many keys have it
// (in_bin), and the next bit to resolve (top; -1 when every bit is resolved).
struct RadixState {
  uint32_t prefix = 0, pmask = 0, rem = 0, in_bin = 0;
  int top = -1;
};

// Radix passes toward the k-th largest of x[0, n) (0 < k < n; keys in [lo_key, lo_key + range],
// range > 0) until every bit is resolved or, with stop_small, the threshold's bin holds <= 32 keys.
template <class G, class T>
__device__ RadixState radix_narrow(const G& g, const T* x, int n, uint32_t k, uint32_t lo_key, uint32_t range,
                                   bool stop_small) {
  const int lane = threadIdx.x & 31;
  uint32_t* hist = g.bins();
  RadixState st;
  st.rem = k;
  int top = 31 - __clz(range);
#pragma unroll 1
  while (true) {
    const int width = min(G::kBits, top + 1), shift = top - width + 1, nbins = 1 << width;
    for (int i = g.rank(); i < nbins; i += G::kThreads) hist[i] = 0;
    g.sync();
    for (int base = g.warp() * 32 * kUnroll; base < n; base += G::kThreads * kUnroll) {
      T v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * 32 + lane;
        v[u] = i < n ? x[i] : T(0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint32_t r = key_of(v[u]) - lo_key;
        if (base + u * 32 + lane < n && (r & st.pmask) == st.prefix)
          atomicAdd(&hist[(r >> shift) & uint32_t(nbins - 1)], 1u);
      }
    }
    g.sync();
    int digit = 0;
    uint32_t dabove = 0;
    g.find_digit(nbins, st.rem, digit, dabove, st.in_bin);
    st.rem -= dabove;
    st.prefix |= uint32_t(digit) << shift;
    st.pmask |= uint32_t(nbins - 1) << shift;
    top = shift - 1;
    g.sync();  // the bins (and a CTA's digit) are read before the next pass rewrites them
    if (top < 0 || (stop_small && st.in_bin <= 32u)) break;
  }
  st.top = top;
  return st;
}

// The key T of the k-th largest of x[0, n) and how many keys equal to T belong to the top k
// (need; the others are all > T), given the keys' range [lo_key, hi_key]. Needs 0 < k < n; x in
// shared or global memory; the whole group calls. A warp ranks the <= 32 keys of the threshold's
// bin by shuffles once it gets there (usually after the first pass: the range's 8-bit digits
// spread the keys well): one more pass collects them instead of further histogram passes.
template <class G, class T>
__device__ uint32_t radix_threshold(const G& g, const T* x, int n, uint32_t k, uint32_t& need, uint32_t lo_key,
                                   uint32_t hi_key) {
  const uint32_t range = hi_key - lo_key;
  if (range == 0) {  // every key equal: the first k indices
    need = k;
    return lo_key;
  }
  const RadixState st = radix_narrow(g, x, n, k, lo_key, range, G::kEarlyFinish);
  if constexpr (G::kEarlyFinish) {
    if (st.top >= 0) {  // the in_bin (<= 32) keys with this prefix, one per lane via the bins' memory
      const int lane = threadIdx.x & 31;
      uint32_t* hist = g.bins();
      const uint32_t lt = lanemask_lt();
      uint32_t got = 0;
      for (int base = 0; base < n; base += 32 * kUnroll) {
        T v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int i = base + u * 32 + lane;
          v[u] = i < n ? x[i] : T(0);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const uint32_t r = key_of(v[u]) - lo_key;
          const bool match = base + u * 32 + lane < n && (r & st.pmask) == st.prefix;
          const uint32_t mb = __ballot_sync(0xffffffffu, match);
          if (match) hist[got + __popc(mb & lt)] = r;
          got += __popc(mb);
        }
      }
      __syncwarp();
      const bool valid = uint32_t(lane) < st.in_bin;
      const uint32_t mine = valid ? hist[lane] : 0u;
      uint32_t gt = 0, eq = 0;
      for (uint32_t j = 0; j < st.in_bin; ++j) {
        const uint32_t y = __shfl_sync(0xffffffffu, mine, int(j));
        gt += y > mine;
        eq += y == mine;
      }
      const bool is_t = valid && gt < st.rem && st.rem <= gt + eq;  // every lane holding T
      const int tl = __ffs(int(__ballot_sync(0xffffffffu, is_t))) - 1;
      const uint32_t t_r = __shfl_sync(0xffffffffu, mine, tl);
      need = st.rem - __shfl_sync(0xffffffffu, gt, tl);
      __syncwarp();  // the bins' memory is read before any later use
      return lo_key + t_r;
    }
  }
  need = st.rem;
  return lo_key + st.prefix;
}

// One warp's ordered emission over x[s0, s1): in ascending i, every i with key > thr and, while
// fewer than `need` ties were taken (tie counts those before s0), every i with key == thr,
// written as map ? map[i] : i at out[pos..] (positions >= cap dropped). Returns the next position.
template <class T>
__device__ uint32_t warp_emit_span(const T* x, int s0, int s1, uint32_t thr, uint32_t need, uint32_t pos,
                                   uint32_t tie, int32_t* out, const int32_t* map, uint32_t cap) {
  const int lane = threadIdx.x & 31;
  const uint32_t lt = lanemask_lt();
  for (int base = s0; base < s1; base += 32 * kUnroll) {
    T v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * 32 + lane;
      v[u] = i < s1 ? x[i] : T(0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * 32 + lane;
      const uint32_t key = key_of(v[u]);
      const bool is_gt = i < s1 && key > thr, is_eq = i < s1 && key == thr;
      const uint32_t eqb = __ballot_sync(0xffffffffu, is_eq);
      const bool sel = is_gt || (is_eq && tie + __popc(eqb & lt) < need);
      const uint32_t selb = __ballot_sync(0xffffffffu, sel);
      const uint32_t at = pos + __popc(selb & lt);
      if (sel && at < cap) out[at] = map ? map[i] : i;
      pos += __popc(selb);
      tie += __popc(eqb);
    }
  }
  return pos;
}

// Ordered emission by the group: in ascending i, every i < n with key(x[i]) > thr and the first
// `need` with key == thr, as map ? map[i] : i into out[0, cap). Returns the count (every thread).
// A warp walks the whole range; a CTA's warps walk contiguous segments after counting theirs
// (one scan over the warps gives each its output position and ties before it).
template <class G, class T>
__device__ uint32_t group_emit(const G& g, const T* x, int n, uint32_t thr, uint32_t need, int32_t* out,
                               const int32_t* map, uint32_t cap) {
  if constexpr (G::kWarps == 1) {
    return warp_emit_span(x, 0, n, thr, need, 0u, 0u, out, map, cap);
  } else {
    constexpr int kWarps = G::kWarps;
    auto& sm = g.sm;
    const int lane = threadIdx.x & 31, warp = g.warp();
    const int seg = ((n + kWarps - 1) / kWarps + 31) / 32 * 32;
    const int s0 = min(n, warp * seg), s1 = min(n, s0 + seg);
    uint32_t gt = 0, eq = 0;
    for (int base = s0; base < s1; base += 32 * kUnroll) {
      T v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * 32 + lane;
        v[u] = i < s1 ? x[i] : T(0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * 32 + lane;
        const uint32_t key = key_of(v[u]);
        gt += (i < s1 && key > thr);
        eq += (i < s1 && key == thr);
      }
    }
    gt = warp_sum(gt);
    eq = warp_sum(eq);
    if (lane == 0) sm.wa[warp] = gt, sm.wb[warp] = eq;
    __syncthreads();
    if (warp == 0) {
      const uint32_t gw = lane < kWarps ? sm.wa[lane] : 0u, e = lane < kWarps ? sm.wb[lane] : 0u;
      const uint32_t tie_base = warp_excl_scan(e);
      const uint32_t take = tie_base >= need ? 0u : min(e, need - tie_base);
      const uint32_t out_base = warp_excl_scan(gw + take);
      const uint32_t total = warp_sum(gw + take);
      __syncwarp();
      if (lane < kWarps) sm.wa[lane] = out_base, sm.wb[lane] = tie_base;
      if (lane == 0) sm.total = total;
    }
    __syncthreads();
    const uint32_t total = sm.total;
    warp_emit_span(x, s0, s1, thr, need, sm.wa[warp], sm.wb[warp], out, map, cap);
    __syncthreads();  // sm is reused by the caller
    return total;
  }
}

// out[0, min(k, n)) = the indices of the k largest of x[0, n), ascending (as map[i] when given):
// the exact twin of top_k_indices(). [lo_key, hi_key] = the keys' range (lo_key > hi_key: not
// known, found here). The whole group calls.
template <class G, class T>
__device__ void group_topk(const G& g, const T* x, int64_t n64, int64_t k, int32_t* out, const int32_t* map = nullptr,
                           uint32_t lo_key = 1, uint32_t hi_key = 0) {
  const int n = int(n64);
  if (k <= 0) return;
  if (k >= n64) {
    for (int i = g.rank(); i < n; i += G::kThreads) out[i] = map ? map[i] : i;
    g.sync();
    return;
  }
  if (lo_key > hi_key) group_key_range(g, x, n, lo_key, hi_key);
  uint32_t need = 0;
  const uint32_t thr = radix_threshold(g, x, n, uint32_t(k), need, lo_key, hi_key);
  group_emit(g, x, n, thr, need, out, map, uint32_t(k));
}

template <int kThreads>
__device__ void cta_iota(int32_t* out, int64_t n) {
  for (int64_t i = threadIdx.x; i < n; i += kThreads) out[i] = int32_t(i);
}

// ---- vertical-slash lines -----------------------------------------------------------------------
constexpr int kVsSelThreads = 1024;  // one CTA per (head, kind) scans up to 1M scores: many loads in flight

__global__ void __launch_bounds__(kVsSelThreads) vs_topk_kernel(const HeadInfo* heads, const float* vscore,
                                                               const float* sscore, int64_t stride, int32_t* lines,
                                                               int64_t n_keys) {
  __shared__ TopkSmem<kVsSelThreads> sm;
  const int h = blockIdx.x;
  const HeadInfo hi = heads[h];
  if (hi.kind != kKindVS) return;
  const bool slash = blockIdx.y == 1;
  const int64_t k = slash ? hi.p1 : hi.p0;
  const float* x = (slash ? sscore : vscore) + int64_t(h) * stride;
  int32_t* out = lines + hi.off + (slash ? hi.p0 : 0);
  if (k >= n_keys) cta_iota<kVsSelThreads>(out, n_keys);
  else if (k > 0) group_topk(CtaGroup<kVsSelThreads>{sm}, x, n_keys, k, out);
}

// Slash cut lists for Algorithm 4 (see minference_csr.cu): the ascending indices i < k_s - 1
// with slash[i+1] - slash[i] > thr, for thr = 64 (full query blocks) and thr = rows of the
// last query block. Ordered compaction over contiguous per-warp segments.
constexpr int kGapThreads = 256;
__global__ void __launch_bounds__(kGapThreads) vs_gaps_kernel(const HeadInfo* heads, int32_t* lines,
                                                             int32_t* gap_count, int rows_last) {
  constexpr int kWarps = kGapThreads / 32;
  __shared__ uint32_t wcount[kWarps], wbase[kWarps];
  const int h = blockIdx.x;
  const HeadInfo hi = heads[h];
  if (hi.kind != kKindVS) return;
  const int which = blockIdx.y;  // 0: threshold 64, 1: threshold rows_last
  const int64_t thr = which == 0 ? kBlk : rows_last;
  const int32_t* sl = lines + hi.off + hi.p0;
  const int64_t ks = hi.p1;
  int32_t* out = lines + hi.off + hi.p0 + ks * (1 + which);
  const int n = int(ks > 0 ? ks - 1 : 0);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int seg = ((n + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int s0 = min(n, warp * seg), s1 = min(n, s0 + seg);
  uint32_t cnt = 0;
  for (int i = s0 + lane; i < s1; i += 32) cnt += (int64_t(sl[i + 1]) - sl[i] > thr);
  cnt = warp_sum(cnt);
  if (lane == 0) wcount[warp] = cnt;
  __syncthreads();
  if (warp == 0) {
    const uint32_t c = lane < kWarps ? wcount[lane] : 0u;
    const uint32_t b = warp_excl_scan(c);
    if (lane < kWarps) wbase[lane] = b;
    if (lane == kWarps - 1) gap_count[2 * h + which] = int32_t(b + c);
  }
  __syncthreads();
  uint32_t pos = wbase[warp];
  const uint32_t lt = lanemask_lt();
  for (int base = s0; base < s1; base += 32) {
    const int i = base + lane;
    const bool f = i < s1 && int64_t(sl[i + 1]) - sl[i] > thr;
    const uint32_t fb = __ballot_sync(0xffffffffu, f);
    if (f) out[pos + __popc(fb & lt)] = i;
    pos += __popc(fb);
  }
}

// ---- block-sparse rows ------------------------------------------------------------------------
// One WARP per (BS head, query block), kBsRowsPerCta rows per CTA, no block-wide syncs or scans:
// each warp works in its own shared-memory slice with __syncwarp, ballots and shuffles only (a
// CTA-wide select costs a roughly fixed ~10 block syncs per pass per row: latency-bound).
// The row's kk best of n_cand scores, without reading most of them: with G = ceil(n_cand / 8)
// group maxima (written by the score kernel), let T be the key of the kk-th largest group
// maximum. The kk best groups' maxima are kk elements with key >= T, so the row's kk-th largest
// key is >= T: every selected block has key >= T and lies in a group whose maximum is >= T. So:
// radix threshold over the G maxima, the groups with maximum >= T in order (usually ~kk), their
// elements with key >= T gathered in ascending block order (so ties still break toward the
// smaller index; at least kk of them), exact top-kk among those. Rows with G <= kk, or whose
// groups / gathered elements overflow the warp's caps (only with massive ties), take the plain
// path: exact top-kk over the whole row (staged in smem when it fits, else read in place).
constexpr int kBsRowsPerCta = 4;     // warps (rows) per CTA: 4 x ~10 KB smem, 5 CTAs per SM
constexpr int kWBins = 1 << WarpGroup::kBits;  // radix bins of the warp select (256)
constexpr int kWBuf = 2048;          // floats per warp: group maxima (G <= 2048: n_kv <= 1M) or a row
constexpr int kWCand = kWBuf / 2;    // gathered candidates (score + block index) in the same buffer
constexpr int kWGroups = 256;        // candidate groups (2048 scores)
struct BsWarpSmem {
  float buf[kWBuf];
  int32_t groups[kWGroups];
  uint32_t gkeys[kWGroups];  // warp_groups_at_or_above: the collected groups' keys (- min key)
  uint32_t hist[kWBins];
};

// The groups i (ascending, into groups[0, ng)) whose key x[i] is >= thr, thr = the k-th largest of
// the keys x[0, n) (range [lo_key, hi_key]): radix_threshold then group_emit(need = all), in one
// pass over x less. Radix passes (radix_narrow) until the threshold's bin holds <= 32 keys
// (usually after one), then one pass collects every key at or above that bin in index order
// (fewer than k + 32; their keys into gkeys) and the bin's keys into hist, the bin's keys are
// ranked to find thr, and a pass over the collected ones keeps those >= thr. Needs 0 < k < n;
// returns false (nothing usable) when more than cap would have to be collected (massive ties).
// Whole warp.
__device__ bool warp_groups_at_or_above(const uint32_t* x, int n, uint32_t k, uint32_t lo_key, uint32_t hi_key,
                                        uint32_t* hist, int32_t* groups, uint32_t* gkeys, uint32_t cap,
                                        uint32_t& thr, uint32_t& ng) {
  const int lane = threadIdx.x & 31;
  const uint32_t lt = lanemask_lt();
  const uint32_t range = hi_key - lo_key;
  if (range == 0) {  // every key equal: every group
    if (uint32_t(n) > cap) return false;
    for (int i = lane; i < n; i += 32) groups[i] = i;
    __syncwarp();
    thr = lo_key;
    ng = uint32_t(n);
    return true;
  }
  const RadixState st = radix_narrow(WarpGroup{hist}, x, n, k, lo_key, range, true);
  const uint32_t prefix = st.prefix, pmask = st.pmask, rem = st.rem, in_bin = st.in_bin;
  const int top = st.top;
  // Keys above the bin: k - rem; in it: in_bin (all equal to lo_key + prefix when top < 0).
  const uint32_t total = (k - rem) + in_bin;
  if (total > cap) return false;
  uint32_t pos = 0, got = 0;
  for (int base = 0; base < n; base += 32 * kUnroll) {
    uint32_t v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * 32 + lane;
      v[u] = i < n ? x[i] : 0u;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * 32 + lane;
      const uint32_t r = v[u] - lo_key;
      const bool ok = i < n && (r & pmask) >= prefix, in = ok && (r & pmask) == prefix;
      const uint32_t okb = __ballot_sync(0xffffffffu, ok), inb = __ballot_sync(0xffffffffu, in);
      if (ok) {
        const uint32_t at = pos + __popc(okb & lt);
        groups[at] = i;
        gkeys[at] = r;
      }
      if (in && top >= 0) hist[got + __popc(inb & lt)] = r;
      pos += __popc(okb);
      got += __popc(inb);
    }
  }
  __syncwarp();
  uint32_t t_r = prefix;
  if (top >= 0) {  // the rem-th largest of the bin's in_bin (<= 32) keys, ranked by shuffles
    const bool valid = uint32_t(lane) < in_bin;
    const uint32_t mine = valid ? hist[lane] : 0u;
    uint32_t gt = 0, eq = 0;
    for (uint32_t j = 0; j < in_bin; ++j) {
      const uint32_t y = __shfl_sync(0xffffffffu, mine, int(j));
      gt += y > mine;
      eq += y == mine;
    }
    const bool is_t = valid && gt < rem && rem <= gt + eq;
    const int tl = __ffs(int(__ballot_sync(0xffffffffu, is_t))) - 1;
    t_r = __shfl_sync(0xffffffffu, mine, tl);
  }
  // Keep the collected groups with key >= thr, in place and in order (writes never pass reads).
  uint32_t kept = 0;
  for (uint32_t base = 0; base < pos; base += 32) {
    const uint32_t j = base + uint32_t(lane);
    const bool in_list = j < pos;
    const int32_t gi = in_list ? groups[j] : 0;
    const uint32_t r = in_list ? gkeys[j] : 0u;
    const bool keep = in_list && r >= t_r;
    const uint32_t kb = __ballot_sync(0xffffffffu, keep);
    if (keep) groups[kept + __popc(kb & lt)] = gi;
    kept += __popc(kb);
  }
  __syncwarp();
  thr = lo_key + t_r;
  ng = kept;
  return true;
}

// dst[0, n) = the keys of src[0, n) (whole warp) and their range in every lane, 16-byte loads with
// kV per lane in flight (a row's 2048 group maxima in two round trips) when src is 16-byte
// aligned (always with the builder's kBsRowPad layout: it may then read, and write to dst, up to 3
// values past n, the row padding; dst holds kWBuf >= round4(n)), else one value per load.
__device__ void warp_stage_keys(uint32_t* dst, const float* src, int n, uint32_t& lo_key, uint32_t& hi_key) {
  const int lane = threadIdx.x & 31;
  lo_key = 0xffffffffu, hi_key = 0;
  if ((reinterpret_cast<uintptr_t>(src) & 15) == 0) {
    constexpr int kV = 8;  // float4 per lane per round trip (16 spills at 5 CTAs per SM)
    const int n4 = (n + 3) / 4;
    const float4* s4 = reinterpret_cast<const float4*>(src);
    uint4* d4 = reinterpret_cast<uint4*>(dst);
    for (int base = 0; base < n4; base += 32 * kV) {
      float4 v[kV];
#pragma unroll
      for (int u = 0; u < kV; ++u) {
        const int i = base + u * 32 + lane;
        if (i < n4) v[u] = s4[i];
      }
#pragma unroll
      for (int u = 0; u < kV; ++u) {
        const int i = base + u * 32 + lane;
        if (i < n4) {
          const uint4 k4 = make_uint4(order_key(v[u].x), order_key(v[u].y), order_key(v[u].z), order_key(v[u].w));
          d4[i] = k4;
          const uint32_t kq[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
          for (int q = 0; q < 4; ++q)
            if (4 * i + q < n) lo_key = min(lo_key, kq[q]), hi_key = max(hi_key, kq[q]);
        }
      }
    }
  } else {
    for (int base = 0; base < n; base += 32 * kUnroll) {
      float v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * 32 + lane;
        v[u] = i < n ? src[i] : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * 32 + lane;
        if (i < n) {
          const uint32_t key = order_key(v[u]);
          dst[i] = key;
          lo_key = min(lo_key, key), hi_key = max(hi_key, key);
        }
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    lo_key = min(lo_key, __shfl_xor_sync(0xffffffffu, lo_key, o));
    hi_key = max(hi_key, __shfl_xor_sync(0xffffffffu, hi_key, o));
  }
  __syncwarp();
}

__global__ void __launch_bounds__(kBsRowsPerCta * 32, 5) bs_select_kernel(const BsSelectArgs a) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  BsWarpSmem& sm = reinterpret_cast<BsWarpSmem*>(smem_raw)[warp];
  uint32_t* kbuf = reinterpret_cast<uint32_t*>(sm.buf);
  const Geom& g = a.g;
  const int64_t b = a.b0 + int64_t(blockIdx.x) * kBsRowsPerCta + warp;
  if (b >= a.b1) return;  // warp-uniform; nothing below syncs the CTA
  const int s = a.s0 + blockIdx.y;
  const int h = a.bs_heads[s];
  const HeadInfo hi = a.heads[h];
  const int64_t nc = bs_n_cand(g, b), kk = bs_kk(g, b, hi.p0);
  int32_t* out = a.sel + hi.off + b * hi.stride;
  if (kk >= nc) {  // every candidate kept (early blocks, small prompts)
    for (int64_t i = lane; i < nc; i += 32) out[i] = int32_t(i);
    return;
  }
  const int64_t off = int64_t(s - a.s0) * a.span + (a.cand_off[b] - a.cand_off[a.b0]);
  const float* row = a.scratch + off;
  const int n = int(nc);
  const int G = (n + kBsGroup - 1) / kBsGroup;
  if (G > kk && !a.rows_in_global) {
    const float* gm = a.gmax + off / kBsGroup;
    uint32_t need = 0, thr = 0, ng = 0, klo = 0, khi = 0;
    if (G <= kWBuf) {  // keys staged once
      warp_stage_keys(kbuf, gm, G, klo, khi);
      // Groups with maximum >= thr, ascending (none usable: the plain path below).
      if (!warp_groups_at_or_above(kbuf, G, uint32_t(kk), klo, khi, sm.hist, sm.groups, sm.gkeys, kWGroups, thr, ng))
        ng = kWGroups + 1;
    } else {
      const WarpGroup wg{sm.hist};
      group_key_range(wg, gm, G, klo, khi);
      thr = radix_threshold(wg, gm, G, uint32_t(kk), need, klo, khi);
      ng = group_emit(wg, gm, G, thr, 0xffffffffu, sm.groups, nullptr, kWGroups);
    }
    __syncwarp();
    if (ng <= uint32_t(kWGroups)) {
      // Their elements with key >= thr as keys, ascending (group order, then position in the
      // group), with the kept keys' range; the buffer's group maxima are dead now: it holds the
      // keys and their block indices.
      uint32_t* cand = kbuf;
      int32_t* cidx = reinterpret_cast<int32_t*>(sm.buf + kWCand);
      const int m = int(ng) * kBsGroup;
      const uint32_t lt = lanemask_lt();
      uint32_t cnt = 0, clo = 0xffffffffu, chi = 0;
      if ((reinterpret_cast<uintptr_t>(row) & 31) == 0) {
        // One group (8 scores, two 16-byte loads) per lane, kGather groups per lane in flight
        // (~130 groups in 2-3 round trips instead of 4-5); a lane's kept elements go to cnt +
        // (kept by lower lanes) in group order, so the order is still ascending block index.
        constexpr int kGather = 2;  // 4 spills at 5 CTAs per SM
        for (int base = 0; base < int(ng); base += 32 * kGather) {
          float4 x[kGather][2];
          int gi[kGather];
#pragma unroll
          for (int u = 0; u < kGather; ++u) {
            const int j = base + u * 32 + lane;
            gi[u] = j < int(ng) ? sm.groups[j] : -1;
            if (gi[u] >= 0) {
              const float4* src = reinterpret_cast<const float4*>(row + int64_t(gi[u]) * kBsGroup);
              x[u][0] = src[0];
              x[u][1] = src[1];
            } else {
              x[u][0] = x[u][1] = make_float4(0.f, 0.f, 0.f, 0.f);
            }
          }
#pragma unroll
          for (int u = 0; u < kGather; ++u) {
            const float e[kBsGroup] = {x[u][0].x, x[u][0].y, x[u][0].z, x[u][0].w,
                                       x[u][1].x, x[u][1].y, x[u][1].z, x[u][1].w};
            uint32_t ek[kBsGroup];
            uint32_t keep = 0;
#pragma unroll
            for (int q = 0; q < kBsGroup; ++q) {
              ek[q] = order_key(e[q]);
              if (gi[u] >= 0 && gi[u] * kBsGroup + q < n && ek[q] >= thr) keep |= 1u << q;
            }
            const uint32_t c = __popc(keep);
            uint32_t at = cnt + warp_excl_scan(c);
#pragma unroll
            for (int q = 0; q < kBsGroup; ++q)
              if ((keep >> q) & 1u) {
                if (at < uint32_t(kWCand)) cand[at] = ek[q], cidx[at] = gi[u] * kBsGroup + q;
                clo = min(clo, ek[q]), chi = max(chi, ek[q]);
                ++at;
              }
            cnt += warp_sum(c);
          }
        }
      } else {
        for (int base = 0; base < m; base += 32 * kUnroll) {
          float v[kUnroll];
          int idx[kUnroll];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const int j = base + u * 32 + lane;
            idx[u] = j < m ? sm.groups[j / kBsGroup] * kBsGroup + j % kBsGroup : n;
            v[u] = idx[u] < n ? row[idx[u]] : 0.f;
          }
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const uint32_t key = order_key(v[u]);
            const bool keep = idx[u] < n && key >= thr;
            const uint32_t kb = __ballot_sync(0xffffffffu, keep);
            const uint32_t at = cnt + __popc(kb & lt);
            if (keep && at < uint32_t(kWCand)) cand[at] = key, cidx[at] = idx[u];
            if (keep) clo = min(clo, key), chi = max(chi, key);
            cnt += __popc(kb);
          }
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        clo = min(clo, __shfl_xor_sync(0xffffffffu, clo, o));
        chi = max(chi, __shfl_xor_sync(0xffffffffu, chi, o));
      }
      __syncwarp();
      if (cnt <= uint32_t(kWCand)) {  // cnt >= kk (see above)
        group_topk(WarpGroup{sm.hist}, cand, cnt, kk, out, cidx, clo, chi);
        return;
      }
    }
    __syncwarp();  // the plain path restages the buffer
  }
  if (n <= kWBuf && !a.rows_in_global) {
    uint32_t klo = 0, khi = 0;
    warp_stage_keys(kbuf, row, n, klo, khi);
    group_topk(WarpGroup{sm.hist}, kbuf, n, kk, out, nullptr, klo, khi);
  } else {
    group_topk(WarpGroup{sm.hist}, row, n, kk, out);
  }
}

}  // namespace

void vs_select(const HeadInfo* heads, const float* vscore, const float* sscore, int64_t stride, int32_t* lines,
               int32_t* gap_count, const Geom& g, cudaStream_t s) {
  vs_topk_kernel<<<dim3(unsigned(g.n_head), 2), kVsSelThreads, 0, s>>>(heads, vscore, sscore, stride, lines,
                                                                       g.n_keys);
  LC_LAUNCH_CHECK("vs_topk_kernel heads=%d n_keys=%lld", g.n_head, (long long)g.n_keys);
  vs_gaps(heads, lines, gap_count, g, s);
}

void vs_gaps(const HeadInfo* heads, int32_t* lines, int32_t* gap_count, const Geom& g, cudaStream_t s) {
  vs_gaps_kernel<<<dim3(unsigned(g.n_head), 2), kGapThreads, 0, s>>>(heads, lines, gap_count, g.rows_last);
  LC_LAUNCH_CHECK("vs_gaps_kernel heads=%d", g.n_head);
}

void bs_select_wave(const BsSelectArgs& a, cudaStream_t s) {
  constexpr size_t kSmem = sizeof(BsWarpSmem) * kBsRowsPerCta;
  static const cudaError_t e =
      cudaFuncSetAttribute(bs_select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem));
  LC_CUDA_CHECK(e, "bs_select_kernel: raising dynamic shared memory to %zu bytes", kSmem);
  const dim3 grid(unsigned((a.b1 - a.b0 + kBsRowsPerCta - 1) / kBsRowsPerCta), unsigned(a.s1 - a.s0));
  bs_select_kernel<<<grid, kBsRowsPerCta * 32, kSmem, s>>>(a);
  LC_LAUNCH_CHECK("bs_select_kernel rows=[%lld,%lld) slots=[%d,%d)", (long long)a.b0, (long long)a.b1, a.s0, a.s1);
}

}  // namespace longctx::cuda::mindex

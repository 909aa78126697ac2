// minference_csr.cu (cuda): the selected lines / blocks / static windows of every query head become
// the CSR index of sparse_attention.h: per (head, query block) row r = h * n_qblk + b, key ranges
// [start, end) and single key columns. Two kernels with one body: count (ranges and columns per
// row, for the scan that makes range_ptr / col_ptr) and fill (writes them at those offsets).
//
// Rules, exactly those of the CPU builders (each is checked against them in
// tests/cuda/test_minference_index.cpp):
//   vertical-slash: convert_vs_index (methods/minference/vs_convert.cpp, paper Algorithm 4). Block [first,
//     end_m) (end_m = last + 1); slash o covers [max(first - o, 0), end_m - o) when o < end_m;
//     visited by decreasing o and merged when a start does not exceed the running end; verticals
//     < end_m outside every range become columns.
//   block-sparse: the selected key blocks (ascending) as [64c, min(64c + 64, n_keys)), adjacent
//     blocks merged (block_sparse_index.cpp).
//   A-shape: build_a_shape_index (sinks [0, sink) and window [first - window + 1, last + 1),
//     one range when they touch).
// How (VS, one warp per row, O(log) + O(output)): with offsets ascending sl[0..ks) and nv = the
// number of offsets < end_m, the CPU loop starts a new range at slash i (< nv - 1) exactly when
// max(first - sl[i], 0) > end_m - sl[i+1], i.e. when sl[i+1] - sl[i] > end_m - first (= rows of
// the block; the clip at 0 can never start a range). So the ranges of a block are the runs of
// consecutive selected slashes between "gaps" wider than its row count: with the gap list gp
// (ascending i with sl[i+1] - sl[i] > rows, minference_select.cu; one list for full blocks, one
// for the last block) and m = #gaps < nv - 1, range t = 0..m (ascending start) spans slash
// indices hi = (t == 0 ? nv - 1 : gp[m - t]) down to lo = (t == m ? 0 : gp[m - t - 1] + 1):
// [max(first - sl[hi], 0), end_m - sl[lo]). The kept columns are the verticals in the gaps between
// consecutive ranges (and after the last one): slices of the sorted vertical list found by binary
// search, copied in order.
#include "kernels/cuda/check.h"
#include "kernels/cuda/minference_kernels.cuh"

namespace longctx::cuda::mindex {
namespace {

constexpr int kWarpsPerCta = 8;
constexpr int kSmallSlice = 8;  // slices up to this long are copied by their own lane; longer by the warp

template <bool kFill>
__device__ void vs_row(const CsrArgs& a, const HeadInfo& hi, int h, int64_t r, int64_t b, int64_t& nr_out,
                       int64_t& nc_out) {
  const Geom& g = a.g;
  const int lane = threadIdx.x & 31;
  const int32_t* vt = a.lines + hi.off;  // verticals, ascending
  const int64_t kv = hi.p0, ks = hi.p1;
  const int32_t* sl = vt + kv;           // slash offsets, ascending
  const int64_t first = g.q_pos0 + b * kBlk;
  const int64_t last1 = g.q_pos0 + min((b + 1) * kBlk, g.n_q);
  const int64_t end_m = min(last1, g.n_kv);
  const int64_t rows = end_m - first;
  const bool full = rows == kBlk;
  const int32_t* gp = sl + ks * (full ? 1 : 2);
  const int64_t ng = a.gap_count[2 * h + (full ? 0 : 1)];
  const int64_t nv = lower_bound_i32(sl, ks, end_m);
  int32_t* ranges = kFill ? a.ranges + 2 * a.range_ptr[r] : nullptr;
  int32_t* cols = kFill ? a.cols + a.col_ptr[r] : nullptr;
  int64_t ncols = 0;
  int64_t tail_start = 0;  // columns after the last range: [tail_start, end_m)
  int64_t nr = 0;
  if (nv > 0) {
    const int64_t m = lower_bound_i32(gp, ng, nv - 1);
    nr = m + 1;
    for (int64_t tb = 0; tb <= m; tb += 32) {
      const int64_t t = tb + lane;
      const bool act = t <= m;
      int64_t c0 = 0, c1 = 0, s = 0, e = 0;
      if (act) {
        const int64_t hi_i = t == 0 ? nv - 1 : gp[m - t];
        const int64_t lo_i = t == m ? 0 : gp[m - t - 1] + 1;
        s = max(first - int64_t(sl[hi_i]), int64_t(0));
        e = end_m - sl[lo_i];
        const int64_t prev_e = t == 0 ? 0 : end_m - sl[gp[m - t] + 1];  // end of range t - 1
        c0 = lower_bound_i32(vt, kv, prev_e);
        c1 = lower_bound_i32(vt, kv, s);
      }
      const int64_t n = c1 - c0;
      const int64_t excl = warp_excl_scan(n);
      if constexpr (kFill) {
        if (act) {
          ranges[2 * t] = int32_t(s);
          ranges[2 * t + 1] = int32_t(e);
          if (n <= kSmallSlice)
            for (int64_t i = 0; i < n; ++i) cols[ncols + excl + i] = vt[c0 + i];
        }
        // Long slices: the whole warp copies each, one after the other.
        uint32_t big = __ballot_sync(0xffffffffu, act && n > kSmallSlice);
        while (big) {
          const int src = __ffs(big) - 1;
          big &= big - 1;
          const int64_t bc0 = __shfl_sync(0xffffffffu, c0, src), bn = __shfl_sync(0xffffffffu, n, src);
          const int64_t bo = __shfl_sync(0xffffffffu, excl, src);
          for (int64_t i = lane; i < bn; i += 32) cols[ncols + bo + i] = vt[bc0 + i];
        }
      }
      ncols += warp_sum(n);
    }
    tail_start = end_m - sl[0];  // end of the last range (slash index 0 = smallest offset)
  }
  // Columns after the last range (or all causal verticals when no slash reaches the block).
  const int64_t c0 = lower_bound_i32(vt, kv, tail_start), c1 = lower_bound_i32(vt, kv, end_m);
  if constexpr (kFill)
    for (int64_t i = lane; i < c1 - c0; i += 32) cols[ncols + i] = vt[c0 + i];
  ncols += c1 - c0;
  nr_out = nr;
  nc_out = ncols;
}

template <bool kFill>
__device__ void bs_row(const CsrArgs& a, const HeadInfo& hi, int64_t r, int64_t b, int64_t& nr_out) {
  const Geom& g = a.g;
  const int lane = threadIdx.x & 31;
  const int64_t kk = bs_kk(g, b, hi.p0);
  const int32_t* sel = a.bs_sel + hi.off + b * hi.stride;
  int32_t* ranges = kFill ? a.ranges + 2 * a.range_ptr[r] : nullptr;
  const uint32_t lt = lanemask_lt();
  int64_t n_start = 0, n_end = 0;
  for (int64_t ib = 0; ib < kk; ib += 32) {
    const int64_t i = ib + lane;
    const bool act = i < kk;
    const int64_t v = act ? sel[i] : 0;
    const bool is_start = act && (i == 0 || int64_t(sel[i - 1]) + 1 != v);
    const bool is_end = act && (i == kk - 1 || v + 1 != int64_t(sel[i + 1]));
    const uint32_t sb = __ballot_sync(0xffffffffu, is_start), eb = __ballot_sync(0xffffffffu, is_end);
    if constexpr (kFill) {
      if (is_start) ranges[2 * (n_start + __popc(sb & lt))] = int32_t(v * kBlk);
      if (is_end) ranges[2 * (n_end + __popc(eb & lt)) + 1] = int32_t(min((v + 1) * kBlk, g.n_keys));
    }
    n_start += __popc(sb);
    n_end += __popc(eb);
  }
  nr_out = n_start;
}

template <bool kFill>
__device__ void as_row(const CsrArgs& a, const HeadInfo& hi, int64_t r, int64_t b, int64_t& nr_out) {
  const Geom& g = a.g;
  const int64_t sink = hi.p0, window = hi.p1;
  const int64_t first = g.q_pos0 + b * kBlk;
  const int64_t last = g.q_pos0 + min((b + 1) * kBlk, g.n_q) - 1;
  const int64_t end = min(last + 1, g.n_kv);
  const int64_t sink_end = min(sink, end);
  const int64_t win_start = max(first - window + 1, int64_t(0));
  int64_t rg[4];
  int n = 0;
  if (window > 0 && win_start <= sink_end) {
    rg[n++] = 0, rg[n++] = end;
  } else {
    if (sink_end > 0) rg[n++] = 0, rg[n++] = sink_end;
    if (window > 0 && win_start < end) rg[n++] = win_start, rg[n++] = end;
  }
  if constexpr (kFill) {
    if ((threadIdx.x & 31) == 0)
      for (int i = 0; i < n; ++i) a.ranges[2 * a.range_ptr[r] + i] = int32_t(rg[i]);
  }
  nr_out = n / 2;
}

template <bool kFill>
__global__ void __launch_bounds__(kWarpsPerCta * 32) csr_kernel(const CsrArgs a) {
  const int64_t n_rows = int64_t(a.g.n_head) * a.g.n_qblk;
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerCta + (threadIdx.x >> 5);
  if (r >= n_rows) return;
  const int h = int(r / a.g.n_qblk);
  const int64_t b = r % a.g.n_qblk;
  const HeadInfo hi = a.heads[h];
  int64_t nr = 0, nc = 0;
  if (hi.kind == kKindVS) vs_row<kFill>(a, hi, h, r, b, nr, nc);
  else if (hi.kind == kKindBS) bs_row<kFill>(a, hi, r, b, nr);
  else as_row<kFill>(a, hi, r, b, nr);
  if constexpr (!kFill) {
    if ((threadIdx.x & 31) == 0) {
      a.rcount[r] = nr;
      a.ccount[r] = nc;
      if (r == 0) a.rcount[n_rows] = 0, a.ccount[n_rows] = 0;  // the scan's last input: totals land at [n_rows]
    }
  }
}

template <bool kFill>
void launch(const CsrArgs& a, cudaStream_t s) {
  const int64_t n_rows = int64_t(a.g.n_head) * a.g.n_qblk;
  const int64_t blocks = (n_rows + kWarpsPerCta - 1) / kWarpsPerCta;
  csr_kernel<kFill><<<unsigned(blocks), kWarpsPerCta * 32, 0, s>>>(a);
  LC_LAUNCH_CHECK("minference csr_kernel<%s> rows=%lld", kFill ? "fill" : "count", (long long)n_rows);
}

}  // namespace

void csr_count(const CsrArgs& a, cudaStream_t s) { launch<false>(a, s); }
void csr_fill(const CsrArgs& a, cudaStream_t s) { launch<true>(a, s); }

}  // namespace longctx::cuda::mindex

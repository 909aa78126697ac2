// sparse_plan.cu (cuda): the plan kernel of sparse_plan.h.
#include "kernels/cuda/sparse_plan.h"

#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/check.h"

namespace longctx::cuda {
namespace {

struct PlanArgs {
  DeviceSparseIndex idx;
  int32_t* ranges_out;  // canonical ranges at the input's offsets (2 int32 per range)
  int32_t* cols_out;    // canonical columns at the input's offsets
  int32_t* n_r;         // [rows] canonical counts
  int32_t* n_c;
  int64_t n_q, n_kv, q_pos0;
  int64_t window;  // > 0: keys >= the block's first row's position - window + 1 only
  bool causal;
};

// One warp per index row r = ih * n_qblk + b.
__global__ void plan_kernel(const PlanArgs a) {
  const int64_t n_rows = int64_t(a.idx.n_index_head) * a.idx.n_qblk;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= n_rows) return;
  const int lane = threadIdx.x % 32;
  const unsigned lt_mask = (1u << lane) - 1u;
  const int64_t b = r % a.idx.n_qblk;
  const int64_t last_row = min((b + 1) * kSparseQBlock, a.n_q) - 1;
  const int64_t lim = a.causal ? min(a.n_kv, a.q_pos0 + last_row + 1) : a.n_kv;  // keys < lim
  const int32_t ilim = int32_t(max(lim, int64_t(0)));  // q_pos0 < 0 can put the frontier before key 0
  // The row-level window's lower bound for the whole block (its first row sees the fewest keys
  // below; the kernel masks the other rows per row).
  const int32_t ilo = a.window > 0 ? int32_t(max(a.q_pos0 + b * kSparseQBlock - a.window + 1, int64_t(0))) : 0;

  // Ranges. pm: inclusive prefix max of the (clipped) ends of valid ranges; a valid range opens a
  // new merged range iff its start exceeds every earlier end (equal = touching = merge). The
  // previous merged range then ends at that earlier maximum.
  const int64_t r0 = a.idx.range_ptr[r], r1 = a.idx.range_ptr[r + 1];
  int32_t* rout = a.ranges_out + 2 * r0;
  int nr = 0;
  int32_t run_end = INT_MIN;  // max end of all earlier valid ranges
  for (int64_t base = r0; base < r1; base += 32) {
    const int64_t i = base + lane;
    int32_t s = 0, e = 0;
    bool valid = false;
    if (i < r1) {
      s = max(a.idx.ranges[2 * i], ilo);
      e = min(a.idx.ranges[2 * i + 1], ilim);
      valid = s < e;
    }
    int32_t pm = valid ? e : INT_MIN;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int32_t o = __shfl_up_sync(0xffffffffu, pm, off);
      if (lane >= off) pm = max(pm, o);
    }
    int32_t excl = __shfl_up_sync(0xffffffffu, pm, 1);
    if (lane == 0) excl = INT_MIN;
    excl = max(excl, run_end);
    const bool starts = valid && s > excl;
    const unsigned sm = __ballot_sync(0xffffffffu, starts);
    if (starts) {
      const int idx = nr + __popc(sm & lt_mask);
      rout[2 * idx] = s;
      if (idx > 0) rout[2 * idx - 1] = excl;  // closes the previous merged range
    }
    nr += __popc(sm);
    run_end = max(run_end, __shfl_sync(0xffffffffu, pm, 31));
  }
  if (lane == 0 && nr > 0) rout[2 * nr - 1] = run_end;
  __syncwarp();

  // Columns: inside [ilo, lim), not a repeat, not inside a merged range.
  const int64_t c0 = a.idx.col_ptr[r], c1 = a.idx.col_ptr[r + 1];
  int32_t* cout = a.cols_out + c0;
  int nc = 0;
  int32_t prev_last = INT_MIN;
  for (int64_t base = c0; base < c1; base += 32) {
    const int64_t i = base + lane;
    const int32_t c = i < c1 ? a.idx.cols[i] : INT_MIN;
    int32_t prev = __shfl_up_sync(0xffffffffu, c, 1);
    if (lane == 0) prev = prev_last;
    bool keep = i < c1 && c >= ilo && c < ilim && c != prev;
    if (keep && nr > 0) {
      int lo = 0, hi = nr;  // first merged range with start > c
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (__ldcg(&rout[2 * mid]) <= c)
          lo = mid + 1;
        else
          hi = mid;
      }
      if (lo > 0 && __ldcg(&rout[2 * (lo - 1) + 1]) > c) keep = false;
    }
    const unsigned km = __ballot_sync(0xffffffffu, keep);
    if (keep) cout[nc + __popc(km & lt_mask)] = c;
    nc += __popc(km);
    prev_last = __shfl_sync(0xffffffffu, c, 31);
  }
  if (lane == 0) {
    a.n_r[r] = nr;
    a.n_c[r] = nc;
  }
}

}  // namespace

int current_sm() {
  static const int sm = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    return major * 10 + minor;
  }();
  return sm;
}

void check_sparse_params(const SparseAttnParams& p, const char* who) {
  constexpr int64_t kBQ = kSparseQBlock;
  LC_REQUIRE(p.n_q > 0 && p.n_kv > 0 && p.n_q <= 0x7fffffff && p.n_kv <= 0x7fffffff &&
                 (p.q_pos0 >= 0 || (p.causal && p.q_pos0 > -0x7fffffff)),
             "%s: bad sizes n_q=%lld n_kv=%lld q_pos0=%lld (negative only with the causal mask)", who,
             (long long)p.n_q, (long long)p.n_kv, (long long)p.q_pos0);
  LC_REQUIRE(p.window == 0 || (p.window > 0 && p.causal && p.kv_dtype == KvDtype::bf16),
             "%s: window %lld needs the causal mask and bf16 K/V (a positive window, or 0 for none)", who,
             (long long)p.window);
  LC_REQUIRE(p.n_head > 0 && p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0,
             "%s: n_head %d is not a multiple of n_kv_head %d", who, p.n_head, p.n_kv_head);
  LC_REQUIRE(!p.causal || p.q_pos0 + p.n_q <= p.n_kv, "%s: causal chunk q_pos0 %lld + n_q %lld exceeds n_kv %lld",
             who, (long long)p.q_pos0, (long long)p.n_q, (long long)p.n_kv);
  LC_REQUIRE(p.tail_gather_max >= 0 && p.tail_gather_max <= kSparsePackMax,
             "%s: tail_gather_max %d outside [0, %d]", who, p.tail_gather_max, kSparsePackMax);
  LC_REQUIRE(p.kv_dtype == KvDtype::bf16 ||
                 (p.kv_dtype == KvDtype::fp8_e4m3 && std::isfinite(p.k_scale) && p.k_scale > 0.f &&
                  std::isfinite(p.v_scale) && p.v_scale > 0.f),
             "%s: fp8 K/V scales must be finite and > 0 (k_scale %g, v_scale %g)", who, p.k_scale, p.v_scale);
  const auto& ix = p.index;
  LC_REQUIRE(ix.n_index_head > 0 && p.n_head % ix.n_index_head == 0,
             "%s: n_head %d is not a multiple of the index's %d heads", who, p.n_head, ix.n_index_head);
  LC_REQUIRE(ix.n_qblk == (p.n_q + kBQ - 1) / kBQ, "%s: index has %lld query blocks, n_q %lld needs %lld", who,
             (long long)ix.n_qblk, (long long)p.n_q, (long long)((p.n_q + kBQ - 1) / kBQ));
  LC_REQUIRE(ix.range_ptr && ix.col_ptr && (ix.n_ranges == 0 || ix.ranges) && (ix.n_cols == 0 || ix.cols),
             "%s: index pointers missing", who);
  LC_REQUIRE(p.workspace && p.workspace_bytes >= sparse_plan_layout(ix).total, "%s: workspace of %zu bytes, needs %zu",
             who, p.workspace_bytes, sparse_plan_layout(ix).total);
}

SparseKernelArgs sparse_kernel_args(const SparseAttnParams& p) {
  constexpr float kLog2e = 1.4426950408889634f;
  const SparsePlanView pv = sparse_plan_view(p);
  SparseKernelArgs a{};
  a.q = static_cast<const __nv_bfloat16*>(p.q);
  a.k = static_cast<const __nv_bfloat16*>(p.k);
  a.v = static_cast<const __nv_bfloat16*>(p.v);
  a.o = static_cast<__nv_bfloat16*>(p.o);
  a.lse = p.lse;
  a.range_ptr = p.index.range_ptr;
  a.col_ptr = p.index.col_ptr;
  a.ranges = pv.ranges;
  a.cols = pv.cols;
  a.n_r = pv.n_r;
  a.n_c = pv.n_c;
  a.n_q = p.n_q;
  a.n_kv = p.n_kv;
  a.q_pos0 = p.q_pos0;
  a.n_qblk = p.index.n_qblk;
  a.n_head = p.n_head;
  a.n_kv_head = p.n_kv_head;
  a.group = p.n_head / p.n_kv_head;
  a.heads_per_index = p.n_head / p.index.n_index_head;
  const float scale = p.scale > 0.f ? p.scale : 1.f / std::sqrt(float(p.head_dim));
  a.scale_log2 = scale * kLog2e;
  a.window = p.window;
  a.causal = p.causal;
  return a;
}

SparsePlanLayout sparse_plan_layout(const DeviceSparseIndex& ix) {
  auto up = [](size_t x) { return (x + 255) & ~size_t(255); };
  const size_t rows = size_t(ix.n_index_head) * size_t(ix.n_qblk);
  SparsePlanLayout l;
  l.ranges = 0;
  l.cols = up(size_t(ix.n_ranges) * 8);
  l.n_r = l.cols + up(size_t(ix.n_cols) * 4);
  l.n_c = l.n_r + up(rows * 4);
  l.total = l.n_c + up(rows * 4);
  return l;
}

SparsePlanView sparse_plan_view(const SparseAttnParams& p) {
  const SparsePlanLayout l = sparse_plan_layout(p.index);
  const uint8_t* ws = static_cast<const uint8_t*>(p.workspace);
  SparsePlanView v;
  v.ranges = reinterpret_cast<const int32_t*>(ws + l.ranges);
  v.cols = reinterpret_cast<const int32_t*>(ws + l.cols);
  v.n_r = reinterpret_cast<const int32_t*>(ws + l.n_r);
  v.n_c = reinterpret_cast<const int32_t*>(ws + l.n_c);
  return v;
}

void launch_sparse_plan(const SparseAttnParams& p, Stream s, const char* who) {
  const SparsePlanLayout l = sparse_plan_layout(p.index);
  uint8_t* ws = static_cast<uint8_t*>(p.workspace);
  PlanArgs a{};
  a.idx = p.index;
  a.ranges_out = reinterpret_cast<int32_t*>(ws + l.ranges);
  a.cols_out = reinterpret_cast<int32_t*>(ws + l.cols);
  a.n_r = reinterpret_cast<int32_t*>(ws + l.n_r);
  a.n_c = reinterpret_cast<int32_t*>(ws + l.n_c);
  a.n_q = p.n_q;
  a.n_kv = p.n_kv;
  a.q_pos0 = p.q_pos0;
  a.window = p.window;
  a.causal = p.causal;
  const int64_t rows = int64_t(p.index.n_index_head) * p.index.n_qblk;
  constexpr int kWarps = 8;  // warps (index rows) per plan block
  const int64_t blocks = (rows + kWarps - 1) / kWarps;
  LC_REQUIRE(blocks <= 0x7fffffff, "%s: %lld index rows exceed the grid limit", who, (long long)rows);
  plan_kernel<<<unsigned(blocks), kWarps * 32, 0, static_cast<cudaStream_t>(s)>>>(a);
  LC_LAUNCH_CHECK("%s: sparse plan kernel rows=%lld", who, (long long)rows);
}

}  // namespace longctx::cuda

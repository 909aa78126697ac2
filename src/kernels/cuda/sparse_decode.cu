// sparse_decode.cu (cuda): decode attention over the keys a decode index selects, split-KV.
//
// What and layout: sparse_decode.h. Three launches per step, all sized from host-known bounds
// (never from the index contents), so the step is graph-capturable:
//   plan    grid n_rows: normalises each index row into segments (disjoint, with key offsets)
//   expand  grid (x, n_rows): the pool row of every attended key, in a per-row list (with KV
//           offload: looked up in the K/V cache's table, a bank row or a host row code, misses
//           recorded)
//   split   decode_split.cuh with GatherKeys (offload: OffloadGatherKeys): the shared mainloop and
//           last-CTA merge
// Segments: row r's ranges and columns become range_count + col_count segments stored at
// [range_ptr[r] + col_ptr[r], range_ptr[r+1] + col_ptr[r+1]) of two workspace arrays (the CSR
// offsets give every row a fixed place, bounded by the index capacities):
//   seg_start  first position of the segment (effective start of a range after the earlier
//              ranges' union; the position of a column)
//   seg_off    the segment's first key ordinal in the row (exclusive prefix of segment sizes)
// A range keeps [max(start, max end of the earlier ranges), end); a column is kept once, only
// outside every range. Sizes may be 0 (covered ranges, dropped columns); seg_start never
// decreases over a row's ranges, so "is column c covered" is one binary search, and key ordinal
// k lives in the last segment whose offset is <= k.
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/decode_split.cuh"
#include "kernels/cuda/kv_offload.cuh"
#include "kernels/cuda/sparse_decode.h"

namespace longctx::cuda {
namespace {

using namespace decode_split;

constexpr int kPlanThreads = 256;
constexpr int kExpandThreads = 256;
// Automatic splits give each at least this many 64-key tiles: a split's fixed cost (start-up,
// partial write, its share of the merge) outweighs streaming a few tiles, and sparse rows are
// often short (A-shape: 4224 keys = 66 tiles).
constexpr int kMinTilesPerSplit = 4;

struct PlanArgs {
  DecodeIndex idx;
  const int32_t* seq_lens;  // [n_seq]
  int64_t max_len;          // max_pages_per_seq * page_size: lengths are clamped to it
  int64_t max_keys;         // per-row cap (the key list's row stride)
  int64_t window, shift;    // SparseDecodeParams: keys in [len - shift - window, len - shift) (window 0: from 0)
  int32_t* row_keys;        // [n_rows] attended keys per row (after the cap)
  int32_t* seg_start;       // [range_capacity + col_capacity]
  int32_t* seg_off;         // same
};

__device__ __forceinline__ int clamp_ptr(const int32_t* ptr, int64_t r, int64_t cap) {
  return int(min(max(int64_t(ptr[r]), int64_t(0)), cap));
}

// Row r's CSR bounds, clamped to the capacities so bad offsets cannot read out of bounds.
struct RowSpan {
  int rb, re, cb, ce;
  __device__ int seg_base() const { return rb + cb; }
  __device__ int n_ranges() const { return re - rb; }
  __device__ int n_segs() const { return (re - rb) + (ce - cb); }
};
__device__ RowSpan row_span(const DecodeIndex& idx, int64_t r) {
  RowSpan s;
  s.rb = idx.range_ptr ? clamp_ptr(idx.range_ptr, r, idx.range_capacity) : 0;
  s.re = idx.range_ptr ? max(s.rb, clamp_ptr(idx.range_ptr, r + 1, idx.range_capacity)) : 0;
  s.cb = idx.col_ptr ? clamp_ptr(idx.col_ptr, r, idx.col_capacity) : 0;
  s.ce = idx.col_ptr ? max(s.cb, clamp_ptr(idx.col_ptr, r + 1, idx.col_capacity)) : 0;
  return s;
}

__device__ int seq_len_of(const int32_t* seq_lens, int s, int64_t max_len) {
  return int(min(int64_t(max(seq_lens[s], 0)), max_len));
}

struct MaxOp {
  __device__ int operator()(int a, int b) const { return max(a, b); }
};

__global__ void __launch_bounds__(kPlanThreads) sparse_decode_plan_kernel(const PlanArgs a) {
  using Scan = cub::BlockScan<int, kPlanThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int s_carry_max, s_carry_sum;
  const int64_t r = blockIdx.x;
  const int tid = threadIdx.x;
  // The row's keys lie in [lo, hi): its length, moved back by shift, and its window.
  const int hi = int(max(int64_t(seq_len_of(a.seq_lens, int(r / a.idx.n_index_head), a.max_len)) - a.shift,
                         int64_t(0)));
  const int lo = a.window > 0 ? int(max(int64_t(hi) - a.window, int64_t(0))) : 0;
  const RowSpan sp = row_span(a.idx, r);
  int32_t* seg_start = a.seg_start + sp.seg_base();
  int32_t* seg_off = a.seg_off + sp.seg_base();
  if (tid == 0) {
    s_carry_max = 0;  // max end of the ranges so far (ends are >= 0 after clipping)
    s_carry_sum = 0;  // keys so far
  }
  __syncthreads();
  // Ranges: effective start max(start, max end so far), size max(0, end - effective start).
  for (int i0 = 0; i0 < sp.n_ranges(); i0 += kPlanThreads) {
    const int i = i0 + tid;
    int st = 0, en = 0;
    if (i < sp.n_ranges()) {
      const int2 rg = reinterpret_cast<const int2*>(a.idx.ranges)[sp.rb + i];
      st = min(max(rg.x, lo), hi);
      en = min(max(rg.y, lo), hi);
    }
    int excl_max;
    Scan(tmp).ExclusiveScan(en, excl_max, 0, MaxOp());
    __syncthreads();
    const int eff = max(st, max(excl_max, s_carry_max));
    const int cnt = i < sp.n_ranges() ? max(0, en - eff) : 0;
    int off, chunk_sum;
    Scan(tmp).ExclusiveSum(cnt, off, chunk_sum);
    if (i < sp.n_ranges()) {
      seg_start[i] = eff;
      seg_off[i] = s_carry_sum + off;
    }
    __syncthreads();  // everyone has read the carries
    if (tid == kPlanThreads - 1) s_carry_max = max(s_carry_max, max(excl_max, en));
    if (tid == 0) s_carry_sum += chunk_sum;
    __syncthreads();
  }
  const int range_keys = s_carry_sum;
  // Columns: kept when inside [lo, hi), not a repeat, and outside every range.
  const int n_cols = sp.ce - sp.cb;
  const int32_t* cols = a.idx.cols + sp.cb;
  for (int i0 = 0; i0 < n_cols; i0 += kPlanThreads) {
    const int i = i0 + tid;
    int keep = 0, c = 0;
    if (i < n_cols) {
      c = cols[i];
      keep = c >= lo && c < hi && (i == 0 || cols[i - 1] != c);
      if (keep && sp.n_ranges() > 0) {
        // The last range with effective start <= c is the only one that can hold c.
        int lo = 0, hi = sp.n_ranges();  // first index with seg_start > c
        while (lo < hi) {
          const int mid = (lo + hi) >> 1;
          if (seg_start[mid] <= c) lo = mid + 1; else hi = mid;
        }
        if (lo > 0) {
          const int j = lo - 1;
          const int size = (j + 1 < sp.n_ranges() ? seg_off[j + 1] : range_keys) - seg_off[j];
          if (c < seg_start[j] + size) keep = 0;
        }
      }
    }
    int off, chunk_sum;
    Scan(tmp).ExclusiveSum(keep, off, chunk_sum);
    if (i < n_cols) {
      seg_start[sp.n_ranges() + i] = c;
      seg_off[sp.n_ranges() + i] = s_carry_sum + off;
    }
    __syncthreads();
    if (tid == 0) s_carry_sum += chunk_sum;
    __syncthreads();
  }
  if (tid == 0) a.row_keys[r] = int(min(int64_t(s_carry_sum), a.max_keys));
}

struct ExpandArgs {
  DecodeIndex idx;
  const int32_t* block_table;  // [n_seq][max_pages]
  int max_pages, page_size;
  int64_t max_keys;
  const int32_t* row_keys;
  const int32_t* seg_start;
  const int32_t* seg_off;
  int32_t* key_rows;  // [n_rows][max_keys] pool rows; with offload the key codes (OffloadGatherKeys)
  KvOffloadCache offload;  // enabled: resolve each key through the cache (one lookup per attended key)
  int heads_per_index, group;  // query heads per index row and per KV head (offload: row -> KV head)
};

__global__ void __launch_bounds__(kExpandThreads) sparse_decode_expand_kernel(const ExpandArgs a) {
  const int64_t r = blockIdx.y;
  const int s = int(r / a.idx.n_index_head);
  const int n = a.row_keys[r];
  const RowSpan sp = row_span(a.idx, r);
  const int32_t* seg_start = a.seg_start + sp.seg_base();
  const int32_t* seg_off = a.seg_off + sp.seg_base();
  const int32_t* bt = a.block_table + int64_t(s) * a.max_pages;
  int32_t* out = a.key_rows + r * a.max_keys;
  const bool offload = a.offload.table != nullptr;  // (enabled() is host code)
  const int hk = int(r % a.idx.n_index_head) * a.heads_per_index / a.group;  // offload: the row's KV head
  unsigned reads = 0, misses = 0;
  for (int k = blockIdx.x * kExpandThreads + threadIdx.x; k < n; k += gridDim.x * kExpandThreads) {
    int lo = 0, hi = sp.n_segs();  // first segment with offset > k
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (__ldg(seg_off + mid) <= k) lo = mid + 1; else hi = mid;
    }
    const int j = lo - 1;  // k < n guarantees lo >= 1
    const int pos = __ldg(seg_start + j) + (k - __ldg(seg_off + j));
    const int32_t host_row = bt[pos / a.page_size] * a.page_size + pos % a.page_size;
    if (!offload) {
      out[k] = host_row;
      continue;
    }
    // Key code: a hit is its bank row (>= 0), a miss -(host row) - 1.
    const int32_t slot = offload_lookup(a.offload, hk, pos, true);
    ++reads;
    misses += slot < 0;
    out[k] = slot >= 0 ? slot * a.offload.line_tokens + pos % a.offload.line_tokens : -host_row - 1;
  }
  if (offload) offload_add_stats(a.offload, reads, misses);
}

// Key source of sparse decode: row (b, index head of h0)'s gathered list of pool rows.
struct GatherKeys {
  const int32_t* row_keys;  // [n_rows]
  const int32_t* key_rows;  // [n_rows][max_keys]
  int64_t max_keys;
  int n_index_head, heads_per_index;
  int64_t ld_row;  // elements per pool row (n_kv_head * D)

  __device__ int64_t row(int b, int h0) const { return int64_t(b) * n_index_head + h0 / heads_per_index; }
  __device__ int64_t n_keys(int b, int h0) const { return row_keys[row(b, h0)]; }
  int min_tiles_per_split;
  // The row's real key count spread over the splits, at least min_tiles_per_split tiles each.
  __device__ int split_tiles(int64_t n_tiles, int n_splits) const {
    return max(min_tiles_per_split, int((n_tiles + n_splits - 1) / n_splits));
  }
  struct Tile {
    const int32_t* rows;  // pool rows of the tile's keys
    int64_t ld_row;
    __device__ int64_t elem(int r) const { return int64_t(__ldg(rows + r)) * ld_row; }
  };
  __device__ Tile tile(int b, int h0, int64_t n0) const { return {key_rows + row(b, h0) * max_keys + n0, ld_row}; }
};

// Key source with KV offload: the list holds key codes (expand kernel); a hit is read from the
// banks (DecodeArgs k/v = bank_k/bank_v), a miss from the host pools, addressed as element
// offsets from the banks (host_k/host_v: the host pools' element distance from the banks, in one
// flat 64-bit address space: mapped host memory is device-addressable).
struct OffloadGatherKeys : GatherKeys {
  int64_t host_k, host_v;
  struct Tile {
    const int32_t* codes;
    int64_t ld_row, host_k, host_v;
    __device__ int64_t at(int r, int64_t host) const {
      const int32_t c = __ldg(codes + r);
      return c >= 0 ? int64_t(c) * ld_row : host + int64_t(-(c + 1)) * ld_row;
    }
    __device__ int64_t elem(int r) const { return at(r, host_k); }
    __device__ int64_t v_elem(int r) const { return at(r, host_v); }
  };
  __device__ Tile tile(int b, int h0, int64_t n0) const {
    return {key_rows + row(b, h0) * max_keys + n0, ld_row, host_k, host_v};
  }
};

int64_t resolved_max_keys(const SparseDecodeParams& p) {
  const int64_t cap = int64_t(p.kv.max_pages_per_seq) * p.kv.page_size;
  return p.max_keys_per_row > 0 ? std::min(p.max_keys_per_row, cap) : cap;
}

// Query heads per CTA: those sharing one KV head and one index row.
int cta_heads(int n_head, int n_kv_head, int n_index_head) {
  return std::min(n_head / n_kv_head, n_head / n_index_head);
}

// Splits for the longest row (max_keys_per_row): dense decode's one-wave plan, then at most one
// split per kMinTilesPerSplit tiles; an explicit n_splits is taken as is (up to one per tile).
SplitPlan plan_gather(const SparseDecodeParams& p) {
  const int units = p.n_head / cta_heads(p.n_head, p.kv.n_kv_head, p.index.n_index_head);
  const int64_t max_keys = resolved_max_keys(p);
  SplitPlan plan = plan_splits<GatherKeys>(int64_t(p.kv.n_seq) * units, p.kv.head_dim, p.kv.elem == KvElem::fp8_e4m3,
                                           max_keys, p.n_splits);
  if (p.n_splits <= 0) {
    const int64_t n_tiles = std::max<int64_t>(1, (max_keys + kBlockN - 1) / kBlockN);
    plan.n_splits = int(std::min<int64_t>(plan.n_splits, (n_tiles + kMinTilesPerSplit - 1) / kMinTilesPerSplit));
  }
  return plan;
}

struct WorkspaceLayout {
  size_t row_keys, seg_start, seg_off, key_rows, o_part, lse_part, total;  // byte offsets
};
WorkspaceLayout workspace_layout(const SparseDecodeBounds& b) {
  auto al = [](size_t x) { return (x + 255) & ~size_t(255); };
  const size_t n_rows = size_t(b.n_seq) * b.n_index_head;
  const size_t segs = size_t(b.range_capacity + b.col_capacity);
  const int64_t n_tiles = std::max<int64_t>(1, (b.max_keys_per_row + kBlockN - 1) / kBlockN);
  const size_t splits = size_t(std::min(n_tiles, kMaxSplits));
  const size_t q_rows = size_t(b.n_seq) * b.n_head;
  WorkspaceLayout l{};
  l.row_keys = kCounterBytes;
  l.seg_start = l.row_keys + al(n_rows * 4);
  l.seg_off = l.seg_start + al(segs * 4);
  l.key_rows = l.seg_off + al(segs * 4);
  l.o_part = l.key_rows + al(n_rows * size_t(b.max_keys_per_row) * 4);
  l.lse_part = l.o_part + al(q_rows * splits * b.head_dim * 4);
  l.total = l.lse_part + al(q_rows * splits * 4);
  return l;
}

void check_sparse_decode(const SparseDecodeParams& p) {
  const KvView& kv = p.kv;
  const DecodeIndex& ix = p.index;
  LC_REQUIRE(p.q && p.o && kv.k_pool && kv.v_pool && kv.block_table && kv.seq_lens,
             "sparse_decode: null q/o/k_pool/v_pool/block_table/seq_lens pointer");
  LC_REQUIRE(kv.on_device && ix.on_device, "sparse_decode: the KvView and the DecodeIndex must be device views");
  LC_REQUIRE(kv.elem == KvElem::bf16 || (kv.elem == KvElem::fp8_e4m3 && kv.k_scale > 0.f && kv.v_scale > 0.f),
             "sparse_decode: KV element %d unsupported (bf16, or fp8_e4m3 with positive scales)", int(kv.elem));
  LC_REQUIRE(kv.head_dim == 64 || kv.head_dim == 128 || kv.head_dim == 256,
             "sparse_decode: head_dim %d unsupported (64, 128 or 256)", kv.head_dim);
  LC_REQUIRE(p.n_head > 0 && kv.n_kv_head > 0 && p.n_head % kv.n_kv_head == 0 && p.n_head / kv.n_kv_head <= kMaxGroup,
             "sparse_decode: n_head %d / n_kv_head %d must be a positive integer <= %d", p.n_head, kv.n_kv_head,
             kMaxGroup);
  LC_REQUIRE(p.window >= 0 && p.shift >= 0, "sparse_decode: window %lld and shift %lld must be >= 0",
             (long long)p.window, (long long)p.shift);
  LC_REQUIRE(ix.n_index_head > 0 && p.n_head % ix.n_index_head == 0,
             "sparse_decode: n_index_head %d must divide n_head %d", ix.n_index_head, p.n_head);
  const int group = p.n_head / kv.n_kv_head, hpi = p.n_head / ix.n_index_head;
  LC_REQUIRE(group % hpi == 0 || hpi % group == 0,
             "sparse_decode: heads per KV head (%d) and heads per index head (%d) must divide one another", group,
             hpi);
  LC_REQUIRE(kv.n_seq > 0 && ix.n_seq == kv.n_seq, "sparse_decode: index has %d sequences, KV view %d", ix.n_seq,
             kv.n_seq);
  const int units = p.n_head / cta_heads(p.n_head, kv.n_kv_head, ix.n_index_head);
  LC_REQUIRE(kv.n_seq <= 65535 && int64_t(kv.n_seq) * units <= kMaxCounters,
             "sparse_decode: n_seq %d x %d head groups exceeds %lld per launch", kv.n_seq, units,
             (long long)kMaxCounters);
  LC_REQUIRE(ix.n_rows() <= INT_MAX && ix.n_rows() <= 65535,
             "sparse_decode: %lld index rows exceed one launch (65535)", (long long)ix.n_rows());
  LC_REQUIRE(kv.page_size >= 1 && kv.max_pages_per_seq > 0 && kv.n_pages > 0 &&
                 kv.n_pages * kv.page_size <= INT32_MAX,
             "sparse_decode: page_size %d, max_pages_per_seq %d, n_pages %lld: need positive sizes and a pool of "
             "at most 2^31 rows",
             kv.page_size, kv.max_pages_per_seq, (long long)kv.n_pages);
  LC_REQUIRE(ix.range_ptr && ix.col_ptr && (ix.range_capacity == 0 || ix.ranges) &&
                 (ix.col_capacity == 0 || ix.cols) && ix.range_capacity >= 0 && ix.col_capacity >= 0 &&
                 ix.range_capacity + ix.col_capacity <= INT32_MAX,
             "sparse_decode: index needs range_ptr, col_ptr, and ranges/cols for non-zero capacities (%lld, %lld)",
             (long long)ix.range_capacity, (long long)ix.col_capacity);
  if (p.offload.enabled()) {
    const KvOffloadCache& c = p.offload;
    LC_REQUIRE(kv.n_seq == 1 && c.bank_k && c.bank_v && c.n_kv_head == kv.n_kv_head && c.line_tokens >= 1,
               "sparse_decode: offload serves one sequence through a K/V cache of the view's %d KV heads",
               kv.n_kv_head);
    LC_REQUIRE(group % hpi == 0, "sparse_decode: offload needs each index row within one KV head (%d heads per "
               "KV head, %d per index row)", group, hpi);
    const int eb = kv_elem_bytes(kv.elem);
    LC_REQUIRE((reinterpret_cast<uintptr_t>(kv.k_pool) - reinterpret_cast<uintptr_t>(c.bank_k)) % eb == 0 &&
                   (reinterpret_cast<uintptr_t>(kv.v_pool) - reinterpret_cast<uintptr_t>(c.bank_v)) % eb == 0,
               "sparse_decode: offload pools and banks must be element-aligned");
  }
  const size_t need = sparse_decode_workspace_bytes(sparse_decode_bounds(p));
  LC_REQUIRE(p.workspace && p.workspace_bytes >= need,
             "sparse_decode: workspace of %zu bytes given, %zu needed; size it with sparse_decode_workspace_bytes "
             "and zero it once with sparse_decode_workspace_init",
             p.workspace_bytes, need);
}

}  // namespace

SparseDecodeBounds sparse_decode_bounds(const SparseDecodeParams& p) {
  SparseDecodeBounds b;
  b.n_seq = p.kv.n_seq;
  b.n_head = p.n_head;
  b.n_index_head = p.index.n_index_head;
  b.head_dim = p.kv.head_dim;
  b.max_keys_per_row = resolved_max_keys(p);
  b.range_capacity = p.index.range_capacity;
  b.col_capacity = p.index.col_capacity;
  return b;
}

size_t sparse_decode_workspace_bytes(const SparseDecodeBounds& b) { return workspace_layout(b).total; }

void sparse_decode_workspace_init(void* workspace, size_t workspace_bytes, Stream s) {
  LC_REQUIRE(workspace, "sparse_decode_workspace_init: null workspace");
  LC_CUDA_CHECK(cudaMemsetAsync(workspace, 0, workspace_bytes, static_cast<cudaStream_t>(s)),
                "sparse_decode_workspace_init(%zu bytes)", workspace_bytes);
}

int sparse_decode_num_splits(const SparseDecodeParams& p) {
  check_sparse_decode(p);
  return plan_gather(p).n_splits;
}

void sparse_decode(const SparseDecodeParams& p, Stream s) {
  check_sparse_decode(p);
  const auto stream = static_cast<cudaStream_t>(s);
  const KvView& kv = p.kv;
  const SparseDecodeBounds bounds = sparse_decode_bounds(p);
  const WorkspaceLayout l = workspace_layout(bounds);
  char* ws = static_cast<char*>(p.workspace);
  auto* row_keys = reinterpret_cast<int32_t*>(ws + l.row_keys);
  auto* seg_start = reinterpret_cast<int32_t*>(ws + l.seg_start);
  auto* seg_off = reinterpret_cast<int32_t*>(ws + l.seg_off);
  auto* key_rows = reinterpret_cast<int32_t*>(ws + l.key_rows);
  const int64_t n_rows = p.index.n_rows();
  const int64_t max_keys = bounds.max_keys_per_row;

  PlanArgs pa{p.index,  kv.seq_lens, int64_t(kv.max_pages_per_seq) * kv.page_size, max_keys, p.window, p.shift,
              row_keys, seg_start,   seg_off};
  sparse_decode_plan_kernel<<<unsigned(n_rows), kPlanThreads, 0, stream>>>(pa);
  LC_LAUNCH_CHECK("sparse_decode_plan_kernel rows=%lld", (long long)n_rows);

  // Expand: enough CTAs per row to fill the GPU about twice when rows are long; CTAs past a
  // row's real key count exit at once.
  ExpandArgs ea{p.index,  kv.block_table, kv.max_pages_per_seq, kv.page_size,
                max_keys, row_keys,        seg_start,           seg_off,
                key_rows, p.offload,       p.n_head / p.index.n_index_head, p.n_head / kv.n_kv_head};
  const int64_t want_x = std::max<int64_t>(1, 2 * num_sms() / n_rows);
  const int64_t gx = std::min<int64_t>(std::max<int64_t>(1, (max_keys + kExpandThreads - 1) / kExpandThreads), want_x);
  sparse_decode_expand_kernel<<<dim3(unsigned(gx), unsigned(n_rows)), kExpandThreads, 0, stream>>>(ea);
  LC_LAUNCH_CHECK("sparse_decode_expand_kernel rows=%lld x=%lld", (long long)n_rows, (long long)gx);

  const bool fp8 = kv.elem == KvElem::fp8_e4m3;
  const int heads = cta_heads(p.n_head, kv.n_kv_head, p.index.n_index_head);
  const int units = p.n_head / heads;
  const SplitPlan plan = plan_gather(p);
  DecodeArgs a{};
  a.q = static_cast<const bf16*>(p.q);
  a.k = kv.k_pool;
  a.v = kv.v_pool;
  a.o_part = reinterpret_cast<float*>(ws + l.o_part);
  a.lse_part = reinterpret_cast<float*>(ws + l.lse_part);
  a.counters = reinterpret_cast<int*>(ws);
  a.o = static_cast<bf16*>(p.o);
  a.lse = p.lse;
  a.n_head = p.n_head;
  a.group = p.n_head / kv.n_kv_head;
  a.cta_heads = heads;
  a.n_splits = plan.n_splits;
  const float scale = p.scale > 0.f ? p.scale : 1.f / std::sqrt(float(kv.head_dim));
  a.scale_log2 = scale * kLog2e * (fp8 ? kv.k_scale : 1.f);
  a.v_scale = fp8 ? kv.v_scale : 1.f;
  GatherKeys keys{row_keys,       key_rows,       max_keys, p.index.n_index_head, p.n_head / p.index.n_index_head,
                  kv.row_elems(), p.n_splits > 0 ? 1 : kMinTilesPerSplit};
  if (p.offload.enabled()) {
    const int64_t eb = kv_elem_bytes(kv.elem);
    a.k = p.offload.bank_k;
    a.v = p.offload.bank_v;
    const OffloadGatherKeys okeys{
        keys, (static_cast<const char*>(kv.k_pool) - static_cast<const char*>(p.offload.bank_k)) / eb,
        (static_cast<const char*>(kv.v_pool) - static_cast<const char*>(p.offload.bank_v)) / eb};
    launch_split_kernel(a, okeys, kv.head_dim, fp8, units, kv.n_seq, stream);
  } else {
    launch_split_kernel(a, keys, kv.head_dim, fp8, units, kv.n_seq, stream);
  }
  LC_LAUNCH_CHECK("sparse_decode split kernel d=%d fp8=%d n_seq=%d heads=%d/%d index heads=%d splits=%d",
                  kv.head_dim, int(fp8), kv.n_seq, p.n_head, kv.n_kv_head, p.index.n_index_head, plan.n_splits);
}

}  // namespace longctx::cuda

// minference_kernels.cuh (cuda, internal): what the GPU index builder's kernels share: the build
// geometry, the per-head table, named constants, the launchers of each stage, and small device
// helpers (order-preserving float keys, lower_bound, warp scans).
//
// Stages (one file each, launched in this order by MinferenceIndexBuilder::build on one stream):
//   minference_vs_estimate.cu  VS scores: softmax of the chunk's last 64 queries, column and
//                              diagonal sums (two passes over K, tensor cores)
//   minference_select.cu       top-k (radix select, topk.h tie-break): one CTA per VS line set,
//                              one warp per BS row (key blocks); VS slash gap lists for Algorithm 4
//   minference_block_sparse.cu BS: 64-token mean pooling, pooled scores (3xTF32 tensor cores)
//   minference_csr.cu          per (head, query block) ranges/columns: count, scan, fill
// Everything matches the CPU builders of src/sparse (the source of truth, see each file).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/sparse_attention.h"
#include "methods/minference/vs_estimate.h"

namespace longctx::cuda::mindex {

// Rows per query block, keys per pooled key block, estimating queries: all MInference's B = 64.
inline constexpr int kBlk = kSparseQBlock;
static_assert(kBlk == 64 && longctx::kLastQ == 64, "the builders assume 64-row blocks and 64 estimating queries");
// The reference's forced lines and budget floors (methods/minference/vs_estimate.h).
inline constexpr int64_t kForcedCols = longctx::kForcedSinkColumns;     // 30 sink columns
inline constexpr int64_t kForcedDiags = longctx::kForcedLocalDiagonals;  // offsets 0..99
inline constexpr int64_t kMinVertical = longctx::kMinVertical;           // k_v floor 30
inline constexpr int64_t kMinSlash = longctx::kMinSlash;                 // k_s floor 50

enum HeadKind : int32_t { kKindVS = 0, kKindBS = 1, kKindAS = 2 };  // = GpuPatternKind values

// Shape of one build (one layer, one prefill chunk).
struct Geom {
  int64_t n_q = 0;      // queries of the chunk
  int64_t n_keys = 0;   // keys the chunk sees = q_pos0 + n_q
  int64_t n_kv = 0;     // keys in the cache (>= n_keys); ranges are clipped to it like the CPU
  int64_t q_pos0 = 0;   // absolute position of query 0
  int64_t n_qblk = 0;   // ceil(n_q / 64)
  int64_t nkb = 0;      // pooled key blocks = ceil(n_keys / 64)
  int n_head = 0, n_kv_head = 0, group = 0, head_dim = 0;
  int R = 0;            // estimating rows = min(64, n_q): chunk rows n_q - R .. n_q - 1
  int rows_last = 0;    // rows of the last query block (1..64)
  float scale = 0.f;
};

// One query head's pattern with its budgets resolved for this build (device table [n_head]).
//   VS: p0 = k_v, p1 = k_s, clamped like select_vs_lines; lines at `off` in the lines buffer:
//       vertical[p0], slash[p1] (offsets), gaps64[p1], gaps_last[p1] (Algorithm 4 cut lists).
//   BS: p0 = k_b (as configured); selected key blocks of query block b at off + b * stride
//       (stride = the largest per-block count, min(nkb, max(k_b, 2))); slot = index in qsum.
//   A-shape: p0 = sink, p1 = window.
struct HeadInfo {
  int32_t kind = kKindVS;
  int32_t slot = 0;
  int64_t p0 = 0, p1 = 0;
  int64_t off = 0, stride = 0;
};

// Up to kVsHeadsPerCta query heads of one KV head, estimated together so K is read once.
inline constexpr int kVsHeadsPerCta = 4;  // Llama-3's GQA group (32 / 8)
struct VsBatch {
  int32_t hk = 0, nh = 0;
  int32_t h[kVsHeadsPerCta] = {0, 0, 0, 0};
};

// ---- block-sparse per-row geometry (block_sparse_index.cpp) ------------------------------------
// Candidates of query block b: key blocks c with 64c <= its last position; forced: c >= diag0.
__host__ __device__ inline int64_t bs_last_pos(const Geom& g, int64_t b) {
  const int64_t i1 = b * kBlk + kBlk < g.n_q ? b * kBlk + kBlk : g.n_q;
  return g.q_pos0 + i1 - 1;
}
__host__ __device__ inline int64_t bs_n_cand(const Geom& g, int64_t b) {
  const int64_t c = bs_last_pos(g, b) / kBlk + 1;
  return c < g.nkb ? c : g.nkb;
}
__host__ __device__ inline int64_t bs_diag0(const Geom& g, int64_t b) { return (g.q_pos0 + b * kBlk) / kBlk; }
// Blocks kept: min(n_cand, max(k_b, n_forced)) (top_k_indices clamps k to the candidates).
__host__ __device__ inline int64_t bs_kk(const Geom& g, int64_t b, int64_t k_b) {
  const int64_t nc = bs_n_cand(g, b), d0 = bs_diag0(g, b);
  const int64_t forced = nc - (d0 < nc ? d0 : nc);
  const int64_t k = k_b > forced ? k_b : forced;
  return k < nc ? k : nc;
}
// Rows of query block b (the divisor of the pooled query).
__host__ __device__ inline int bs_rows(const Geom& g, int64_t b) {
  return int(bs_last_pos(g, b) - g.q_pos0 - b * kBlk + 1);
}

// ---- device helpers ---------------------------------------------------------------------------
// Order-preserving key of a score: larger float -> larger key; NaN ranks as -inf and -0 as +0,
// exactly the comparisons of topk.cpp (ties are then broken by the smaller index).
__device__ __forceinline__ uint32_t order_key(float f) {
  if (f != f) f = -__int_as_float(0x7f800000);
  uint32_t u = __float_as_uint(f);
  if ((u << 1) == 0) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// First index i in [0, n) with a[i] >= x (a ascending), n if none.
__device__ __forceinline__ int64_t lower_bound_i32(const int32_t* a, int64_t n, int64_t x) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) >> 1;
    if (int64_t(a[mid]) < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

__device__ __forceinline__ uint32_t lanemask_lt() {
  uint32_t m;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
  return m;
}

// Exclusive prefix sum over the 32 lanes (all lanes must call).
template <class T>
__device__ __forceinline__ T warp_excl_scan(T v) {
  const int lane = threadIdx.x & 31;
  T x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  return x - v;
}
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// ---- stage launchers ----------------------------------------------------------------------------
// VS estimate (minference_vs_estimate.cu): writes vscore/sscore [n_head][stride] of the VS heads
// (forced lines already +inf), using part/rowstat as scratch.
struct VsEstimateArgs {
  const __nv_bfloat16* q = nullptr;  // [n_q, n_head, D]
  const __nv_bfloat16* k = nullptr;  // [n_kv, n_kv_head, D]
  const HeadInfo* heads = nullptr;   // [n_head]
  const VsBatch* batches = nullptr;  // [n_batches]
  int n_batches = 0;
  float2* part = nullptr;            // [n_chunks, n_head, 64] per-chunk (max, sum of exp)
  float2* rowstat = nullptr;         // [n_head, 64] (max, 1 / sum)
  float* vscore = nullptr;           // [n_head, stride] column sums (vertical scores)
  float* sscore = nullptr;           // [n_head, stride] diagonal sums, index = offset q - k
  int64_t stride = 0;
  Geom g;
  int64_t chunk_keys = 0;            // keys per CTA chunk (multiple of 64)
  int n_chunks = 0;
};
void vs_estimate(const VsEstimateArgs& a, cudaStream_t s);
// Chunking of the VS passes for a device with num_sms SMs (chunk_keys, n_chunks).
void vs_chunking(int64_t n_keys, int n_batches, int num_sms, int64_t& chunk_keys, int& n_chunks);
inline constexpr int kVsMaxChunks = 1024;  // bounds part[]: 1024 x n_head x 64 x 8 bytes

// Selection (minference_select.cu).
// VS: top-k verticals and slashes of every VS head into lines, then the slash gap lists.
void vs_select(const HeadInfo* heads, const float* vscore, const float* sscore, int64_t stride, int32_t* lines,
               int32_t* gap_count /* [n_head, 2] */, const Geom& g, cudaStream_t s);
// The slash cut lists alone (vs_select's last step), for lines selected by an earlier build and
// reused for a chunk whose last query block has g.rows_last rows.
void vs_gaps(const HeadInfo* heads, int32_t* lines, int32_t* gap_count, const Geom& g, cudaStream_t s);
// BS: one wave of rows [b0, b1) x BS slots [s0, s1): top-k of each row's scores in scratch.
// Block-sparse scores are written per row (query block) with each row padded to a multiple of
// kBsRowPad, and per group of kBsGroup consecutive key blocks their maximum (gmax, at the row's
// offset / kBsGroup): the select's filter (minference_select.cu). Rows padded to 32 floats put
// every row's scores at a 128-byte and its maxima at a 16-byte boundary, so the select stages
// them with 16-byte loads (and may read, never use, the padding).
inline constexpr int kBsGroup = 8;
inline constexpr int kBsRowPad = 32;
static_assert(kBsRowPad % (4 * kBsGroup) == 0, "a padded row's maxima fill whole float4s");
struct BsSelectArgs {
  const HeadInfo* heads = nullptr;
  const int32_t* bs_heads = nullptr;  // [n_bs] query head of each BS slot
  const int64_t* cand_off = nullptr;  // [n_qblk + 1] row offsets in scratch (rows padded to kBsRowPad)
  const float* scratch = nullptr;     // [s1 - s0, span]
  const float* gmax = nullptr;        // [s1 - s0, span / kBsGroup]
  int64_t span = 0;                   // cand_off[b1] - cand_off[b0]
  int32_t* sel = nullptr;             // BS selection buffer
  Geom g;
  int64_t b0 = 0, b1 = 0;
  int s0 = 0, s1 = 0;
  bool rows_in_global = false;        // test hook: select from scratch even when a row fits smem
};
void bs_select_wave(const BsSelectArgs& a, cudaStream_t s);

// Block-sparse scores (minference_block_sparse.cu).
// Pooling: pk [n_kv_head, nkb, D] fp32 (the CPU's pooled keys) for the KV heads in kv_mask (bit
// hk; all when n_kv_head > 64), kmax [n_kv_head] the largest |pk| per head (int bits), then the
// fp16 split khi/klo [n_kv_head, nkb, D]; query-block sums of the BS heads as fp16 split qhi/qlo
// [n_bs, n_qblk, D] (each row scaled by its own power of two).
struct BsPooled {
  float* pk = nullptr;
  int32_t* kmax = nullptr;
  __half* khi = nullptr;
  __half* klo = nullptr;
  __half* qhi = nullptr;
  __half* qlo = nullptr;
};
void bs_pool(const __nv_bfloat16* q, const __nv_bfloat16* k, const int32_t* bs_heads, int n_bs, uint64_t kv_mask,
             const BsPooled& out, const Geom& g, cudaStream_t s);
// e with max_abs * 2^e in [2^14, 2^15) (0 for 0 or non-finite): fp16 hi/lo splits keep ~22 bits.
__device__ __forceinline__ int fp16_exponent(float max_abs) {
  if (!(max_abs > 0.f) || !isfinite(max_abs)) return 0;
  int e2 = 0;
  frexpf(max_abs, &e2);  // max_abs = f * 2^e2, f in [0.5, 1)
  return 15 - e2;
}
struct BsScoreArgs {
  const __half* khi = nullptr;
  const __half* klo = nullptr;
  const __half* qhi = nullptr;
  const __half* qlo = nullptr;
  const int32_t* bs_heads = nullptr;
  const int64_t* cand_off = nullptr;
  float* scratch = nullptr;
  float* gmax = nullptr;
  int64_t span = 0;
  Geom g;
  int64_t b0 = 0, b1 = 0;
  int s0 = 0, s1 = 0;
};
void bs_scores_wave(const BsScoreArgs& a, cudaStream_t s);

// CSR (minference_csr.cu): per (head, block) counts, then ranges/columns at range_ptr/col_ptr.
struct CsrArgs {
  const HeadInfo* heads = nullptr;
  const int32_t* lines = nullptr;
  const int32_t* gap_count = nullptr;
  const int32_t* bs_sel = nullptr;
  int64_t* rcount = nullptr;  // [n_rows + 1] (count pass)
  int64_t* ccount = nullptr;
  const int64_t* range_ptr = nullptr;  // fill pass
  const int64_t* col_ptr = nullptr;
  int32_t* ranges = nullptr;
  int32_t* cols = nullptr;
  Geom g;
};
void csr_count(const CsrArgs& a, cudaStream_t s);
void csr_fill(const CsrArgs& a, cudaStream_t s);

}  // namespace longctx::cuda::mindex

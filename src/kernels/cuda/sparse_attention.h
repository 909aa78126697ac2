// sparse_attention.h (cuda): block/vertical-slash sparse attention on Hopper (the GPU twin of
// sparse/sparse_attention.h), bf16 in/out, fp32 accumulation, with LSE.
//
// What: exact softmax attention of each query row over the keys its 64-row query block selects
// in a sparse index (key ranges + single key columns, union counted once), causal mask on top,
// and optionally a row-level sliding window (SparseAttnParams::window: Self-Extend's near part).
// It serves block-sparse (ranges of whole 64-key blocks), vertical-slash (merged slash ranges +
// gathered vertical columns, MInference Algorithm 5) and A-shape (two ranges) alike.
// Index format: the CPU format of sparse/sparse_index.h (docs/minference.md), flattened to CSR
// over (index head, query block): block row r = ih * n_qblk + b owns
//   ranges[range_ptr[r] .. range_ptr[r+1])  as int32 pairs (start, end), sorted by start,
//   cols  [col_ptr[r]   .. col_ptr[r+1])    int32, sorted ascending;
// ranges may overlap or touch, an end past n_kv is clipped, columns may repeat or lie inside a
// range (everything counted once). Query head h uses index head h / (n_head / n_index_head).
// Rows with no attended key get O = 0, LSE = -inf.
// Layout of q/k/v/o/lse: kernels/cuda/attention.h (token-major, GQA without repeating K/V).
// How: sparse_attention_sm90.cu. A plan kernel normalises each block's lists (merged disjoint
// ranges clipped to the causal frontier; unique columns outside the ranges) into the caller's
// workspace; the main kernel (warp-specialised, wgmma + TMA) then streams each block's key
// tiles of 64: range tiles by TMA bulk tensor copies, column tiles by cp.async row gathers, one
// online softmax over both. A row window (Self-Extend's near part) is a kernel variant that masks
// each row's keys <= its position - window in the tiles straddling that line.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention.h"  // KvDtype
#include "kernels/cuda/runtime.h"

namespace longctx::cuda {

// Rows per query block (= sparse/sparse_index.h kSparseBlockQ, MInference's B = 64).
inline constexpr int kSparseQBlock = 64;

// Tail packing in the Hopper kernel (bench/bench_sparse.cu models it when counting visited
// tiles): a range's last keys, when at most kSparsePackMax of them remain after its whole
// 64-key tiles, are loaded as kSparsePackSeg-key segments, and one 64-key tile carries the
// segments of several ranges, instead of one mostly masked tile per range.
inline constexpr int kSparsePackSeg = 16;
inline constexpr int kSparsePackMax = 48;
// Tail gathering: a tail of at most this many keys is gathered key by key into the 64-key tiles
// that carry the columns (with the other short tails), not loaded as a 16-key segment. HiP's
// blocks of b_k = 2 keys as segments fill 1/8 of each tile: H100/H200 benchmarks in
// docs/benchmarks.md ("HiP sparse attention: gathered tails"). Half a segment: a gathered key
// moves 1/16 of a segment's bytes and no masked slots.
inline constexpr int kSparseGatherMax = 8;

struct DeviceSparseIndex {
  int n_index_head = 0;              // index heads; n_head % n_index_head == 0
  int64_t n_qblk = 0;                // query blocks per index head = ceil(n_q / 64)
  const int64_t* range_ptr = nullptr;  // device [n_index_head * n_qblk + 1]
  const int32_t* ranges = nullptr;     // device [2 * range_ptr[last]] (start, end) pairs
  const int64_t* col_ptr = nullptr;    // device [n_index_head * n_qblk + 1]
  const int32_t* cols = nullptr;       // device [col_ptr[last]]
  int64_t n_ranges = 0;              // range_ptr[last] (host copy: sizes the workspace)
  int64_t n_cols = 0;                // col_ptr[last]
};

struct SparseAttnParams {
  const void* q = nullptr;  // bf16 [n_q, n_head, head_dim]
  const void* k = nullptr;  // kv_dtype [n_kv, n_kv_head, head_dim]
  const void* v = nullptr;  // kv_dtype [n_kv, n_kv_head, head_dim]
  // fp8 K/V tiles: with fp8_e4m3, k and v hold e4m3 codes in the same layout (one byte an
  // element), read straight from the fp8 KV cache (gpu/kv_fp8.h: real value = code * k_scale for
  // K, code * v_scale for V, one scale each per layer). The result is attention over the
  // dequantized K/V (tests: the fp64 oracle on the dequantized K/V with the same mask); the
  // bytes a key tile moves halve. A kernel without the fp8 path refuses it with an Error.
  KvDtype kv_dtype = KvDtype::bf16;
  float k_scale = 1.f, v_scale = 1.f;  // fp8_e4m3 only; finite, > 0
  void* o = nullptr;        // bf16 [n_q, n_head, head_dim]
  float* lse = nullptr;     // fp32 [n_head, n_q], optional
  int64_t n_q = 0;
  int64_t n_kv = 0;
  int n_head = 0;
  int n_kv_head = 0;
  int head_dim = 128;       // 128 or 256 (Hopper kernel), 64 (generic kernel, via sparse_attention())
  // Query i sits at position q_pos0 + i (the causal mask's position: row i sees keys <=
  // q_pos0 + i). Negative values (causal only) move the rows' mask back past the first key, so
  // rows with q_pos0 + i < 0 see no key (O = 0, LSE = -inf): Self-Extend's far part passes its
  // rows' positions minus W (row q sees keys <= q - W). Both kernels: the plan clips each block
  // to its causal frontier, and the kernels' masks compare signed positions.
  int64_t q_pos0 = 0;
  float scale = 0.f;        // 0 = 1/sqrt(head_dim)
  bool causal = true;
  // Row-level sliding window (0 = none): row i sees only keys > q_pos0 + i - window, on top of its
  // index and the causal mask (the CPU reference's AttnParams::window, sparse/sparse_attention.h;
  // Self-Extend's near part). Needs causal and bf16 K/V. The plan clips each block's lists to keys
  // > its first row's position - window; both kernels mask per row in a kernel variant (so calls
  // without a window keep their code): the generic kernel every tile, the Hopper kernel the tiles
  // whose lowest key can fall outside the block's last row's window. The Hopper kernel takes a
  // window with its 3-stage ring only (sm90_stages 0 or 3).
  int64_t window = 0;
  DeviceSparseIndex index;
  void* workspace = nullptr;  // device, sparse_attention_workspace_bytes(index) bytes
  size_t workspace_bytes = 0;
  // Hopper kernel: range tails of at most this many keys are gathered (0 = 16-key segments
  // only; benchmarks compare the two). 0..kSparsePackMax. The generic kernel ignores it.
  int tail_gather_max = kSparseGatherMax;
  // Hopper kernel: depth of each consumer warpgroup's K/V ring (0 = the default: 3; at head_dim
  // 256 also 2, which benchmarks compare). The generic kernel ignores it.
  int sm90_stages = 0;
};

size_t sparse_attention_workspace_bytes(const DeviceSparseIndex& index);
// Runs the plan kernel and the sparse kernel on stream s (asynchronous): the Hopper kernel for
// head_dim 128 or 256 on sm_90 (with or without a row window), else the generic mma.sync kernel
// (sparse_attention_generic.h: head_dim 64, 128 or 256, sm_80+; same workspace). Throws Error naming the problem on unsupported shapes or
// inconsistent index sizes.
void sparse_attention(const SparseAttnParams& p, Stream s = nullptr);
// The Hopper kernel's two halves, for benchmarks: plan once, attend many times (the plan
// depends only on the index and the shape). head_dim 128 or 256 on sm_90 only; a window too.
void sparse_attention_plan(const SparseAttnParams& p, Stream s = nullptr);
void sparse_attention_run(const SparseAttnParams& p, Stream s = nullptr);

}  // namespace longctx::cuda

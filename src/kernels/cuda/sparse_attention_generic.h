// sparse_attention_generic.h (cuda): MInference sparse prefill attention for head_dim 64, 128 and
// 256 on any sm_80+ GPU (mma.sync), the portable twin of the Hopper kernel of sparse_attention.h.
//
// What: exactly the semantics of sparse_attention.h (same SparseAttnParams / DeviceSparseIndex):
// per (index head, 64-row query block) the union of its key ranges (sorted by start; may overlap
// or touch; ends past n_kv clipped) and single columns (sorted; may repeat or lie inside a
// range), each key counted once, causal mask on top (query i at position q_pos0 + i sees keys
// <= q_pos0 + i; q_pos0 may be negative), the row-level window when p.window > 0 (row i also
// drops keys <= q_pos0 + i - window; bf16 K/V), GQA via n_head / n_kv_head, query head h uses index head
// h / (n_head / n_index_head). Rows with no attended key get O = 0, LSE = -inf.
// bf16 q/k/v/o, fp32 accumulation, LSE (natural log of the scaled scores) optional. fp8 K/V tiles
// (p.kv_dtype fp8_e4m3: k/v hold the fp8 cache's e4m3 codes, p.k_scale / p.v_scale): attention
// over the dequantized K/V; the codes are widened to bf16 in shared memory (exact), so the
// result equals the bf16 path's on those dequantized values.
// head_dim 64, 128 or 256; p.scale 0 = 1/sqrt(head_dim); q/k/v/o 16-byte aligned.
//
// How (sparse_attention_generic.cu): a plan kernel (one warp per index row) writes each block's
// canonical lists (merged disjoint ranges clipped to the block's causal frontier; unique columns
// outside them) into p.workspace; the attention kernel, FlashAttention-2 style (CTA = (query
// head, 64-row block), 4 warps x 16 rows, mma.sync m16n8k16, cp.async double buffering, online
// softmax in the log2 domain), streams 64-key tiles: range tiles from any start key, then column
// tiles gathered 64 columns at a time, one softmax over both. No per-block size limits.
// fp8: each tile's e4m3 rows are cp.async'ed into byte tiles and widened into the bf16 tiles;
// k_scale rides on the softmax scale, v_scale on O.
//
// Workspace: sparse_attention_generic_workspace_bytes(index) bytes = 8 B per range + 4 B per
// column + 8 B per index row, each part rounded up to 256 B: the first part of the Hopper
// kernel's layout, so today sparse_attention_workspace_bytes(index) is never smaller and a
// workspace sized for the Hopper kernel serves this one (a test checks that). Checked on every
// call (an Error names both sizes).
#pragma once
#include <cstddef>

#include "kernels/cuda/sparse_attention.h"

namespace longctx::cuda {

size_t sparse_attention_generic_workspace_bytes(const DeviceSparseIndex& index);

// Plan + attention on stream s (asynchronous). Throws Error naming the problem on unsupported
// shapes (head_dim not 64/128/256, GPU below sm_80, inconsistent index sizes, small workspace,
// fp8 scales not finite and > 0).
void sparse_attention_generic(const SparseAttnParams& p, Stream s = nullptr);

// The two halves, for benchmarks: the plan depends only on the index and the shape
// (n_q, n_kv, q_pos0, causal), so one plan serves many attention runs.
void sparse_attention_generic_plan(const SparseAttnParams& p, Stream s = nullptr);
void sparse_attention_generic_run(const SparseAttnParams& p, Stream s = nullptr);

}  // namespace longctx::cuda

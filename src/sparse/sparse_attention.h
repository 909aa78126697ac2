// sparse_attention.h: the shared sparse attention mainloop (CPU reference), and the twin the
// CUDA kernel must match.
//
// What: exact softmax attention of each query row over the keys its query block selects in a
// SparseIndex (ranges + columns, union counted once), with the causal mask applied on top (and,
// when p.window > 0, the sliding window: row at q sees keys (q - window, q], used by Self-Extend's
// neighbour part; on the GPU SparseAttnParams::window, run by the generic kernel: the Hopper
// kernel has no window and cuda::sparse_attention routes windowed calls away from it).
// Returns O and, optionally, the natural-log LSE of the scaled scores of the attended keys, so
// that partial results over disjoint key sets merge exactly (merge_states.h).
// Why: every sparse method (A-shape, MInference VS/BS, ...) differs only in its index builder.
// How: one task per (query head, query block of 64). The block's keys are normalised
// (block_union), then visited as key tiles of at most kSparseKeyTile keys: contiguous tiles read
// K/V in place (a range), gathered tiles copy up to kSparseKeyTile columns. Each tile is two
// GEMMs (S = Q K^T, O += P V) with a FlashAttention-style online softmax in between; all
// accumulation (running max m, denominator l, output O) is fp32.
// Layout and semantics of p: kernels/params/attention.h (q [n_q, n_head, d], k/v [n_kv,
// n_kv_head, d], o [n_q, n_head, d], lse [n_head, n_q]); GQA reads KV head h / (n_head /
// n_kv_head) in place, K/V are never repeated. Rows with no attended key get O = 0, LSE = -inf.
#pragma once
#include "kernels/params/attention.h"
#include "sparse/sparse_index.h"

namespace longctx {

class ThreadPool;

// Keys per tile: 256 keys x head_dim 128 x 4 B = 128 KiB of K per tile, which keeps the score
// tile (64 x 256 floats = 64 KiB) and the K/V tile in L2 on a typical core.
inline constexpr int kSparseKeyTile = 256;

// Validates idx against p (validate_sparse_index) and computes p.o (and p.lse if set).
void sparse_attention_ref(const AttnParams& p, const SparseIndex& idx, ThreadPool& pool);

}  // namespace longctx

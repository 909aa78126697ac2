// block_sparse_index.h: MInference block-sparse index (paper Algorithm 3).
//
// What: for one query head, mean-pool Q over each 64-row query block of the chunk and K over
// each absolute 64-key block [64c, 64c + 64); score every (query block, key block) pair by the
// pooled dot product; keep the top-k_b key blocks per query block among the block-causal ones
// (64c <= the block's last position), always keeping the "diagonal" key blocks (those that
// intersect the query block's own positions: 1, or 2 when a chunk starts off a 64 boundary).
// Why: attention is spatially clustered (paper Fig. 4b); pooled Q K^T approximates the
// block-averaged attention at 1/4096 of the cost.
// How: pool_keys() once per KV head, then build_block_sparse_index() per query head; selected
// blocks become ranges [64c, min(64c + 64, n_keys)), adjacent ones merged.
// Divergences from the reference, on purpose: the diagonal block is forced (the reference allows
// but does not force it; forcing guarantees no empty rows); a partial last block is averaged over
// its real rows (the reference zero-pads and divides by 64); the score is scaled by p.scale
// (monotone per row, so the same ranking as the reference's unscaled scores).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/params/attention.h"
#include "sparse/sparse_index.h"

namespace longctx {

// Key blocks kept per query block in the reference (block_sparse_attention topk = 100).
inline constexpr int64_t kBlockSparseDefaultTopK = 100;

// Mean of K over each 64-key block of KV head hk, for keys 0 .. q_pos0 + n_q - 1 (the keys the
// chunk can see). out: [n_kblk, head_dim].
void pool_keys(const AttnParams& p, int hk, std::vector<float>& out);

// Appends n_query_blocks(p.n_q) blocks for query head h; pooled_k from pool_keys(p, h / group).
// = score_key_blocks + select_key_blocks.
void build_block_sparse_index(const AttnParams& p, int h, int64_t k_b, const std::vector<float>& pooled_k,
                              HeadIndex& out);

// The two halves, for callers that try several budgets on one head (the pattern search's FLOPs
// matching): the pooled scores do not depend on k_b, so they are made once.
struct BlockScores {
  std::vector<int64_t> row_ptr;   // [n_qblk + 1] offsets into score
  std::vector<float> score;       // per query block: its block-causal key blocks' scores (+inf: diagonal)
  std::vector<int64_t> n_forced;  // [n_qblk] diagonal blocks of each query block (always kept)
  int64_t n_keys = 0;             // keys the chunk sees (the last range's end is clipped to it)
};
void score_key_blocks(const AttnParams& p, int h, const std::vector<float>& pooled_k, BlockScores& out);
// Appends one block per query block: the top max(k_b, n_forced) key blocks, adjacent ones merged.
void select_key_blocks(const BlockScores& s, int64_t k_b, HeadIndex& out);

}  // namespace longctx

// ihip_mask.h: InfiniteHiP's multi-stage context pruning (the paper's Algorithm 1) for one query
// block, and the key set it gives (sinks + last stage's survivors + streaming window).
//
// What, for a block of query rows whose last row sits at absolute position q_last:
//   stage-0 candidates  [n_sink, cand_end), cand_end = max(n_sink, q_last - n_stream + 1)
//   stage i (0-based)   ihip_prune_stage(stages[i], queries of the block, output of stage i-1)
//                       (the last stage keeps hp.last_k(layer) tokens)
//   key set             [0, min(n_sink, q_last + 1)) + last stage's output + [win_begin, q_last]
//                       with win_begin = cand_end (block-aligned: the window meets the candidate
//                       range exactly, so no key of the past falls between them; rows before the
//                       block's last see the window under the causal mask)
// Every stage shares one b_q (64): the paper's child-block mapping m' is then the identity.
// One key set per block is shared by every head (the chunk score pools over all heads).
// rank=local: each stage that prunes first computes the block's offsets (ihip_local_offsets over
// the rows' sinks and window [ihip_candidate_end(q_last), pos]) from the stage's packed queries.
// Decode caches the stage outputs per layer (infinitehip_method.h).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/params/attention.h"
#include "kernels/ref/ihip_prune.h"
#include "methods/infinitehip/ihip_params.h"
#include "methods/method.h"
#include "sparse/sparse_index.h"

namespace longctx {

// The keys one block attends: [0, sink_end), selected (sorted, inside [n_sink, win_begin)),
// [win_begin, end).
struct IhipKeySet {
  int64_t sink_end = 0;
  std::vector<int32_t> selected;
  int64_t win_begin = 0, end = 0;
  std::vector<int32_t> keys() const;  // the whole set, sorted
};

inline int64_t ihip_candidate_end(const IhipParams& hp, int64_t q_last) {
  return std::max(hp.n_sink, q_last - hp.n_stream + 1);
}

// The route's threshold: a step whose last row has at most this many candidates prunes nothing
// (it keeps every stage's k, the last one's for `layer` included) and runs dense.
int64_t ihip_min_k(const IhipParams& hp, int layer);

// The stage of `layer` at index i (the last stage keeps hp.last_k(layer) tokens).
IhipStage ihip_stage(const IhipParams& hp, int layer, int i);

// Positions the pruning RoPE of a step over n_kv keys may ask for (table size).
int64_t ihip_rope_positions(const IhipParams& hp, int64_t n_kv);

// One block's pruning. p: the step's q [n_q, n_head, d] and k [n_kv, n_kv_head, d] (un-rotated
// when hp.rope, else rotated); rows [row0, row0 + rows) of the chunk; table: the layer's cos/sin
// (hp.rope only).
struct IhipBlockPrune {
  const IhipParams& hp;
  const AttnParams& p;
  const IhipRopeTable* table = nullptr;
  int64_t row0 = 0, rows = 0;
};

// Runs stages [first, N): outs[i] = stage i's output (resized to N); stage first reads
// outs[first - 1], or the stage-0 range when first == 0.
void ihip_prune_block(const IhipBlockPrune& b, int first, std::vector<std::vector<int32_t>>& outs);

// The key set of a block from its last stage's output (win_begin = ihip_candidate_end).
IhipKeySet ihip_key_set(const IhipParams& hp, int64_t q_last, std::vector<int32_t> selected);

// The shared sparse index (one index head) of a chunk's blocks, in block order.
SparseIndex ihip_sparse_index(std::span<const IhipKeySet> blocks, int64_t n_q);

}  // namespace longctx

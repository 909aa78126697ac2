// minference_index.h: one layer's MInference index: each query head's pattern -> its index.
//
// What: for a chunk of queries of one layer (p) and the layer's per-head patterns, builds a
// SparseIndex with one index head per query head: vertical-slash heads estimate their lines from
// the chunk's last 64 queries (vs_estimate.h) and convert them (vs_convert.h); block-sparse heads
// pool Q and K (block_sparse_index.h); A-shape heads get the static index (a_shape_index.h).
// Budgets larger than the prompt are clamped by the builders, as in the reference.
// Prompt-wide lines: with layer-major prefill the vertical-slash lines come once per prompt
// (estimate_prompt_lines) and every chunk converts them for its own query blocks.
// How: heads are independent; one pool task per query head (each builder is single-threaded).
#pragma once
#include <span>
#include <vector>

#include "kernels/params/attention.h"
#include "methods/minference/minference_config.h"
#include "sparse/sparse_index.h"
#include "methods/minference/vs_estimate.h"

namespace longctx {

class ThreadPool;

// ratio scales VS budgets (k_v, k_s) like the reference's minference_ratio (1 = as configured).
// prompt_lines (optional, one per query head): vertical-slash lines estimated once per prompt
// (estimate_prompt_lines); VS heads then convert those for this chunk instead of estimating
// from the chunk's own last queries.
SparseIndex build_minference_index(const AttnParams& p, std::span<const HeadPattern> heads, ThreadPool& pool,
                                   double ratio = 1.0, std::span<const VsLines> prompt_lines = {});

// Builds the index of one query head h into out (a fresh HeadIndex); lines: as prompt_lines[h].
void build_head_index(const AttnParams& p, int h, const HeadPattern& hp, HeadIndex& out, double ratio = 1.0,
                      const VsLines* lines = nullptr);

// The vertical-slash lines of every VS head (other heads: empty) from p = the prompt's last
// kLastQ queries against all of its keys: MInference's one estimate per prompt.
std::vector<VsLines> estimate_prompt_lines(const AttnParams& p, std::span<const HeadPattern> heads, ThreadPool& pool,
                                           double ratio = 1.0);

}  // namespace longctx

// minference_index.h: one layer's MInference index: each query head's pattern -> its index.
//
// What: for a chunk of queries of one layer (p) and the layer's per-head patterns, builds a
// SparseIndex with one index head per query head: vertical-slash heads estimate their lines from
// the chunk's last 64 queries (vs_estimate.h) and convert them (vs_convert.h); block-sparse heads
// pool Q and K (block_sparse_index.h); A-shape heads get the static index (a_shape_index.h).
// Budgets larger than the prompt are clamped by the builders, as in the reference.
// How: heads are independent; one pool task per query head (each builder is single-threaded).
#pragma once
#include <span>

#include "kernels/params/attention.h"
#include "sparse/minference_config.h"
#include "sparse/sparse_index.h"

namespace longctx {

class ThreadPool;

// ratio scales VS budgets (k_v, k_s) like the reference's minference_ratio (1 = as configured).
SparseIndex build_minference_index(const AttnParams& p, std::span<const HeadPattern> heads, ThreadPool& pool,
                                   double ratio = 1.0);

// Builds the index of one query head h into out (a fresh HeadIndex).
void build_head_index(const AttnParams& p, int h, const HeadPattern& hp, HeadIndex& out, double ratio = 1.0);

}  // namespace longctx

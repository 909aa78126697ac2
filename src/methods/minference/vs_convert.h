// vs_convert.h: MInference vertical-slash index conversion (paper Algorithm 4, corrected).
//
// What: turns the selected vertical columns and slash offsets of one head into the shared sparse
// index format: per query block, the key ranges the slashes cover (merged) plus the vertical
// columns those ranges do not already cover.
// Why: a slash o crosses query block [first, last] in the key range [first - o, last - o + 1): a
// contiguous run, so slashes become cheap contiguous tiles while verticals are gathered columns
// (the paper's "64x64 blocks + 1x64 columns" PIT kernel).
// How: per block, a point-range two-way merge, O(k_v + k_s): slashes in descending offset order
// give ranges with ascending starts, merged when they overlap or touch; verticals (ascending) are
// kept when causal for the block (col <= last) and outside every range. Unlike the reference
// (which rounds each range up to whole 64-wide tiles from its start), ranges here are exact; a
// GPU kernel may tile them as it likes. With offset 0 present (forced), every kept column is
// before the block's first row, so columns need no causal mask within the block.
#pragma once
#include <cstdint>

#include "sparse/sparse_index.h"
#include "methods/minference/vs_estimate.h"

namespace longctx {

// Appends n_query_blocks(n_q) blocks for a chunk of n_q queries at positions q_pos0.. against
// n_kv keys. lines.vertical must be ascending in [0, n_kv), lines.slash ascending and >= 0.
void convert_vs_index(const VsLines& lines, int64_t n_q, int64_t q_pos0, int64_t n_kv, HeadIndex& out);

}  // namespace longctx

// topk.h: deterministic top-k selection used by the index builders.
//
// What: the indices of the k largest scores, returned in ascending index order.
// Why: the builders (vertical/slash lines, key blocks) all select "top k by score"; a single
// definition with a fixed tie-break (larger score first, then smaller index) makes the CPU
// builders reproducible and gives the tests and the CUDA twin one rule to match.
// How: std::nth_element with that total order, then a sort of the chosen indices. +inf scores
// (forced entries) sort first; NaN scores are treated as -inf.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace longctx {

// k is clamped to [0, score.size()]. out is overwritten.
void top_k_indices(std::span<const float> score, int64_t k, std::vector<int32_t>& out);

}  // namespace longctx

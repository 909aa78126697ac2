// vs_estimate.h: MInference vertical-slash line estimation (Algorithm 2, first half).
//
// What: for one query head, the attention of the chunk's last kLastQ queries against every key
// they can see (causal, so only the trailing 64x64 square is masked), softmax per row in fp32;
// column sums give the vertical scores, sums along each diagonal give the slash scores. Then the
// top-k_v columns and top-k_s diagonal offsets, with the reference's forced lines.
// Why: vertical and slash lines are continuous, so the last queries reveal them for the whole
// matrix at the cost of a 64 x n_kv product.
// How: estimate_vs_scores() fills VsScores (one GEMM + row softmax + scatter-add); select_vs_lines()
// applies the forcing, clamps the budgets and takes top-k (topk.h tie-break).
// Conventions: slash offset o = q - k (o = 0 the main diagonal); a slash covers (q, q - o).
// Chunked prefill: "last queries" are the last queries of the current chunk (positions
// q_pos0 + n_q - 64 ..), against all cached keys 0 .. q_pos0 + n_q - 1.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/params/attention.h"

namespace longctx {

// Queries used to estimate the vertical-slash index (paper Algorithm 2, last_q = 64).
inline constexpr int kLastQ = 64;
// Columns always kept as verticals: attention sinks (reference: vertical[..., :30] = inf).
inline constexpr int64_t kForcedSinkColumns = 30;
// Diagonals always kept as slashes, offsets 0..99 (reference: slash[..., -100:] = inf). Keeping
// o = 0 also guarantees every row attends itself (no empty rows).
inline constexpr int64_t kForcedLocalDiagonals = 100;
// Budget floors of the reference: k_v = max(k_v, 30), k_s = max(k_s, 50), then min(., keys).
inline constexpr int64_t kMinVertical = 30;
inline constexpr int64_t kMinSlash = 50;

struct VsScores {
  int64_t n_keys = 0;          // keys visible to the chunk's last query (q_pos0 + n_q)
  std::vector<float> vertical; // [n_keys] column sums of the last queries' attention
  std::vector<float> slash;    // [n_keys] diagonal sums, index = offset o
};

struct VsLines {
  std::vector<int32_t> vertical;  // key columns, ascending
  std::vector<int32_t> slash;     // diagonal offsets o = q - k, ascending
};

// Scores of query head h for the chunk described by p (causal, q_pos0 + n_q <= n_kv).
void estimate_vs_scores(const AttnParams& p, int h, VsScores& out);

// Top-k lines with the forced sinks/local diagonals; budgets clamped as the reference does.
void select_vs_lines(const VsScores& s, int64_t k_v, int64_t k_s, VsLines& out);

}  // namespace longctx

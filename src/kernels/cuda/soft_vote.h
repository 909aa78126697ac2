// soft_vote.h (cuda): TokenSelect's head soft vote and its top-k on the device.
//
// What: vote[j] = sum_h softmax_j(scores[h][.])[j] over scores fp32 or fp16 [n_head, M] (paper Eq. 10;
// naive: the plain sum over heads), then the indices of the k largest votes (ties: smaller index
// first), ascending, plus an offset (candidate index -> position). CPU twins:
// kernels/ref/soft_vote.h and sparse/topk.h's rule; tested by tests/cuda/test_tokenselect.cpp.
// How: per (head, slice) max and sum of exp (online), folded per head into (max, 1 / Z) by one
// CTA per head, then per token the heads' normalised terms summed. With head_stats (paged_dot's
// fused per-CTA max / sum, paged_dot.h) the first pass over the scores is skipped: the fold takes
// those parts, and the 32 x M scores are read once.
// Top-k: a stable descending radix sort of (vote, index) pairs (CUB, part of the CUDA toolkit),
// whose first k indices are the top-k with the tie rule above, then an ascending sort of those
// k. TokenSelect's engine uses kernels/cuda/topk_select.h instead (a radix select with the item
// count in device memory: graph-replayable, 2.5x faster at M = 128K); this one stays as its
// baseline in bench/bench_tokenselect.cu. The soft vote's skip and m_dev: tokenselect_gpu.h.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/paged_dot.h"
#include "kernels/cuda/runtime.h"

namespace longctx::cuda {

struct SoftVoteParams {
  const void* scores = nullptr;   // score_elem [n_head, M] (paged_dot's output)
  float* vote = nullptr;          // fp32 [M]
  int n_head = 0;
  int64_t M = 0;
  bool naive = false;             // sum of raw scores instead of the soft vote
  void* workspace = nullptr;      // soft_vote_workspace_bytes(n_head)
  const int32_t* skip = nullptr;  // device int32 [1] or nullptr: nonzero returns at once (a cache hit)
  const int32_t* m_dev = nullptr; // device int32 [1] or nullptr: M = clamp(*m_dev - m_sub, 0, M), read
  int32_t m_sub = 0;              // on the device (M is then the launch bound; graph replay)
  const float* head_stats = nullptr;  // fp32 [n_head, stats_parts, 2] (max, sum exp) from paged_dot, or
  int stats_parts = 0;                // nullptr (the scores' own pass); soft vote only
  ScoreElem score_elem = ScoreElem::f32;  // fp16: exp and sums still in fp32
};
size_t soft_vote_workspace_bytes(int n_head);
void soft_vote(const SoftVoteParams& p, Stream s = nullptr);

struct TopKParams {
  const float* vote = nullptr;  // [M]
  int64_t M = 0;
  int64_t k = 0;                // clamped to M
  int32_t offset = 0;           // added to every chosen index
  int32_t* out = nullptr;       // [min(k, M)] ascending
  void* workspace = nullptr;    // top_k_workspace_bytes(max M, k)
  size_t workspace_bytes = 0;
};
size_t top_k_workspace_bytes(int64_t max_M, int64_t k);
void top_k_sorted(const TopKParams& p, Stream s = nullptr);

}  // namespace longctx::cuda

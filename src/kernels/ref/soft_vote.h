// soft_vote.h (ref): TokenSelect's head votes over per-head token scores.
//
// What: given raw per-head scores [n_head, M] (paged_dot.h), one vote per token [M]:
//   soft  (paper Eq. 10, the method): vote[j] = sum_h softmax_j(scores[h][.])[j]
//   naive (Eq. 8, ablation):          vote[j] = sum_h scores[h][j]
// (The hard vote of Eq. 9 needs a per-head top-k: methods/tokenselect/tokenselect_select.h.)
// Why: heads have very different logit scales; a per-head softmax makes every head's vote sum to
// 1, so no head dominates the selection.
// How: fp32, per head a max then a sum of exp (double accumulation of the sum), then the
// normalised terms added into vote in head order. The CUDA twin is kernels/cuda/soft_vote.h.
#pragma once
#include <cstdint>

namespace longctx {

class ThreadPool;

enum class VoteMode { soft, hard, naive };

// vote [M] = sum over heads of the per-head softmax of scores [n_head, M] over its M entries.
void soft_vote_ref(const float* scores, int n_head, int64_t M, float* vote, ThreadPool& pool);
// vote [M] = sum over heads of scores [n_head, M].
void naive_vote_ref(const float* scores, int n_head, int64_t M, float* vote, ThreadPool& pool);

}  // namespace longctx

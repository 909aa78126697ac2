// tokenselect_select.h: TokenSelect's selection function and token budget (CPU reference).
//
// What (paper 2411.02886 v1, Sec. 3; digest: shared/notes/tokenselect.md Sec. 3.1-3.2):
//   - budget: a step over n_kv keys attends the first n_init keys, the k selected candidates and
//     the n_local most recent keys, in temporal order; when n_kv <= n_init + k + n_local it
//     attends every key (exact dense attention);
//   - candidates: positions [n_init, n_kv - n_local), scored per query head by raw q.k (no
//     1/sqrt(d), kernels/ref/paged_dot.h), combined over heads by a vote (kernels/ref/soft_vote.h:
//     soft = the method; hard and naive = the paper's Table 4 ablation), top-k (sparse/topk.h:
//     larger vote first, then smaller position), sorted. One selection per layer and step,
//     shared by every head.
// Why: token-level, query-aware selection with head-independent votes (paper Obs. 1-2).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/ref/soft_vote.h"
#include "methods/method.h"

namespace longctx {

class ThreadPool;

// The paper's defaults: 128 initial + 2K selected + 512 local tokens ("2K+512", 2688 in all);
// prefill selects once per chunk of 512 queries; decode reuses the last selection while the
// query's cosine to the query that made it stays >= theta (0.9: the authors' code; > 1 disables
// the cache).
struct TokenSelectParams {
  int64_t n_init = 128;
  int64_t k = 2048;
  int64_t n_local = 512;
  int64_t chunk = 512;
  double theta = 0.9;
  VoteMode vote = VoteMode::soft;
  KeyLayout keys = KeyLayout::pre_rope;
  // scores=f16: the per-head scores rounded to fp16 before the vote (SelectInput::scores_f16; on
  // the GPU stored as fp16, half the scan's writes). Default f32.
  bool scores_f16 = false;

  int64_t budget() const { return n_init + k + n_local; }
};

// Indices into [0, M) of the min(k, M) tokens with the largest vote over scores [n_head, M],
// ascending. hard: each head votes 1 for its own top-k; the counts are the vote.
std::vector<int32_t> vote_top_k(const float* scores, int n_head, int64_t M, int64_t k, VoteMode mode,
                                ThreadPool& pool);

// One selection: the selection query q [n_head, head_dim] against the candidates of a layer's
// keys k [n_kv, n_kv_head, head_dim] (row = position); the chosen absolute positions, ascending.
// Needs n_kv > t.budget() (there are more than k candidates).
struct SelectInput {
  const float* q = nullptr;
  const float* k = nullptr;
  int64_t n_kv = 0;
  int n_head = 0, n_kv_head = 0, head_dim = 0;
  // Each score rounded to fp16 (nearest even, clamped to +-65504) before the vote: the CPU twin
  // of the GPU step's fp16 scores (TokenSelectGpuShape::scores, cuda::ScoreElem::f16).
  bool scores_f16 = false;
};
std::vector<int32_t> select_tokens(const TokenSelectParams& t, const SelectInput& in, ThreadPool& pool);

// The keys an fp8 e4m3 cache hands the scoring: x [n] quantized with one scale (amax / 448, the
// fp8 cache's rule, gpu/kv_fp8.h) and widened back, bit-identical to the GPU's conversion
// (kernels/ref/fp8_e4m3.h). The CPU twin of scoring e4m3 keys (kernels/cuda/paged_dot.h's fp8
// variant): select_tokens over these keys; measures fp8 scoring's selection (State::audit_fp8).
std::vector<float> fp8_roundtrip(const float* x, int64_t n);

// The attended keys of a step over n_kv keys: [0, n_init) ++ selected ++ [n_kv - n_local, n_kv),
// or [0, n_kv) when n_kv <= t.budget() (selected is then ignored).
std::vector<int32_t> budget_keys(const TokenSelectParams& t, int64_t n_kv, std::span<const int32_t> selected);

}  // namespace longctx

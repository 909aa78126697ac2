// tokenselect_select.cpp: see tokenselect_select.h.
#include "methods/tokenselect/tokenselect_select.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/ref/fp8_e4m3.h"
#include "kernels/ref/paged_dot.h"
#include "sparse/topk.h"
#include "util/error.h"
#include "util/half.h"

namespace longctx {

std::vector<int32_t> vote_top_k(const float* scores, int n_head, int64_t M, int64_t k, VoteMode mode,
                                ThreadPool& pool) {
  std::vector<float> vote(static_cast<size_t>(M), 0.f);
  std::vector<int32_t> top;
  switch (mode) {
    case VoteMode::soft: soft_vote_ref(scores, n_head, M, vote.data(), pool); break;
    case VoteMode::naive: naive_vote_ref(scores, n_head, M, vote.data(), pool); break;
    case VoteMode::hard:
      for (int h = 0; h < n_head; ++h) {
        top_k_indices({scores + int64_t(h) * M, size_t(M)}, k, top);
        for (int32_t j : top) vote[size_t(j)] += 1.f;
      }
      break;
  }
  top_k_indices(vote, k, top);
  return top;
}

std::vector<int32_t> select_tokens(const TokenSelectParams& t, const SelectInput& in, ThreadPool& pool) {
  const int64_t M = in.n_kv - t.n_init - t.n_local;  // candidates [n_init, n_kv - n_local)
  if (in.n_kv <= t.budget()) fail("internal: tokenselect selection over {} keys fits the budget", in.n_kv);
  std::vector<int32_t> slots(static_cast<size_t>(M));  // the contiguous CPU cache: slot = position
  std::iota(slots.begin(), slots.end(), int32_t(t.n_init));
  std::vector<float> scores(static_cast<size_t>(int64_t(in.n_head) * M));  // [n_head, M]
  paged_dot_ref({.q = in.q, .k = in.k, .slots = slots.data(), .scores = scores.data(), .n_slot = M,
                 .n_head = in.n_head, .n_kv_head = in.n_kv_head, .head_dim = in.head_dim},
                pool);
  if (in.scores_f16) {
    constexpr float kF16Max = 65504.f;  // the largest finite fp16
    for (float& x : scores) x = f16_to_f32(f32_to_f16(std::clamp(x, -kF16Max, kF16Max)));
  }
  std::vector<int32_t> top = vote_top_k(scores.data(), in.n_head, M, t.k, t.vote, pool);
  for (int32_t& j : top) j = slots[size_t(j)];
  return top;
}

std::vector<int32_t> budget_keys(const TokenSelectParams& t, int64_t n_kv, std::span<const int32_t> selected) {
  std::vector<int32_t> keys;
  if (n_kv <= t.budget()) {
    keys.resize(size_t(n_kv));
    std::iota(keys.begin(), keys.end(), 0);
    return keys;
  }
  keys.reserve(size_t(t.n_init + int64_t(selected.size()) + t.n_local));
  for (int64_t j = 0; j < t.n_init; ++j) keys.push_back(int32_t(j));
  keys.insert(keys.end(), selected.begin(), selected.end());
  for (int64_t j = n_kv - t.n_local; j < n_kv; ++j) keys.push_back(int32_t(j));
  return keys;
}

std::vector<float> fp8_roundtrip(const float* x, int64_t n) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = fp8_scale_for_amax(amax);
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = e4m3_to_f32(f32_to_e4m3(x[i] / scale)) * scale;
  return out;
}

}  // namespace longctx

// soft_vote.cpp: see soft_vote.h.
#include "kernels/ref/soft_vote.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "util/thread_pool.h"

namespace longctx {

namespace {
constexpr int64_t kTokensPerTask = 4096;  // tokens of vote one task sums over all heads

// Adds f(h, j) over heads into vote[j], split over token ranges.
template <class F>
void sum_heads(int n_head, int64_t M, float* vote, ThreadPool& pool, const F& f) {
  pool.parallel_for((M + kTokensPerTask - 1) / kTokensPerTask, [&](int64_t t0, int64_t t1) {
    const int64_t j0 = t0 * kTokensPerTask, j1 = std::min(M, t1 * kTokensPerTask);
    for (int64_t j = j0; j < j1; ++j) vote[j] = 0.f;
    for (int h = 0; h < n_head; ++h)
      for (int64_t j = j0; j < j1; ++j) vote[j] += f(h, j);
  });
}
}  // namespace

void soft_vote_ref(const float* scores, int n_head, int64_t M, float* vote, ThreadPool& pool) {
  if (M <= 0) return;
  std::vector<float> mx(static_cast<size_t>(n_head)), inv_z(static_cast<size_t>(n_head));  // per head: max, 1 / sum exp
  pool.parallel_for(n_head, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
      const float* s = scores + h * M;
      const float m = *std::max_element(s, s + M);
      double z = 0;
      for (int64_t j = 0; j < M; ++j) z += std::exp(double(s[j] - m));
      mx[size_t(h)] = m;
      inv_z[size_t(h)] = float(1.0 / z);
    }
  });
  sum_heads(n_head, M, vote, pool,
            [&](int h, int64_t j) { return std::exp(scores[h * M + j] - mx[size_t(h)]) * inv_z[size_t(h)]; });
}

void naive_vote_ref(const float* scores, int n_head, int64_t M, float* vote, ThreadPool& pool) {
  if (M <= 0) return;
  sum_heads(n_head, M, vote, pool, [&](int h, int64_t j) { return scores[h * M + j]; });
}

}  // namespace longctx

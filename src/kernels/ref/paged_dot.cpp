// paged_dot.cpp: see paged_dot.h.
#include "kernels/ref/paged_dot.h"

#include <algorithm>

#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {

namespace {
// Slots per task: enough work to amortise the task, few enough to split 128K candidates evenly.
constexpr int64_t kSlotsPerTask = 2048;
}  // namespace

void paged_dot_ref(const PagedDotParams& p, ThreadPool& pool) {
  if (p.n_head <= 0 || p.n_kv_head <= 0 || p.n_head % p.n_kv_head != 0 || p.head_dim <= 0)
    fail("paged_dot: bad heads {} / {} or head_dim {}", p.n_head, p.n_kv_head, p.head_dim);
  const int g = p.n_head / p.n_kv_head, D = p.head_dim;
  const int64_t row = int64_t(p.n_kv_head) * D;
  const int64_t n_task = (p.n_slot + kSlotsPerTask - 1) / kSlotsPerTask;
  pool.parallel_for(n_task, [&](int64_t t0, int64_t t1) {
    const int64_t j0 = t0 * kSlotsPerTask, j1 = std::min(p.n_slot, t1 * kSlotsPerTask);
    for (int64_t j = j0; j < j1; ++j) {
      const float* kr = p.k + int64_t(p.slots[j]) * row;
      for (int kvh = 0; kvh < p.n_kv_head; ++kvh) {
        const float* kk = kr + int64_t(kvh) * D;
        for (int h = kvh * g; h < (kvh + 1) * g; ++h) {  // the GQA group reuses the key row
          const float* qq = p.q + int64_t(h) * D;
          float acc = 0.f;
#pragma omp simd reduction(+ : acc)
          for (int d = 0; d < D; ++d) acc += qq[d] * kk[d];
          p.scores[int64_t(h) * p.n_slot + j] = acc;
        }
      }
    }
  });
}

}  // namespace longctx

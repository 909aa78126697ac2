// merge_states.cpp: see merge_states.h.
#include "sparse/merge_states.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {

void merge_attention_states(const MergeStatesParams& p, ThreadPool& pool) {
  if (!p.o_a || !p.lse_a || !p.o_b || !p.lse_b || !p.o)
    fail("merge_attention_states: null o/lse pointer");
  if (p.n_head <= 0 || p.head_dim <= 0) fail("merge_attention_states: bad shape ({} heads, dim {})", p.n_head, p.head_dim);
  const int d = p.head_dim;
  const int64_t ld = int64_t(p.n_head) * d;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  pool.parallel_for(p.n_q * p.n_head, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i = t / p.n_head;
      const int h = int(t % p.n_head);
      const int64_t li = int64_t(h) * p.n_q + i;
      const float la = p.lse_a[li], lb = p.lse_b[li];
      const float mx = std::max(la, lb);
      const float* oa = p.o_a + i * ld + int64_t(h) * d;
      const float* ob = p.o_b + i * ld + int64_t(h) * d;
      float* o = p.o + i * ld + int64_t(h) * d;
      if (mx == kNegInf) {  // neither side attended anything
        std::fill_n(o, d, 0.f);
        if (p.lse) p.lse[li] = kNegInf;
        continue;
      }
      const float wa = std::exp(la - mx), wb = std::exp(lb - mx);  // exp(-inf) = 0
      const float sum = wa + wb;
      const float ca = wa / sum, cb = wb / sum;
      for (int j = 0; j < d; ++j) o[j] = ca * oa[j] + cb * ob[j];
      if (p.lse) p.lse[li] = mx + std::log(sum);
    }
  });
}

}  // namespace longctx

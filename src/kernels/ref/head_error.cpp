// head_error.cpp (ref): see head_error.h.
#include "kernels/ref/head_error.h"

#include <cmath>

#include "util/error.h"

namespace longctx {

HeadErrorSums head_error_sums_ref(const HeadErrorRefParams& p) {
  if (p.n_rows < 0 || p.n_head <= 0 || p.head_dim <= 0)
    fail("head_error_sums: bad shape (rows {}, heads {}, head_dim {})", p.n_rows, p.n_head, p.head_dim);
  HeadErrorSums s;
  s.diff2.assign(size_t(p.n_head), 0.0);
  s.norm2.assign(size_t(p.n_head), 0.0);
  const int64_t ld = int64_t(p.n_head) * p.head_dim;
  for (int64_t i = 0; i < p.n_rows; ++i)
    for (int h = 0; h < p.n_head; ++h) {
      const float* a = p.a + i * ld + int64_t(h) * p.head_dim;
      const float* b = p.b + i * ld + int64_t(h) * p.head_dim;
      double d2 = 0, n2 = 0;
      for (int t = 0; t < p.head_dim; ++t) {
        const double d = double(a[t]) - double(b[t]);
        d2 += d * d;
        n2 += double(b[t]) * double(b[t]);
      }
      s.diff2[size_t(h)] += d2;
      s.norm2[size_t(h)] += n2;
    }
  return s;
}

double rel_l2_error(double diff2, double norm2) { return norm2 > 0 ? std::sqrt(diff2 / norm2) : std::sqrt(diff2); }

}  // namespace longctx

// attention.cpp (ref): see attention.h.
#include "kernels/ref/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {

namespace {

void check_params(const AttnParams& p) {
  if (!p.q || !p.k || !p.v || !p.o) fail("attention: null q/k/v/o pointer");
  if (p.n_head <= 0 || p.n_kv_head <= 0 || p.n_head % p.n_kv_head != 0)
    fail("attention: n_head {} must be a positive multiple of n_kv_head {}", p.n_head, p.n_kv_head);
  if (p.head_dim <= 0) fail("attention: head_dim {} must be positive", p.head_dim);
  if (p.causal && p.q_pos0 + p.n_q > p.n_kv)
    fail("attention: causal queries reach position {} but only {} keys are given",
         p.q_pos0 + p.n_q - 1, p.n_kv);
}

}  // namespace

void attention_dense_ref(const AttnParams& p, ThreadPool& pool) {
  check_params(p);
  if (p.n_q == 0) return;
  const int d = p.head_dim;
  const int group = p.n_head / p.n_kv_head;
  const int64_t ldq = int64_t(p.n_head) * d;    // Q/O row stride (one token)
  const int64_t ldk = int64_t(p.n_kv_head) * d; // K/V row stride
  const int64_t n_tiles = (p.n_q + kAttnQueryTile - 1) / kAttnQueryTile;

  // One task = (query head, query tile). Score buffer per task: [tile, n_keys].
  pool.parallel_for(int64_t(p.n_head) * n_tiles, [&](int64_t t0, int64_t t1) {
    std::vector<float> s;
    for (int64_t t = t0; t < t1; ++t) {
      const int h = int(t / n_tiles);
      const int hk = h / group;
      const int64_t i0 = (t % n_tiles) * kAttnQueryTile;
      const int64_t m = std::min<int64_t>(kAttnQueryTile, p.n_q - i0);
      // Keys visible to the last row of the tile (all keys when not causal).
      const int64_t n_keys = p.causal ? p.q_pos0 + i0 + m : p.n_kv;
      if (n_keys == 0) {  // no visible key: output zeros, lse -inf
        for (int64_t i = 0; i < m; ++i) {
          std::fill_n(p.o + (i0 + i) * ldq + int64_t(h) * d, d, 0.f);
          if (p.lse) p.lse[int64_t(h) * p.n_q + i0 + i] = -std::numeric_limits<float>::infinity();
        }
        continue;
      }
      s.resize(size_t(m * n_keys));
      const float* q = p.q + i0 * ldq + int64_t(h) * d;
      const float* k = p.k + int64_t(hk) * d;
      const float* v = p.v + int64_t(hk) * d;
      // S[m, n_keys] = scale * Q[m, d] K[n_keys, d]^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(n_keys), d, p.scale, q, int(ldq),
                  k, int(ldk), 0.f, s.data(), int(n_keys));
      for (int64_t i = 0; i < m; ++i) {
        float* row = s.data() + i * n_keys;
        const int64_t visible = p.causal ? p.q_pos0 + i0 + i + 1 : n_keys;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < visible; ++j) mx = std::max(mx, row[j]);
        double sum = 0;
        for (int64_t j = 0; j < visible; ++j) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        const float inv = float(1.0 / sum);
        for (int64_t j = 0; j < visible; ++j) row[j] *= inv;
        std::fill(row + visible, row + n_keys, 0.f);
        if (p.lse) p.lse[int64_t(h) * p.n_q + i0 + i] = mx + float(std::log(sum));
      }
      // O[m, d] = P[m, n_keys] V[n_keys, d]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), d, int(n_keys), 1.f, s.data(),
                  int(n_keys), v, int(ldk), 0.f, p.o + i0 * ldq + int64_t(h) * d, int(ldq));
    }
  });
}

}  // namespace longctx

// attention.cpp (ref): see attention.h.
//
// One task = (KV head, query tile). The `group` query heads that share the KV head are packed
// into one matrix Qp[m*group, d] (row = (query i, head g)), so K and V are read once per tile
// and the GEMMs are `group` times taller: S = scale * Qp K^T, row softmax, Op = P V, unpack.
#include "kernels/ref/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/ref/fast_exp.h"
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
    fail("attention: causal queries reach position {} but only {} keys are given", p.q_pos0 + p.n_q - 1,
         p.n_kv);
}

// Unnormalised softmax of one score row over its first `visible` entries, in place
// (row[j] = exp(s_j - max)); zeros the rest. Returns {max, sum}; the caller divides the
// output row by sum after P V, which saves a pass over the row.
std::pair<float, float> softmax_row(float* row, int64_t visible, int64_t n) {
  // `omp simd` (with -fopenmp-simd) lets the max/sum reductions vectorise without -ffast-math.
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < visible; ++j) mx = row[j] > mx ? row[j] : mx;
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < visible; ++j) {
    row[j] = fast_exp(row[j] - mx);
    sum += row[j];
  }
  std::fill(row + visible, row + n, 0.f);
  return {mx, sum};
}

}  // namespace

void attention_dense_ref(const AttnParams& p, ThreadPool& pool) {
  check_params(p);
  if (p.n_q == 0) return;
  const int d = p.head_dim;
  const int group = p.n_head / p.n_kv_head;
  const int64_t ldq = int64_t(p.n_head) * d;     // Q/O row stride (one token)
  const int64_t ldk = int64_t(p.n_kv_head) * d;  // K/V row stride
  const int64_t n_tiles = (p.n_q + kAttnQueryTile - 1) / kAttnQueryTile;

  pool.parallel_for(int64_t(p.n_kv_head) * n_tiles, [&](int64_t t0, int64_t t1) {
    // packed Q [rows, d], scores [rows, n_keys], packed O [rows, d], softmax sums [rows]
    std::vector<float> qp, s, op, sums;
    for (int64_t t = t0; t < t1; ++t) {
      const int hk = int(t / n_tiles);
      const int64_t i0 = (t % n_tiles) * kAttnQueryTile;
      const int64_t m = std::min<int64_t>(kAttnQueryTile, p.n_q - i0);
      const int64_t rows = m * group;
      // Keys visible to the last query of the tile (all keys when not causal).
      const int64_t n_keys = p.causal ? p.q_pos0 + i0 + m : p.n_kv;
      qp.resize(size_t(rows * d));
      op.resize(size_t(rows * d));
      s.resize(size_t(rows * std::max<int64_t>(n_keys, 1)));
      sums.assign(size_t(rows), 0.f);
      for (int64_t i = 0; i < m; ++i)  // heads hk*group .. +group are contiguous in a token row
        std::memcpy(qp.data() + i * group * d, p.q + (i0 + i) * ldq + int64_t(hk) * group * d,
                    size_t(group * d) * sizeof(float));
      if (n_keys > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(n_keys), d, p.scale, qp.data(), d,
                    p.k + int64_t(hk) * d, int(ldk), 0.f, s.data(), int(n_keys));
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = r / group;
        const int h = hk * group + int(r % group);
        const int64_t visible = p.causal ? p.q_pos0 + i0 + i + 1 : n_keys;
        float lse = -std::numeric_limits<float>::infinity();
        if (visible > 0) {
          const auto [mx, sum] = softmax_row(s.data() + r * n_keys, visible, n_keys);
          sums[size_t(r)] = sum;
          lse = mx + std::log(sum);
        }
        if (p.lse) p.lse[int64_t(h) * p.n_q + i0 + i] = lse;
      }
      if (n_keys > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), d, int(n_keys), 1.f, s.data(),
                    int(n_keys), p.v + int64_t(hk) * d, int(ldk), 0.f, op.data(), d);
      } else {
        std::fill(op.begin(), op.end(), 0.f);
      }
      for (int64_t r = 0; r < rows; ++r) {  // normalise: O row / softmax sum
        const float inv = sums[size_t(r)] > 0 ? 1.f / sums[size_t(r)] : 0.f;
        for (int c = 0; c < d; ++c) op[size_t(r * d + c)] *= inv;
      }
      for (int64_t i = 0; i < m; ++i)
        std::memcpy(p.o + (i0 + i) * ldq + int64_t(hk) * group * d, op.data() + i * group * d,
                    size_t(group * d) * sizeof(float));
    }
  });
}

}  // namespace longctx

// sparse_attention.cpp: see sparse_attention.h.
#include "sparse/sparse_attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void check_params(const AttnParams& p) {
  if (!p.q || !p.k || !p.v || !p.o) fail("sparse attention: null q/k/v/o pointer");
  if (p.n_head <= 0 || p.n_kv_head <= 0 || p.n_head % p.n_kv_head != 0)
    fail("sparse attention: n_head {} must be a positive multiple of n_kv_head {}", p.n_head, p.n_kv_head);
  if (p.head_dim <= 0) fail("sparse attention: head_dim {} must be positive", p.head_dim);
  if (p.window < 0 || (p.window > 0 && !p.causal))
    fail("sparse attention: sliding window {} needs causal attention and must be >= 0", p.window);
  if (p.causal && p.q_pos0 + p.n_q > p.n_kv)
    fail("sparse attention: causal queries reach position {} but only {} keys are given",
         p.q_pos0 + p.n_q - 1, p.n_kv);
}

// Per-task scratch, reused across the tasks a thread runs.
struct Scratch {
  BlockKeys keys;
  std::vector<float> s;        // [m, kSparseKeyTile] scores, then probabilities
  std::vector<float> kg, vg;   // [kSparseKeyTile, d] gathered K/V rows
  std::vector<int32_t> pos;    // [kSparseKeyTile] key positions of the current tile
  std::vector<float> acc;      // [m, d] unnormalised output
  std::vector<float> mx, l;    // [m] running max and denominator
};

// One key tile: n keys at positions pos[0..n), K/V rows at k/v with row stride ld.
// Updates the online-softmax state of the block's m rows (absolute positions qpos0 + r).
void tile_update(const AttnParams& p, const float* q, int64_t ldq, int m, int64_t qpos0, const float* k,
                 const float* v, int64_t ld, int n, const int32_t* pos, Scratch& w) {
  const int d = p.head_dim;
  float* s = w.s.data();
  // S[m, n] = scale * Q[m, d] K[n, d]^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, d, p.scale, q, int(ldq), k, int(ld), 0.f, s, n);
  for (int r = 0; r < m; ++r) {
    float* row = s + int64_t(r) * n;
    if (p.causal) {
      const int64_t qp = qpos0 + r;
      for (int c = 0; c < n; ++c)
        if (pos[c] > qp || (p.window > 0 && pos[c] <= qp - p.window)) row[c] = kNegInf;
    }
    float tmax = kNegInf;
    for (int c = 0; c < n; ++c) tmax = std::max(tmax, row[c]);
    const float m_new = std::max(w.mx[r], tmax);
    if (m_new == kNegInf) {  // nothing visible to this row yet: P row is zero
      std::fill_n(row, n, 0.f);
      continue;
    }
    const float alpha = std::exp(w.mx[r] - m_new);  // exp(-inf) = 0 on the first visible tile
    float sum = 0.f;
    for (int c = 0; c < n; ++c) {
      row[c] = std::exp(row[c] - m_new);
      sum += row[c];
    }
    w.l[r] = alpha * w.l[r] + sum;
    w.mx[r] = m_new;
    if (alpha != 1.f) {
      float* a = w.acc.data() + int64_t(r) * d;
      for (int j = 0; j < d; ++j) a[j] *= alpha;
    }
  }
  // ACC[m, d] += P[m, n] V[n, d]
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d, n, 1.f, s, n, v, int(ld), 1.f, w.acc.data(), d);
}

}  // namespace

void sparse_attention_ref(const AttnParams& p, const SparseIndex& idx, ThreadPool& pool) {
  check_params(p);
  validate_sparse_index(idx, p.n_q, p.n_kv, p.n_head);
  if (p.n_q == 0) return;
  const int d = p.head_dim;
  const int group = p.n_head / p.n_kv_head;             // query heads per KV head
  const int share = p.n_head / int(idx.heads.size());   // query heads per index head
  const int64_t ldq = int64_t(p.n_head) * d;            // Q/O row stride (one token)
  const int64_t ldk = int64_t(p.n_kv_head) * d;         // K/V row stride
  const int64_t nb = n_query_blocks(p.n_q);

  pool.parallel_for(int64_t(p.n_head) * nb, [&](int64_t t0, int64_t t1) {
    Scratch w;
    w.s.resize(size_t(kSparseBlockQ) * kSparseKeyTile);
    w.kg.resize(size_t(kSparseKeyTile) * d);
    w.vg.resize(size_t(kSparseKeyTile) * d);
    w.pos.resize(kSparseKeyTile);
    w.acc.resize(size_t(kSparseBlockQ) * d);
    w.mx.resize(kSparseBlockQ);
    w.l.resize(kSparseBlockQ);
    for (int64_t t = t0; t < t1; ++t) {
      const int h = int(t / nb);
      const int64_t b = t % nb;
      const int hk = h / group;
      const HeadIndex& hi = idx.heads[size_t(h / share)];
      const int64_t i0 = b * kSparseBlockQ;
      const int m = int(std::min<int64_t>(kSparseBlockQ, p.n_q - i0));
      const int64_t qpos0 = p.q_pos0 + i0;
      // Keys past the block's causal frontier are masked for every row: clip them away.
      const int64_t limit = p.causal ? std::min(p.n_kv, qpos0 + m) : p.n_kv;
      block_union(hi.block_ranges(b), hi.block_cols(b), limit, w.keys);

      const float* q = p.q + i0 * ldq + int64_t(h) * d;
      const float* kh = p.k + int64_t(hk) * d;
      const float* vh = p.v + int64_t(hk) * d;
      std::fill_n(w.acc.data(), size_t(m) * d, 0.f);
      std::fill_n(w.mx.data(), m, kNegInf);
      std::fill_n(w.l.data(), m, 0.f);

      // Contiguous tiles: K/V read in place.
      for (const auto& r : w.keys.ranges) {
        for (int32_t s0 = r.start; s0 < r.end; s0 += kSparseKeyTile) {
          const int n = std::min<int32_t>(kSparseKeyTile, r.end - s0);
          for (int c = 0; c < n; ++c) w.pos[size_t(c)] = s0 + c;
          tile_update(p, q, ldq, m, qpos0, kh + int64_t(s0) * ldk, vh + int64_t(s0) * ldk, ldk, n,
                      w.pos.data(), w);
        }
      }
      // Gathered tiles: up to kSparseKeyTile columns copied into contiguous [n, d] buffers.
      const auto& cols = w.keys.cols;
      for (size_t c0 = 0; c0 < cols.size(); c0 += kSparseKeyTile) {
        const int n = int(std::min<size_t>(kSparseKeyTile, cols.size() - c0));
        for (int c = 0; c < n; ++c) {
          const int32_t j = cols[c0 + size_t(c)];
          w.pos[size_t(c)] = j;
          std::copy_n(kh + int64_t(j) * ldk, d, w.kg.data() + int64_t(c) * d);
          std::copy_n(vh + int64_t(j) * ldk, d, w.vg.data() + int64_t(c) * d);
        }
        tile_update(p, q, ldq, m, qpos0, w.kg.data(), w.vg.data(), d, n, w.pos.data(), w);
      }

      // O = ACC / l, LSE = m + log(l); rows that saw no key: O = 0, LSE = -inf.
      for (int r = 0; r < m; ++r) {
        float* o = p.o + (i0 + r) * ldq + int64_t(h) * d;
        const float* a = w.acc.data() + int64_t(r) * d;
        const bool empty = w.l[size_t(r)] == 0.f;
        const float inv = empty ? 0.f : 1.f / w.l[size_t(r)];
        for (int j = 0; j < d; ++j) o[j] = a[j] * inv;
        if (p.lse)
          p.lse[int64_t(h) * p.n_q + i0 + r] = empty ? kNegInf : w.mx[size_t(r)] + std::log(w.l[size_t(r)]);
      }
    }
  });
}

}  // namespace longctx

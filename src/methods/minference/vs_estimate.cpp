// vs_estimate.cpp: see vs_estimate.h.
#include "methods/minference/vs_estimate.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "sparse/topk.h"
#include "util/error.h"

namespace longctx {

void estimate_vs_scores(const AttnParams& p, int h, VsScores& out) {
  if (!p.causal) fail("minference vertical-slash estimate needs causal attention");
  if (p.q_pos0 + p.n_q > p.n_kv)
    fail("minference vertical-slash estimate: queries reach position {} but only {} keys are given",
         p.q_pos0 + p.n_q - 1, p.n_kv);
  const int d = p.head_dim;
  const int hk = h / (p.n_head / p.n_kv_head);
  const int64_t ldq = int64_t(p.n_head) * d, ldk = int64_t(p.n_kv_head) * d;
  const int64_t n_keys = p.q_pos0 + p.n_q;
  const int64_t last = std::min<int64_t>(kLastQ, p.n_q);
  const int64_t r0 = p.n_q - last;  // first estimating row (chunk-relative)
  out.n_keys = n_keys;
  out.vertical.assign(size_t(n_keys), 0.f);
  out.slash.assign(size_t(n_keys), 0.f);
  if (last == 0) return;
  // A[last, n_keys] = scale * Q_last K^T   (q rows of head h, K rows of KV head hk)
  std::vector<float> a(size_t(last * n_keys));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(last), int(n_keys), d, p.scale,
              p.q + r0 * ldq + int64_t(h) * d, int(ldq), p.k + int64_t(hk) * d, int(ldk), 0.f, a.data(),
              int(n_keys));
  for (int64_t r = 0; r < last; ++r) {
    float* row = a.data() + r * n_keys;
    const int64_t qp = p.q_pos0 + r0 + r;  // absolute position; sees keys 0..qp
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j <= qp; ++j) mx = std::max(mx, row[j]);
    float sum = 0.f;
    for (int64_t j = 0; j <= qp; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += row[j];
    }
    const float inv = 1.f / sum;
    for (int64_t j = 0; j <= qp; ++j) {
      const float w = row[j] * inv;
      out.vertical[size_t(j)] += w;
      out.slash[size_t(qp - j)] += w;
    }
  }
}

void select_vs_lines(const VsScores& s, int64_t k_v, int64_t k_s, VsLines& out) {
  if (k_v < 0 || k_s < 0) fail("minference: negative vertical/slash budget ({}, {})", k_v, k_s);
  const int64_t n = s.n_keys;
  const int64_t kv = std::min(n, std::max(k_v, kMinVertical));
  const int64_t ks = std::min(n, std::max(k_s, kMinSlash));
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> v(s.vertical.begin(), s.vertical.end());
  std::vector<float> sl(s.slash.begin(), s.slash.end());
  std::fill_n(v.begin(), std::min(n, kForcedSinkColumns), kInf);
  std::fill_n(sl.begin(), std::min(n, kForcedLocalDiagonals), kInf);
  top_k_indices(v, kv, out.vertical);
  top_k_indices(sl, ks, out.slash);
}

}  // namespace longctx

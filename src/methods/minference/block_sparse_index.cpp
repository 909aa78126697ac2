// block_sparse_index.cpp: see block_sparse_index.h.
#include "methods/minference/block_sparse_index.h"

#include <algorithm>
#include <limits>
#include <span>

#include "sparse/topk.h"
#include "util/error.h"

namespace longctx {

void pool_keys(const AttnParams& p, int hk, std::vector<float>& out) {
  const int d = p.head_dim;
  const int64_t ldk = int64_t(p.n_kv_head) * d;
  const int64_t n_keys = std::min(p.n_kv, p.q_pos0 + p.n_q);
  const int64_t nkb = (n_keys + kSparseBlockQ - 1) / kSparseBlockQ;
  out.assign(size_t(nkb * d), 0.f);
  for (int64_t c = 0; c < nkb; ++c) {
    const int64_t j0 = c * kSparseBlockQ, j1 = std::min(j0 + kSparseBlockQ, n_keys);
    float* dst = out.data() + c * d;
    for (int64_t j = j0; j < j1; ++j) {
      const float* k = p.k + j * ldk + int64_t(hk) * d;
      for (int t = 0; t < d; ++t) dst[t] += k[t];
    }
    const float inv = 1.f / float(j1 - j0);
    for (int t = 0; t < d; ++t) dst[t] *= inv;
  }
}

void score_key_blocks(const AttnParams& p, int h, const std::vector<float>& pooled_k, BlockScores& out) {
  const int d = p.head_dim;
  const int64_t ldq = int64_t(p.n_head) * d;
  const int64_t nkb = int64_t(pooled_k.size()) / d;
  const int64_t n_qblk = n_query_blocks(p.n_q);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  out.n_keys = std::min(p.n_kv, p.q_pos0 + p.n_q);
  out.row_ptr.assign(1, 0);
  out.n_forced.clear();
  out.score.clear();
  std::vector<float> qbar(static_cast<size_t>(d));
  for (int64_t b = 0; b < n_qblk; ++b) {
    const int64_t i0 = b * kSparseBlockQ, i1 = std::min(i0 + kSparseBlockQ, p.n_q);
    std::fill(qbar.begin(), qbar.end(), 0.f);
    for (int64_t i = i0; i < i1; ++i) {
      const float* q = p.q + i * ldq + int64_t(h) * d;
      for (int t = 0; t < d; ++t) qbar[size_t(t)] += q[t];
    }
    const float inv = 1.f / float(i1 - i0);
    const int64_t first = p.q_pos0 + i0, last = p.q_pos0 + i1 - 1;
    // Block-causal candidates: key blocks starting at or before the last row.
    const int64_t n_cand = std::min(nkb, last / kSparseBlockQ + 1);
    const int64_t diag0 = first / kSparseBlockQ;  // first key block holding one of the rows
    for (int64_t c = 0; c < n_cand; ++c) {
      if (c >= diag0) {
        out.score.push_back(kInf);  // diagonal block(s): always kept
        continue;
      }
      const float* kb = pooled_k.data() + c * d;
      float s = 0.f;
      for (int t = 0; t < d; ++t) s += qbar[size_t(t)] * kb[t];
      out.score.push_back(s * inv * p.scale);
    }
    out.n_forced.push_back(n_cand - std::min(n_cand, diag0));
    out.row_ptr.push_back(int64_t(out.score.size()));
  }
}

void select_key_blocks(const BlockScores& s, int64_t k_b, HeadIndex& out) {
  if (k_b < 0) fail("minference block-sparse: negative block budget {}", k_b);
  std::vector<int32_t> chosen;
  for (size_t b = 0; b + 1 < s.row_ptr.size(); ++b) {
    const std::span<const float> row(s.score.data() + s.row_ptr[b], size_t(s.row_ptr[b + 1] - s.row_ptr[b]));
    top_k_indices(row, std::max(k_b, s.n_forced[b]), chosen);
    for (const int32_t c : chosen) {
      const int32_t st = int32_t(c * kSparseBlockQ);
      const int32_t e = int32_t(std::min<int64_t>(st + kSparseBlockQ, s.n_keys));
      if (!out.ranges.empty() && out.range_ptr.back() < int64_t(out.ranges.size()) && out.ranges.back().end == st)
        out.ranges.back().end = e;
      else
        out.ranges.push_back({st, e});
    }
    out.end_block();
  }
}

void build_block_sparse_index(const AttnParams& p, int h, int64_t k_b, const std::vector<float>& pooled_k,
                              HeadIndex& out) {
  if (k_b < 0) fail("minference block-sparse: negative block budget {}", k_b);
  BlockScores s;
  score_key_blocks(p, h, pooled_k, s);
  select_key_blocks(s, k_b, out);
}

}  // namespace longctx

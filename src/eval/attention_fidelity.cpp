// attention_fidelity.cpp: relative error and attention-mass recall of masks (see the header).
#include "eval/attention_fidelity.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace longctx::eval {

std::vector<int64_t> fidelity_rows(int64_t n_tokens, int64_t max_queries) {
  std::vector<int64_t> rows;
  if (n_tokens <= 0) return rows;
  if (max_queries <= 0 || max_queries >= n_tokens) {
    for (int64_t q = 0; q < n_tokens; ++q) rows.push_back(q);
    return rows;
  }
  for (int64_t i = 0; i < max_queries; ++i) {
    // Evenly spaced, ending exactly at the last row.
    int64_t q = (n_tokens - 1) - (int64_t(max_queries - 1 - i) * (n_tokens - 1)) / std::max<int64_t>(max_queries - 1, 1);
    if (rows.empty() || q > rows.back()) rows.push_back(q);
  }
  return rows;
}

void attention_probs(const AttnCapture& c, int head, int64_t q, std::vector<double>& p) {
  const int group = c.n_head / c.n_kv_head;
  const int kvh = head / group;
  const int d = c.head_dim;
  const double scale = 1.0 / std::sqrt(double(d));
  const float* qv = c.q + (q * c.n_head + head) * d;
  p.resize(size_t(q + 1));
  double mx = -INFINITY;
  for (int64_t k = 0; k <= q; ++k) {
    const float* kv = c.k + (k * c.n_kv_head + kvh) * d;
    double s = 0;
    for (int i = 0; i < d; ++i) s += double(qv[i]) * double(kv[i]);
    p[size_t(k)] = s * scale;
    mx = std::max(mx, p[size_t(k)]);
  }
  double z = 0;
  for (auto& x : p) z += (x = std::exp(x - mx));
  for (auto& x : p) x /= z;
}

void kept_keys(const LayerMask& m, int n_head, int head, int64_t q, std::vector<uint8_t>& kept) {
  const int n_index = int(m.heads.size());
  if (n_index <= 0 || n_head % n_index != 0)
    fail("attention mask has {} index heads, which does not divide the model's {} heads", n_index, n_head);
  const auto& blocks = m.heads[size_t(head / (n_head / n_index))];
  const int64_t b = q / kMaskBlockQ;
  if (b >= int64_t(blocks.size()))
    fail("attention mask has {} query blocks, too few for row {} ({} tokens)", blocks.size(), q, m.n_tokens);
  kept.assign(size_t(q + 1), 0);
  for (const auto& r : blocks[size_t(b)].ranges) {
    const int64_t lo = std::max<int64_t>(r.begin, 0), hi = std::min<int64_t>(r.end, q + 1);
    for (int64_t k = lo; k < hi; ++k) kept[size_t(k)] = 1;
  }
  for (int64_t k : blocks[size_t(b)].cols)
    if (k >= 0 && k <= q) kept[size_t(k)] = 1;
}

std::vector<HeadFidelity> layer_fidelity(const AttnCapture& c, const LayerMask& m, const FidelityParams& p,
                                         ThreadPool& pool) {
  if (c.n_kv_head <= 0 || c.n_head % c.n_kv_head != 0)
    fail("captured layer {} has {} heads and {} KV heads", c.layer, c.n_head, c.n_kv_head);
  if (m.n_tokens != c.n_tokens)
    fail("attention mask was built for {} tokens, the layer has {}", m.n_tokens, c.n_tokens);
  const std::vector<int64_t> rows = fidelity_rows(c.n_tokens, p.max_queries);
  std::vector<HeadFidelity> out(size_t(c.n_head));
  pool.parallel_for(c.n_head, [&](int64_t h0, int64_t h1) {
    std::vector<double> prob, od, os;
    std::vector<uint8_t> kept;
    const int d = c.head_dim;
    for (int64_t h = h0; h < h1; ++h) {
      const int kvh = int(h) / (c.n_head / c.n_kv_head);
      double err2 = 0, den2 = 0, recall_sum = 0, min_recall = 1, density_sum = 0;
      for (int64_t q : rows) {
        attention_probs(c, int(h), q, prob);
        kept_keys(m, c.n_head, int(h), q, kept);
        od.assign(size_t(d), 0.0);
        os.assign(size_t(d), 0.0);
        double zk = 0;
        int64_t n_kept = 0;
        for (int64_t k = 0; k <= q; ++k) {
          const float* v = c.v + (k * c.n_kv_head + kvh) * d;
          const double w = prob[size_t(k)];
          for (int i = 0; i < d; ++i) od[size_t(i)] += w * v[i];
          if (kept[size_t(k)]) {
            zk += w;
            ++n_kept;
            for (int i = 0; i < d; ++i) os[size_t(i)] += w * v[i];
          }
        }
        for (int i = 0; i < d; ++i) {
          const double s = zk > 0 ? os[size_t(i)] / zk : 0.0;
          err2 += (s - od[size_t(i)]) * (s - od[size_t(i)]);
          den2 += od[size_t(i)] * od[size_t(i)];
        }
        recall_sum += zk;
        min_recall = std::min(min_recall, zk);
        density_sum += double(n_kept) / double(q + 1);
      }
      HeadFidelity& f = out[size_t(h)];
      f.layer = c.layer;
      f.head = int(h);
      f.rel_err = den2 > 0 ? std::sqrt(err2 / den2) : std::sqrt(err2);
      f.recall = rows.empty() ? 1.0 : recall_sum / double(rows.size());
      f.min_recall = min_recall;
      f.density = rows.empty() ? 1.0 : density_sum / double(rows.size());
    }
  });
  return out;
}

}  // namespace longctx::eval

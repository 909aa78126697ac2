// hip_mask.cpp: see hip_mask.h.
#include "methods/hip/hip_mask.h"

#include <algorithm>

#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {

HipRegion hip_region(const HipParams& hp, int64_t first) {
  HipRegion r;
  r.key_end = std::max(hp.sinks, first - hp.window + 1);
  r.block_begin = hp.sinks / hp.topk.b_k;
  r.block_end = std::max(r.block_begin, (r.key_end + hp.topk.b_k - 1) / hp.topk.b_k);
  if (r.key_end <= hp.sinks) r.block_end = r.block_begin;  // nothing between the sinks and the window
  return r;
}

HipMask hip_estimate(const HipParams& hp, const AttnParams& p, ThreadPool& pool) {
  const HipTopkParams& tp = hp.topk;
  const int d = p.head_dim, group = p.n_head / p.n_kv_head;
  HipMask m;
  m.n_head = p.n_head;
  m.n_qblk = (p.n_q + tp.b_q - 1) / tp.b_q;
  const int64_t n_task = int64_t(p.n_head) * m.n_qblk;
  std::vector<std::vector<int32_t>> sel(static_cast<size_t>(n_task));
  pool.parallel_for(n_task, [&](int64_t begin, int64_t end) {
    std::vector<float> qs;
    std::vector<int64_t> pos;
    for (int64_t t = begin; t < end; ++t) {
      const int h = int(t / m.n_qblk);
      const int64_t b = t % m.n_qblk;
      const int64_t row0 = b * tp.b_q, rows = std::min<int64_t>(tp.b_q, p.n_q - row0);
      const std::vector<int> sample = hip_sample_rows(int(rows), tp.b_sq);
      qs.resize(sample.size() * size_t(d));
      pos.resize(sample.size());
      for (size_t i = 0; i < sample.size(); ++i) {
        const int64_t row = row0 + sample[i];
        std::copy_n(p.q + (row * p.n_head + h) * d, d, qs.data() + i * d);
        pos[i] = p.q_pos0 + row;
      }
      const HipRegion r = hip_region(hp, p.q_pos0 + row0);
      const HipSearch s{.q = qs.data(), .q_stride = d, .q_pos = pos.data(), .n_qs = int(sample.size()),
                        .k = p.k + int64_t(h / group) * d, .k_stride = int64_t(p.n_kv_head) * d, .head_dim = d,
                        .block_begin = r.block_begin, .block_end = r.block_end,
                        .key_end = std::min(r.key_end, p.n_kv)};
      hip_topk_blocks(tp, s, sel[size_t(t)]);
    }
  });
  for (const auto& s : sel) {
    m.blocks.insert(m.blocks.end(), s.begin(), s.end());
    m.ptr.push_back(int64_t(m.blocks.size()));
  }
  return m;
}

SparseIndex hip_sparse_index(const HipParams& hp, const HipMask& mask, const AttnParams& p) {
  if (hp.topk.b_q != kSparseBlockQ) fail("hip: b_q must be {} (the sparse index's query block)", kSparseBlockQ);
  const int b_k = hp.topk.b_k;
  SparseIndex idx;
  idx.n_q = p.n_q;
  idx.heads.resize(size_t(p.n_head));
  for (int h = 0; h < p.n_head; ++h) {
    HeadIndex& hi = idx.heads[size_t(h)];
    for (int64_t b = 0; b < mask.n_qblk; ++b) {
      const int64_t first = p.q_pos0 + b * kSparseBlockQ;
      const int64_t last = p.q_pos0 + std::min<int64_t>((b + 1) * kSparseBlockQ, p.n_q) - 1;
      const int64_t end = std::min(last + 1, p.n_kv);
      if (hp.sinks > 0) hi.ranges.push_back({0, int32_t(std::min(hp.sinks, end))});
      const int64_t e = int64_t(h) * mask.n_qblk + b;
      for (int64_t i = mask.ptr[size_t(e)]; i < mask.ptr[size_t(e + 1)]; ++i) {
        const int32_t s0 = mask.blocks[size_t(i)] * b_k, s1 = s0 + b_k;
        if (!hi.ranges.empty() && hi.range_ptr.back() < int64_t(hi.ranges.size()) && hi.ranges.back().end >= s0)
          hi.ranges.back().end = std::max(hi.ranges.back().end, s1);  // adjacent blocks: one range
        else
          hi.ranges.push_back({s0, s1});
      }
      const int64_t win = hip_region(hp, first).key_end;
      if (win < end) hi.ranges.push_back({int32_t(win), int32_t(end)});
      hi.end_block();
    }
  }
  return idx;
}

}  // namespace longctx

// sparse_decode.cpp (ref): see sparse_decode.h.
#include "kernels/ref/sparse_decode.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/ref/fp8_e4m3.h"
#include "util/error.h"
#include "util/half.h"

namespace longctx {

std::vector<int32_t> decode_row_keys(const DecodeIndex& idx, int64_t r, int64_t len) {
  const int64_t rb = idx.range_ptr[r], re = idx.range_ptr[r + 1];
  const int64_t cb = idx.col_ptr[r], ce = idx.col_ptr[r + 1];
  if (rb < 0 || re < rb || re > idx.range_capacity || cb < 0 || ce < cb || ce > idx.col_capacity)
    fail("decode index row {}: offsets ranges [{}, {}) cols [{}, {}) outside capacities {} / {}", r, rb, re, cb, ce,
         idx.range_capacity, idx.col_capacity);
  std::vector<int32_t> keys;
  // Ranges, sorted by start: each adds what lies past the union so far (block_union's idea).
  int64_t covered_end = 0;  // end of the union of the ranges so far (clipped)
  std::vector<std::pair<int64_t, int64_t>> spans;  // disjoint, ascending
  for (int64_t i = rb; i < re; ++i) {
    const int64_t st = idx.ranges[2 * i], en = idx.ranges[2 * i + 1];
    if (i > rb && st < idx.ranges[2 * (i - 1)])
      fail("decode index row {}: range {} starts at {}, before the previous start {}", r, i - rb, st,
           idx.ranges[2 * (i - 1)]);
    const int64_t s0 = std::clamp<int64_t>(st, 0, len), e0 = std::clamp<int64_t>(en, 0, len);
    const int64_t from = std::max(s0, covered_end);
    if (e0 > from) spans.push_back({from, e0});
    covered_end = std::max(covered_end, e0);
  }
  for (auto [a, b] : spans)
    for (int64_t t = a; t < b; ++t) keys.push_back(int32_t(t));
  size_t si = 0;
  for (int64_t i = cb; i < ce; ++i) {
    const int64_t c = idx.cols[i];
    if (i > cb && c < idx.cols[i - 1])
      fail("decode index row {}: column {} is {}, below the previous column {}", r, i - cb, c, idx.cols[i - 1]);
    if (c < 0 || c >= len || (i > cb && c == idx.cols[i - 1])) continue;
    while (si < spans.size() && spans[si].second <= c) ++si;
    if (si < spans.size() && spans[si].first <= c) continue;  // inside a range
    keys.push_back(int32_t(c));
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

namespace {

// Element e of pool row `row` (K or V) as fp32, dequantised.
float kv_elem(const KvView& kv, const void* pool, int64_t row, int kvh, int d, float scale) {
  const int64_t i = row * kv.row_elems() + int64_t(kvh) * kv.head_dim + d;
  switch (kv.elem) {
    case KvElem::f32: return static_cast<const float*>(pool)[i];
    case KvElem::bf16: return bf16_to_f32(static_cast<const uint16_t*>(pool)[i]);
    case KvElem::fp8_e4m3: return e4m3_to_f32(static_cast<const uint8_t*>(pool)[i]) * scale;
  }
  return 0.f;
}

}  // namespace

void sparse_decode_ref(const SparseDecodeRefParams& p) {
  const KvView& kv = p.kv;
  const DecodeIndex& ix = p.index;
  if (!p.q || !p.o || !kv.k_pool || !kv.v_pool || !kv.block_table || !kv.seq_lens || !ix.range_ptr || !ix.col_ptr)
    fail("sparse_decode_ref: null q/o/pool/table/lengths/index pointer");
  if (kv.on_device || ix.on_device) fail("sparse_decode_ref: needs host views, got device memory");
  if (p.n_head <= 0 || kv.n_kv_head <= 0 || p.n_head % kv.n_kv_head || ix.n_index_head <= 0 ||
      p.n_head % ix.n_index_head || kv.head_dim <= 0 || kv.page_size < 1 || ix.n_seq != kv.n_seq)
    fail("sparse_decode_ref: bad shapes: n_head {} n_kv_head {} n_index_head {} head_dim {} page_size {} "
         "sequences {} (index) / {} (KV)",
         p.n_head, kv.n_kv_head, ix.n_index_head, kv.head_dim, kv.page_size, ix.n_seq, kv.n_seq);
  const int D = kv.head_dim, group = p.n_head / kv.n_kv_head, hpi = p.n_head / ix.n_index_head;
  const float scale = p.scale > 0.f ? p.scale : 1.f / std::sqrt(float(D));
  std::vector<float> s;
  for (int b = 0; b < kv.n_seq; ++b) {
    const int64_t len = kv.seq_lens[b];
    if (len < 0 || len > int64_t(kv.max_pages_per_seq) * kv.page_size)
      fail("sparse_decode_ref: sequence {} has {} tokens, the block table holds {}", b, len,
           int64_t(kv.max_pages_per_seq) * kv.page_size);
    for (int ih = 0; ih < ix.n_index_head; ++ih) {
      const std::vector<int32_t> keys = decode_row_keys(ix, int64_t(b) * ix.n_index_head + ih, len);
      std::vector<int64_t> rows(keys.size());
      for (size_t j = 0; j < keys.size(); ++j) rows[j] = kv.row(b, keys[j]);
      for (int h = ih * hpi; h < (ih + 1) * hpi; ++h) {
        const int kvh = h / group;
        const float* q = p.q + (int64_t(b) * p.n_head + h) * D;
        float* o = p.o + (int64_t(b) * p.n_head + h) * D;
        s.assign(keys.size(), 0.f);
        float mx = -std::numeric_limits<float>::infinity();
        for (size_t j = 0; j < keys.size(); ++j) {
          float acc = 0.f;
          for (int d = 0; d < D; ++d) acc += q[d] * kv_elem(kv, kv.k_pool, rows[j], kvh, d, kv.k_scale);
          s[j] = acc * scale;
          mx = std::max(mx, s[j]);
        }
        float sum = 0.f;
        for (float& x : s) sum += (x = std::exp(x - mx));
        std::fill(o, o + D, 0.f);
        for (size_t j = 0; j < keys.size(); ++j) {
          const float w = s[j] / sum;
          for (int d = 0; d < D; ++d) o[d] += w * kv_elem(kv, kv.v_pool, rows[j], kvh, d, kv.v_scale);
        }
        if (p.lse)
          p.lse[int64_t(b) * p.n_head + h] = keys.empty() ? -std::numeric_limits<float>::infinity() : mx + std::log(sum);
      }
    }
  }
}

}  // namespace longctx

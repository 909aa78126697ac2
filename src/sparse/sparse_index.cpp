// sparse_index.cpp: validation, normalisation and work counting for the sparse index format
// (see sparse_index.h).
#include "sparse/sparse_index.h"

#include <algorithm>
#include <limits>

#include "util/error.h"

namespace longctx {

int64_t BlockKeys::size() const {
  int64_t n = int64_t(cols.size());
  for (const auto& r : ranges) n += r.end - r.start;
  return n;
}

void block_union(std::span<const KeyRange> ranges, std::span<const int32_t> cols, int64_t limit,
                 BlockKeys& out) {
  out.ranges.clear();
  out.cols.clear();
  // Ranges come sorted by start: one sweep merges overlapping or touching ones.
  for (const auto& r : ranges) {
    const int64_t s = std::max<int64_t>(r.start, 0);
    const int64_t e = std::min<int64_t>(r.end, limit);
    if (s >= e) continue;
    if (!out.ranges.empty() && s <= out.ranges.back().end) {
      out.ranges.back().end = std::max(out.ranges.back().end, int32_t(e));
    } else {
      out.ranges.push_back({int32_t(s), int32_t(e)});
    }
  }
  // Columns come sorted: a two-pointer walk drops duplicates and columns inside a range.
  size_t ri = 0;
  for (const int32_t c : cols) {
    if (c < 0 || c >= limit) continue;
    if (!out.cols.empty() && out.cols.back() == c) continue;
    while (ri < out.ranges.size() && out.ranges[ri].end <= c) ++ri;
    if (ri < out.ranges.size() && out.ranges[ri].start <= c) continue;
    out.cols.push_back(c);
  }
}

void validate_sparse_index(const SparseIndex& idx, int64_t n_q, int64_t n_kv, int n_head) {
  const int64_t nb = n_query_blocks(n_q);
  const int nh = int(idx.heads.size());
  if (idx.n_q != n_q) fail("sparse index: built for {} queries, used for {}", idx.n_q, n_q);
  if (nh <= 0 || n_head % nh != 0)
    fail("sparse index: {} index heads do not divide {} query heads", nh, n_head);
  if (n_kv > std::numeric_limits<int32_t>::max())
    fail("sparse index: {} keys exceed the int32 key positions of the format", n_kv);
  for (int h = 0; h < nh; ++h) {
    const HeadIndex& hi = idx.heads[size_t(h)];
    if (hi.n_blocks() != nb || int64_t(hi.col_ptr.size()) != nb + 1)
      fail("sparse index: head {} has {} query blocks, expected {} for {} queries", h, hi.n_blocks(), nb, n_q);
    if (hi.range_ptr.front() != 0 || hi.range_ptr.back() != int64_t(hi.ranges.size()) ||
        hi.col_ptr.front() != 0 || hi.col_ptr.back() != int64_t(hi.cols.size()))
      fail("sparse index: head {} block pointers do not span its range/column lists", h);
    for (int64_t b = 0; b < nb; ++b) {
      if (hi.range_ptr[b + 1] < hi.range_ptr[b] || hi.col_ptr[b + 1] < hi.col_ptr[b])
        fail("sparse index: head {} block {} has decreasing pointers", h, b);
      int32_t prev = std::numeric_limits<int32_t>::min();
      for (const auto& r : hi.block_ranges(b)) {
        if (r.start < 0 || r.end < r.start)
          fail("sparse index: head {} block {} has a bad range [{}, {})", h, b, r.start, r.end);
        if (r.start < prev)
          fail("sparse index: head {} block {} ranges are not sorted by start ({} after {})", h, b, r.start, prev);
        prev = r.start;
      }
      prev = std::numeric_limits<int32_t>::min();
      for (const int32_t c : hi.block_cols(b)) {
        if (c < 0 || c >= n_kv)
          fail("sparse index: head {} block {} column {} is outside [0, {})", h, b, c, n_kv);
        if (c < prev) fail("sparse index: head {} block {} columns are not sorted ({} after {})", h, b, c, prev);
        prev = c;
      }
    }
  }
}

int64_t head_kernel_pairs(const HeadIndex& hi, int64_t n_q, int64_t q_pos0, int64_t n_kv) {
  BlockKeys keys;
  int64_t total = 0;
  for (int64_t b = 0; b < hi.n_blocks(); ++b) {
    const int64_t i0 = b * kSparseBlockQ;
    const int64_t m = std::min<int64_t>(kSparseBlockQ, n_q - i0);
    const int64_t frontier = std::min(n_kv, q_pos0 + i0 + m);  // keys visible to the last row
    block_union(hi.block_ranges(b), hi.block_cols(b), frontier, keys);
    total += m * keys.size();
  }
  return total;
}

int64_t index_kernel_pairs(const SparseIndex& idx, int64_t n_q, int64_t q_pos0, int64_t n_kv, int n_head) {
  const int share = n_head / int(idx.heads.size());
  int64_t total = 0;
  for (const auto& hi : idx.heads) total += share * head_kernel_pairs(hi, n_q, q_pos0, n_kv);
  return total;
}

int64_t dense_causal_pairs(int64_t n_q, int64_t q_pos0, int n_head) {
  // Row i sees q_pos0 + i + 1 keys.
  return int64_t(n_head) * (n_q * q_pos0 + n_q * (n_q + 1) / 2);
}

}  // namespace longctx

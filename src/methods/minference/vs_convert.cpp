// vs_convert.cpp: see vs_convert.h.
#include "methods/minference/vs_convert.h"

#include <algorithm>

#include "util/error.h"

namespace longctx {

void convert_vs_index(const VsLines& lines, int64_t n_q, int64_t q_pos0, int64_t n_kv, HeadIndex& out) {
  const auto& vert = lines.vertical;
  const auto& sl = lines.slash;
  for (size_t i = 0; i < vert.size(); ++i)
    if (vert[i] < 0 || vert[i] >= n_kv || (i && vert[i] < vert[i - 1]))
      fail("vertical-slash index: verticals must be ascending in [0, {}) (got {} at {})", n_kv, vert[i], i);
  for (size_t i = 0; i < sl.size(); ++i)
    if (sl[i] < 0 || (i && sl[i] < sl[i - 1]))
      fail("vertical-slash index: slash offsets must be ascending and >= 0 (got {} at {})", sl[i], i);

  for (int64_t b = 0; b < n_query_blocks(n_q); ++b) {
    const int64_t first = q_pos0 + b * kSparseBlockQ;
    const int64_t end_m = std::min(q_pos0 + std::min<int64_t>((b + 1) * kSparseBlockQ, n_q), n_kv);  // last + 1
    const size_t r_begin = out.ranges.size();
    // Largest offsets first = smallest key starts first. Slash o covers [first - o, end_m - o).
    for (size_t i = sl.size(); i-- > 0;) {
      const int64_t o = sl[i];
      const int64_t e = end_m - o;
      if (e <= 0) continue;  // the slash does not reach this block yet
      const int64_t s = std::max<int64_t>(first - o, 0);
      if (out.ranges.size() > r_begin && s <= out.ranges.back().end) {
        out.ranges.back().end = std::max<int32_t>(out.ranges.back().end, int32_t(e));
      } else {
        out.ranges.push_back({int32_t(s), int32_t(e)});
      }
    }
    // Verticals: causal for the block and not covered by a range.
    size_t ri = r_begin;
    for (const int32_t v : vert) {
      if (v >= end_m) break;
      while (ri < out.ranges.size() && out.ranges[ri].end <= v) ++ri;
      if (ri < out.ranges.size() && out.ranges[ri].start <= v) continue;
      out.cols.push_back(v);
    }
    out.end_block();
  }
}

}  // namespace longctx

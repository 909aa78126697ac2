// a_shape_index.cpp: see a_shape_index.h.
#include "methods/a_shape/a_shape_index.h"

#include <algorithm>

#include "util/error.h"

namespace longctx {

void build_a_shape_index(const AShapeParams& a, int64_t n_q, int64_t q_pos0, int64_t n_kv, HeadIndex& out) {
  if (a.sink < 0 || a.window < 0) fail("a_shape: sink {} and window {} must be >= 0", a.sink, a.window);
  for (int64_t b = 0; b < n_query_blocks(n_q); ++b) {
    const int64_t first = q_pos0 + b * kSparseBlockQ;
    const int64_t last = q_pos0 + std::min<int64_t>((b + 1) * kSparseBlockQ, n_q) - 1;
    const int64_t end = std::min(last + 1, n_kv);
    const int64_t sink_end = std::min(a.sink, end);
    const int64_t win_start = std::max<int64_t>(first - a.window + 1, 0);
    if (a.window > 0 && win_start <= sink_end) {  // sink and window touch: one range
      out.ranges.push_back({0, int32_t(end)});
    } else {
      if (sink_end > 0) out.ranges.push_back({0, int32_t(sink_end)});
      if (a.window > 0 && win_start < end) out.ranges.push_back({int32_t(win_start), int32_t(end)});
    }
    out.end_block();
  }
}

}  // namespace longctx

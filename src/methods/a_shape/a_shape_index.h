// a_shape_index.h: the static A-shape (StreamingLLM) index: attention sinks + a local window.
//
// What: every query block attends keys [0, sink) and the local window
// [first_pos - window + 1, last_pos + 1), where first_pos/last_pos are the absolute positions of
// the block's first and last rows. So each row sees at least its `window` most recent keys
// (itself included) plus the sinks, and at most window + 63 recent keys: the window is applied at
// query-block granularity, like the reference's block kernel (MInference stream_llm, whose config
// entry is [ "stream_llm", sink = vertical_size, window = slash_size ]).
// Why: A-shape heads need no index estimation (paper Table 1: zero build time).
// How: two ranges per block, merged into one where they touch; the mainloop adds the causal mask.
#pragma once
#include <cstdint>

#include "sparse/sparse_index.h"

namespace longctx {

// The paper's A-shape: 1024 global (sink) tokens + a 4096-token local window (Table 4).
inline constexpr int64_t kAShapeDefaultSink = 1024;
inline constexpr int64_t kAShapeDefaultWindow = 4096;

struct AShapeParams {
  int64_t sink = kAShapeDefaultSink;      // first keys every query attends (>= 0)
  int64_t window = kAShapeDefaultWindow;  // most recent keys every query attends (>= 0)
};

// Appends n_query_blocks(n_q) blocks to out (normally a fresh HeadIndex) for a chunk of n_q
// queries at positions q_pos0.. against n_kv keys.
void build_a_shape_index(const AShapeParams& a, int64_t n_q, int64_t q_pos0, int64_t n_kv, HeadIndex& out);

}  // namespace longctx

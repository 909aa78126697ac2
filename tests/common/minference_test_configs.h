// minference_test_configs.h (tests): the head-pattern helpers and the mixed MInference config
// (3 layers x 4 heads, every pattern) that the engine-level tests share:
// tests/model/test_prompt_wide.cpp (CPU layer-major prefill) and
// tests/gpu/test_gpu_minference.cpp (GPU vs CPU). Header-only.
#pragma once
#include <cstdint>

#include "methods/minference/minference_config.h"

namespace longctx::test {

inline HeadPattern vs(int64_t v, int64_t s) { return {PatternKind::VerticalSlash, v, s, 0}; }
inline HeadPattern bs(int64_t k) { return {PatternKind::BlockSparse, k, 0, 0}; }
inline HeadPattern ash(int64_t sink, int64_t window) { return {PatternKind::AShape, sink, window, 0}; }

// Every pattern, budgets well below ~1.1K keys: VS keeps the 30 forced columns + 10 more and the
// 100 forced diagonals + 50 more; block-sparse 3-4 of up to 18 key blocks; A-shape 64 + 256.
inline MInferenceConfig mixed_config() {
  MInferenceConfig c;
  c.layers = {{vs(40, 150), bs(3), ash(64, 256), vs(100, 200)},
              {bs(4), vs(40, 150), vs(60, 120), ash(32, 192)},
              {vs(30, 160), ash(64, 128), bs(3), vs(50, 150)}};
  return c;
}

}  // namespace longctx::test

// a_shape_gpu.h: A-shape's GPU builder (a_shape_gpu.cpp) and its device buffer's layout.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "methods/a_shape/a_shape_method.h"
#include "methods/gpu_method.h"

namespace longctx {

// The shared index's device buffers for chunks of up to `chunk` queries, and the sparse kernel's
// workspace for it (offsets into one block of `total` bytes).
struct AShapeLayout {
  int64_t max_blocks = 0;   // query blocks of a full chunk
  size_t range_ptr = 0;     // int64 [max_blocks + 1]
  size_t ranges = 0;        // int32 pairs [2 * max_blocks]
  size_t col_ptr = 0;       // int64 [max_blocks + 1] (all 0: A-shape has no columns)
  size_t workspace = 0;     // sparse_attention workspace
  size_t workspace_bytes = 0;
  size_t total = 0;
};
AShapeLayout a_shape_layout(int64_t chunk);

std::unique_ptr<GpuMethod> make_a_shape_gpu(const AShapeMethod& m, const MethodContext& model);

}  // namespace longctx

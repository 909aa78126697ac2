// minference_gpu.h: MInference's GPU builder (minference_gpu.cpp): the config's per-head patterns
// for cuda::MinferenceIndexBuilder (kernels/cuda/minference_index.h, tested equal to the CPU
// builders), and the memory bound of its index.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cuda/minference_index.h"
#include "methods/gpu_method.h"
#include "methods/minference/minference_method.h"

namespace longctx {

// Per (layer, query head) patterns with the VS budgets scaled by ratio, exactly as
// minference_index.cpp scales them: [n_layer][n_head].
std::vector<std::vector<cuda::GpuHeadPattern>> gpu_patterns(const MInferenceMethod& m);

// The builder's fixed shape for chunks of `chunk` queries and a cache of `capacity` keys.
cuda::MinferenceBuilderShape builder_shape(const MethodContext& model, int64_t chunk, int64_t capacity);

// An upper bound of the builder's memory that depends on budgets and data (selected lines, the
// index's ranges and columns, the sparse kernel's workspace: allocated on demand by build(),
// growing by 1.5x steps), from the config's budgets with no range merging.
size_t minference_index_bound(const MInferenceMethod& m, const GpuShape& shape);

std::unique_ptr<GpuMethod> make_minference_gpu(const MInferenceMethod& m, const MethodContext& model);

}  // namespace longctx

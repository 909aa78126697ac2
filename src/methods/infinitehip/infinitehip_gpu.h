// infinitehip_gpu.h: InfiniteHiP's GPU builder (infinitehip_gpu.cpp): the pruning stages of a
// prefill chunk on the device (kernels/cuda/ihip_prune.h, "Prefill") and the chunk's sparse
// index for the shared cuda::sparse_attention; at decode the per-stage mask caches on the device
// (the refresh decided by a kernel: kernels/cuda/ihip_decode_cache.h), the decode stages and the
// decode index for cuda::sparse_decode, graph-replayable.
// What runs on the GPU: both phases and both key layouts. rope=off (keys rotated at their own
// positions, as the GPU model stores them): `--attn 'infinitehip=rope=off'` (sparse decode),
// `'prefill:infinitehip=rope=off'` (dense decode), `'decode:infinitehip=rope=off'`. rope=on (the
// default): the builder attends itself (GpuMethod::attends, the pre-RoPE hooks): the model caches
// K un-rotated, the pruning stages rotate with the paper's positions from a cos/sin table
// (chunk-indexed in the first early_layers layers, relative in the rest), and each prefill block /
// decode step attends its key set gathered and rotated at 0..L-1 (infinitehip_attend_gpu.h);
// composed per phase it is refused (a pre-RoPE cache serves one method for both phases).
// Sliding-window layers (Gemma 3's local layers) never reach the builder: the model keeps their
// keys post-RoPE and runs its dense window kernels (GpuTransformer::method_layer), as the CPU does.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "methods/gpu_method.h"
#include "methods/infinitehip/infinitehip_method.h"

namespace longctx {

// "" when make_infinitehip_gpu can build m's GPU side for model; else why not.
std::string infinitehip_gpu_problem(const InfiniteHipMethod& m, const MethodContext& model);

// Throws Error (infinitehip_gpu_problem's text) when it cannot.
std::unique_ptr<GpuMethod> make_infinitehip_gpu(const InfiniteHipMethod& m, const MethodContext& model);

// The decode step types since the sequence started, summed over layers (the CPU method's
// State::refreshes / cached_steps): sparse steps refreshing from stage i, and cached steps.
struct IhipGpuDecodeCounts {
  std::vector<int64_t> refreshes;
  int64_t cached_steps = 0;
};
// g must be make_infinitehip_gpu's builder (Error otherwise); synchronises stream s.
IhipGpuDecodeCounts infinitehip_gpu_decode_counts(const GpuMethod& g, cuda::Stream s);

}  // namespace longctx

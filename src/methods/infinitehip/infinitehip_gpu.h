// infinitehip_gpu.h: InfiniteHiP's GPU builder (infinitehip_gpu.cpp): the pruning stages of a
// prefill chunk on the device (kernels/cuda/ihip_prune.h, "Prefill") and the chunk's sparse
// index for the shared cuda::sparse_attention; at decode the per-stage mask caches on the device
// (the refresh decided by a kernel: kernels/cuda/ihip_decode_cache.h), the decode stages and the
// decode index for cuda::sparse_decode, graph-replayable.
// What runs on the GPU: rope=off (keys rotated at their own positions, as the GPU model stores
// them), both phases: `--device cuda --attn 'infinitehip=rope=off'` (sparse decode) and
// `'prefill:infinitehip=rope=off'` (dense decode). Refused, with the reason: rope=on (its pruning
// and attention need the un-rotated keys, which the GPU model keeps only for a method that
// attends itself: not built for InfiniteHiP).
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

// infinitehip_gpu.h: InfiniteHiP's GPU builder (infinitehip_gpu.cpp): the pruning stages of a
// prefill chunk on the device (kernels/cuda/ihip_prune.h, "Prefill") and the chunk's sparse
// index for the shared cuda::sparse_attention.
// What runs on the GPU: rope=off prefill (keys rotated at their own positions, as the GPU model
// stores them). Refused, with the reason: rope=on (its pruning and attention need the un-rotated
// keys, which the GPU model does not keep) and sparse decode (the per-stage decode caches are not
// wired to the device yet), so `--device cuda --attn 'prefill:infinitehip=rope=off'` runs and
// `--attn infinitehip` names what is missing.
#pragma once
#include <memory>
#include <string>

#include "methods/gpu_method.h"
#include "methods/infinitehip/infinitehip_method.h"

namespace longctx {

// "" when make_infinitehip_gpu can build m's GPU side for model; else why not.
std::string infinitehip_gpu_problem(const InfiniteHipMethod& m, const MethodContext& model);

// Throws Error (infinitehip_gpu_problem's text) when it cannot.
std::unique_ptr<GpuMethod> make_infinitehip_gpu(const InfiniteHipMethod& m, const MethodContext& model);

}  // namespace longctx

// hip_gpu.h: HiP's GPU builder (hip_gpu.cpp): the mask estimation on the device
// (kernels/cuda/hip_estimate.h) for prefill chunks and decode steps.
#pragma once
#include <memory>

#include "methods/gpu_method.h"
#include "methods/hip/hip_method.h"

namespace longctx {

std::unique_ptr<GpuMethod> make_hip_gpu(const HipMethod& m, const MethodContext& model);

}  // namespace longctx

// kv_cuda_check.h (kv/cuda, internal): CUDA runtime calls that throw longctx::Error.
// The KV layer links cudart only (not kernels/cuda), so it carries this one check of its own.
#pragma once
#include <cuda_runtime.h>

#include "util/error.h"

namespace longctx::kv::detail {

inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("KV cache: {} failed: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

}  // namespace longctx::kv::detail

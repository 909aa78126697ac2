// kv_scatter_launch.h (kv/cuda, internal): the raw launchers of kv_scatter.cu, called by
// kv_scatter.cpp after it has checked the arguments (the .cu stays free of fmt / Error).
#pragma once
#include <cuda_runtime.h>

#include "kv/cuda/kv_scatter.h"

namespace longctx::kv {

inline constexpr int64_t kKvVec = 8;  // elements per vector: 16 bytes of bf16, 8 of e4m3

namespace detail {
cudaError_t launch_scatter(const KvScatterParams& p, cuda::Stream s);
cudaError_t launch_gather(const KvGatherParams& p, cuda::Stream s);
}  // namespace detail

}  // namespace longctx::kv

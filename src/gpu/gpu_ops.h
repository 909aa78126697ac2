// gpu_ops.h: the two small elementwise kernels the model forward needs beyond kernels/cuda.
//
// bias_add_rows: y[r, :] += bias[:] (Qwen2's Q/K/V bias after the projection GEMM; the cuBLASLt
// wrapper has no bias epilogue). fill_bf16: x[:] = value (RMSNorm weights of random models).
// Plain C++ API (void* device pointers, shapes alongside); the kernels are in gpu_ops.cu.
#pragma once
#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace longctx::gpu {

struct BiasAddParams {
  void* y = nullptr;           // bf16 [n_rows, dim], row stride `stride` elements (0 = dim)
  const void* bias = nullptr;  // bf16 [dim]
  int64_t n_rows = 0, dim = 0, stride = 0;
};
void bias_add_rows(const BiasAddParams& p, cuda::Stream s);

void fill_bf16(void* x, int64_t n, float value, cuda::Stream s);  // x: bf16 [n]

}  // namespace longctx::gpu

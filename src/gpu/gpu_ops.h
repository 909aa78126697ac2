// gpu_ops.h: the two small elementwise kernels the model forward needs beyond kernels/cuda.
//
// bias_add_rows: y[r, :] += bias[:] (Qwen2's Q/K/V bias after the projection GEMM; the cuBLASLt
// wrapper has no bias epilogue). fill_bf16: x[:] = value (RMSNorm weights of random models).
// kv_append: copies one new K row and V row into the caches at a position read from device
// memory, so a captured decode step (CUDA graph) writes each token's K/V where it belongs.
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

struct KvAppendParams {
  const void* k_row = nullptr;  // bf16 [row_elems]
  const void* v_row = nullptr;  // bf16 [row_elems]
  void* k_cache = nullptr;      // bf16 [capacity, row_elems]
  void* v_cache = nullptr;      // bf16 [capacity, row_elems]
  const int32_t* pos = nullptr; // device int32 [1]: the row to write (outside [0, capacity): nothing)
  int64_t row_elems = 0;        // n_kv_head * head_dim, a multiple of 8
  int64_t capacity = 0;
};
void kv_append(const KvAppendParams& p, cuda::Stream s);

}  // namespace longctx::gpu

// quant_matmul.h (cpu): y = x W^T with W kept in a ggml block format and x quantized to Q8 on
// the fly: the fast CPU path's matmul (decode GEMVs and prefill GEMMs), threaded over W's rows.
//
// The exact path is kernels/ref/ops.h's matmul_ref on fp32 weights; this one differs from it by
// the activation rounding (|x - d q| <= d / 2 per value, d = max|x| / 127 over 32 values) and
// fp32 summation order. tests/kernels/test_quant_matmul.cpp bounds that against an fp64 oracle.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/cpu/quant_dot.h"

namespace longctx {

class ThreadPool;

// A row-major weight matrix [rows, cols] stored as `rows` rows of row_bytes bytes of blocks.
struct QuantMatrix {
  QuantType type = QuantType::q8_0;
  int64_t rows = 0, cols = 0;
  size_t row_bytes = 0;
  std::vector<uint8_t> data;  // [rows * row_bytes]
  bool empty() const { return rows == 0; }
};

// y[T, w.rows] = x[T, w.cols] * W^T (+ bias[w.rows] if non-null); xq: the caller's scratch for
// the quantized activations (resized here; keep it across calls so it is allocated once).
struct QuantMatmulParams {
  const float* x = nullptr;
  const QuantMatrix* w = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
  int64_t T = 0;
  Q8Rows* xq = nullptr;
  bool x_quantized = false;  // xq already holds x (the previous call's input): skip quantizing
  // Each row's y exactly as a T = 1 call gives it (batched decode must equal decoding alone), so
  // the prefill panel kernel is not used for these rows.
  bool rows_alone = false;
  CpuIsa isa = best_cpu_isa();
};
void quant_matmul(const QuantMatmulParams& p, ThreadPool& pool);

}  // namespace longctx

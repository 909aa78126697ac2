// dequant.h: whole-tensor dequantization helpers on top of dequantize() (model_file.h).
//
// dequantize(t, src, dst, n) converts one contiguous run of n elements (a multiple of the
// block size) on the calling thread; it is safe to call from inside ThreadPool tasks.
// The helpers here split a big run across util/thread_pool.h's global_pool(): do NOT call
// them from inside a global_pool() task (the pool does not nest).
#pragma once
#include <cstdint>
#include <vector>

#include "loader/model_file.h"

namespace longctx {

// Like dequantize(), split over global_pool() when n is large.
void dequantize_parallel(DType t, const void* src, float* dst, int64_t n);

// The whole tensor as fp32, row-major (shape as t.shape). Throws for dtypes without a dequantizer.
std::vector<float> dequantize_tensor(const TensorView& t);

}  // namespace longctx

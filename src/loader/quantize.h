// quantize.h: fp32 -> ggml block quantizers for the formats the writers produce.
//
// Q8_0, Q4_0 and Q4_1 with ggml's reference rounding (quantize_row_*_ref), so a file written
// here is byte-identical to one gguf-py / llama.cpp would write from the same fp32 data.
// n must be a multiple of 32; dst receives n / 32 blocks (dtype_row_bytes(type, n) bytes).
#pragma once
#include <cstdint>
#include <vector>

#include "loader/model_file.h"

namespace longctx {

void quantize_row_q8_0(const float* src, void* dst, int64_t n);
void quantize_row_q4_0(const float* src, void* dst, int64_t n);
void quantize_row_q4_1(const float* src, void* dst, int64_t n);

// Encodes n fp32 values as dtype t: F32, F16, BF16, Q8_0, Q4_0 or Q4_1 (throws for others).
std::vector<uint8_t> encode_f32(DType t, const float* src, int64_t n);

}  // namespace longctx

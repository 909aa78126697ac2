// fp8_vec.cuh (cuda, internal): e4m3 <-> float conversions and 8-element bf16 <-> e4m3 vectors
// (16 bytes of bf16, 8 of e4m3) for the memory-bound fp8 KV-cache kernels (gpu/kv_fp8.cu,
// kv/cuda/kv_scatter.cu, paged_dot.cu's fp8 keys), the e4m3 -> fp16 widening of the fp8
// attention and scoring kernels, and the grid size of the grid-stride loops. Conversions
// saturate (__NV_SATFINITE) as the host twin kernels/ref/fp8_e4m3.h does.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace longctx::cuda::fp8vec {

constexpr int kThreads = 256;         // threads per block of the grid-stride loops
constexpr int64_t kMaxBlocks = 4096;  // grid-stride beyond this: enough to fill any current GPU

inline unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

__device__ __forceinline__ uint8_t to_e4m3(float x) {
  return uint8_t(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float from_e4m3(uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(b), __NV_E4M3);
  return __half2float(__half(h));
}

// Two e4m3 (the low 16 bits, first element lowest) -> two fp16 packed as mma operands take
// them (first element in the low half); exact: every e4m3 value is an fp16. One cvt on sm_89+.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

// Four e4m3 (one 32-bit word, first element lowest) -> four fp16: .x holds elements 0-1, .y 2-3
// (mma operand order). Two cvts that read the word's 16-bit halves in place: the SASS cvt takes
// its operand's high half directly (F2FP ... R.H1), where a shift (w >> 16) feeding
// e4m3x2_to_f16x2 costs one more instruction a pair (ptxas keeps the shift). Exact, as above.
__device__ __forceinline__ uint2 e4m3x4_to_f16x4(uint32_t four) {
  uint2 out;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\t"
      "cvt.rn.f16x2.e4m3x2 %0, lo;\n\tcvt.rn.f16x2.e4m3x2 %1, hi;\n\t}"
      : "=r"(out.x), "=r"(out.y)
      : "r"(four));
#else
  out.x = e4m3x2_to_f16x2(four & 0xffffu);
  out.y = e4m3x2_to_f16x2(four >> 16);
#endif
  return out;
}

// 8 bf16 (one uint4) -> 8 e4m3 (one uint2), x * inv_scale.
__device__ __forceinline__ uint2 quantize8(uint4 v, float inv_scale) {
  const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&v);
  uint32_t w[2] = {0, 0};
#pragma unroll
  for (int i = 0; i < 8; ++i) w[i / 4] |= uint32_t(to_e4m3(__bfloat162float(e[i]) * inv_scale)) << (8 * (i % 4));
  return make_uint2(w[0], w[1]);
}

// 8 e4m3 (one uint2) -> 8 bf16 (one uint4), x * scale.
__device__ __forceinline__ uint4 dequantize8(uint2 v, float scale) {
  const uint8_t* b = reinterpret_cast<const uint8_t*>(&v);
  uint4 out;
  __nv_bfloat16* e = reinterpret_cast<__nv_bfloat16*>(&out);
#pragma unroll
  for (int j = 0; j < 8; ++j) e[j] = __float2bfloat16_rn(from_e4m3(b[j]) * scale);
  return out;
}

}  // namespace longctx::cuda::fp8vec

// kv_fp8.cu: kernels of kv_fp8.h. Memory-bound one-pass loops over 8-element vectors (16 bytes
// of bf16, 8 bytes of e4m3); grid-stride, 256 threads.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "gpu/kv_fp8.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/fp8_vec.cuh"

namespace longctx::gpu {

namespace {

using bf16 = __nv_bfloat16;
using cuda::fp8vec::blocks_for;
using cuda::fp8vec::dequantize8;
using cuda::fp8vec::kThreads;
using cuda::fp8vec::quantize8;
constexpr int64_t kVec = 8;  // elements per vector

cudaStream_t st(cuda::Stream s) { return static_cast<cudaStream_t>(s); }

__global__ void amax_kernel(const uint4* x, int64_t n_vec, float* out) {
  float m = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_vec; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 v = x[i];
    const bf16* e = reinterpret_cast<const bf16*>(&v);
#pragma unroll
    for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(__bfloat162float(e[j])));
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  __shared__ float warp_max[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, warp_max[w]);
    // NaN is not counted (fmaxf drops it); non-negative floats order like their bit patterns
    atomicMax(reinterpret_cast<int*>(out), __float_as_int(m));
  }
}

__global__ void quantize_kernel(const uint4* src, uint2* dst, int64_t n_vec, float inv_scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_vec; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = quantize8(src[i], inv_scale);
}

__global__ void dequantize_kernel(const uint2* src, uint4* dst, int64_t n_vec, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_vec; i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = dequantize8(src[i], scale);
  }
}

__global__ void append_fp8_kernel(const uint4* k_row, const uint4* v_row, uint2* k_cache, uint2* v_cache,
                                  const int32_t* pos, int64_t row_vec, int64_t capacity, float k_inv, float v_inv) {
  const int64_t p = *pos;
  if (p < 0 || p >= capacity) return;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < row_vec; i += int64_t(gridDim.x) * blockDim.x) {
    k_cache[p * row_vec + i] = quantize8(k_row[i], k_inv);
    v_cache[p * row_vec + i] = quantize8(v_row[i], v_inv);
  }
}

void check_convert(const KvConvertParams& p, const char* what) {
  LC_REQUIRE(p.src && p.dst, "%s: null pointer", what);
  LC_REQUIRE(p.n >= 0 && p.n % kVec == 0, "%s: %lld elements (a multiple of %lld)", what, (long long)p.n,
             (long long)kVec);
  LC_REQUIRE(p.scale > 0.f, "%s: scale %g must be positive", what, double(p.scale));
}

}  // namespace

void kv_amax(const KvAmaxParams& p, cuda::Stream s) {
  LC_REQUIRE(p.x && p.out, "kv_amax: null pointer");
  LC_REQUIRE(p.n >= 0 && p.n % kVec == 0, "kv_amax: %lld elements (a multiple of %lld)", (long long)p.n,
             (long long)kVec);
  if (p.n == 0) return;
  amax_kernel<<<blocks_for(p.n / kVec), kThreads, 0, st(s)>>>(static_cast<const uint4*>(p.x), p.n / kVec, p.out);
  LC_LAUNCH_CHECK("kv_amax n=%lld", (long long)p.n);
}

void kv_quantize(const KvConvertParams& p, cuda::Stream s) {
  check_convert(p, "kv_quantize");
  if (p.n == 0) return;
  quantize_kernel<<<blocks_for(p.n / kVec), kThreads, 0, st(s)>>>(static_cast<const uint4*>(p.src),
                                                                    static_cast<uint2*>(p.dst), p.n / kVec,
                                                                    1.f / p.scale);
  LC_LAUNCH_CHECK("kv_quantize n=%lld", (long long)p.n);
}

void kv_dequantize(const KvConvertParams& p, cuda::Stream s) {
  check_convert(p, "kv_dequantize");
  if (p.n == 0) return;
  dequantize_kernel<<<blocks_for(p.n / kVec), kThreads, 0, st(s)>>>(static_cast<const uint2*>(p.src),
                                                                      static_cast<uint4*>(p.dst), p.n / kVec, p.scale);
  LC_LAUNCH_CHECK("kv_dequantize n=%lld", (long long)p.n);
}

void kv_append_fp8(const KvAppendParams& p, float k_scale, float v_scale, cuda::Stream s) {
  LC_REQUIRE(p.k_row && p.v_row && p.k_cache && p.v_cache && p.pos, "kv_append_fp8: null pointer");
  LC_REQUIRE(p.row_elems > 0 && p.row_elems % kVec == 0 && p.capacity > 0,
             "kv_append_fp8: row of %lld elements (a positive multiple of %lld) and capacity %lld",
             (long long)p.row_elems, (long long)kVec, (long long)p.capacity);
  LC_REQUIRE(k_scale > 0.f && v_scale > 0.f, "kv_append_fp8: scales %g, %g must be positive", double(k_scale),
             double(v_scale));
  append_fp8_kernel<<<blocks_for(p.row_elems / kVec), kThreads, 0, st(s)>>>(
      static_cast<const uint4*>(p.k_row), static_cast<const uint4*>(p.v_row), static_cast<uint2*>(p.k_cache),
      static_cast<uint2*>(p.v_cache), p.pos, p.row_elems / kVec, p.capacity, 1.f / k_scale, 1.f / v_scale);
  LC_LAUNCH_CHECK("kv_append_fp8 row=%lld capacity=%lld", (long long)p.row_elems, (long long)p.capacity);
}

}  // namespace longctx::gpu

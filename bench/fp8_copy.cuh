// fp8_copy.cuh (bench): the e4m3 copy of a bf16 tensor at the fp8 KV cache's scale rule
// (gpu/kv_fp8.h: scale = amax / 448, code = e4m3(x / scale)), for the benches that time kernels
// over fp8 K/V (bench_sparse --fp8, bench_hip --fp8-tiles and its fp8 copy of K).
// fp8_copy keeps the amax on the device (no host sync, so the copy itself can be timed);
// fp8_scale reads it back (setup, outside the timings).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "kernels/cuda/check.h"
#include "kernels/cuda/fp8_vec.cuh"
#include "kernels/cuda/runtime.h"

namespace longctx::bench {

// max |x| over n_vec groups of 8 bf16, as the bits of a non-negative float (atomicMax on the bits
// orders non-negative floats).
__global__ void fp8_amax_kernel(const uint4* x, int64_t n_vec, unsigned* amax_bits) {
  float m = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_vec; i += int64_t(gridDim.x) * blockDim.x) {
    const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&x[i]);
#pragma unroll
    for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(__bfloat162float(e[j])));
  }
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  if (threadIdx.x % 32 == 0) atomicMax(amax_bits, __float_as_uint(m));
}

__global__ void fp8_quantize_kernel(const uint4* x, uint2* out, int64_t n_vec, const unsigned* amax_bits) {
  const float amax = __uint_as_float(*amax_bits), inv = amax > 0.f ? 448.f / amax : 1.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_vec; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = cuda::fp8vec::quantize8(x[i], inv);
}

// out [n] e4m3 = the copy of x [n] bf16 (n % 8 == 0); amax_bits: 4 bytes of device memory.
inline void fp8_copy(const void* x, int64_t n, void* out, unsigned* amax_bits, cuda::Stream s) {
  namespace v = cuda::fp8vec;
  const auto st = static_cast<cudaStream_t>(s);
  cuda::memset_async(amax_bits, 0, 4, s);
  fp8_amax_kernel<<<v::blocks_for(n / 8), v::kThreads, 0, st>>>(static_cast<const uint4*>(x), n / 8, amax_bits);
  fp8_quantize_kernel<<<v::blocks_for(n / 8), v::kThreads, 0, st>>>(static_cast<const uint4*>(x),
                                                                    static_cast<uint2*>(out), n / 8, amax_bits);
  LC_LAUNCH_CHECK("bench fp8_copy n=%lld", (long long)n);
}

// The copy's scale (real = code * scale), read back after the stream's work.
inline float fp8_scale(const unsigned* amax_bits, cuda::Stream s) {
  cuda::stream_sync(s);
  unsigned bits = 0;
  cuda::copy_d2h(&bits, amax_bits, 4);
  float a;
  std::memcpy(&a, &bits, 4);
  return a > 0.f ? a / 448.f : 1.f;
}

}  // namespace longctx::bench

// elementwise.cu (cuda): SwiGLU (silu(gate) * up), residual add, random bf16 fill.
// What/layout: ops.h. Tested in tests/cuda/test_ops.cpp.
// How: grid-stride loops over 16-byte vectors (8 bf16), fp32 math, one rounding per output.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/vec.cuh"

namespace longctx::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 132 * 16;  // enough CTAs to fill an H100/H200 several times over

unsigned blocks_for(int64_t n_items) {
  const int64_t b = (n_items + kThreads - 1) / kThreads;
  return unsigned(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

// GELU, tanh approximation (HF "gelu_pytorch_tanh"), as kernels/ref gelu_tanh_mul_ref.
__device__ __forceinline__ float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f, kCubic = 0.044715f;
  return 0.5f * x * (1.f + tanhf(kSqrt2OverPi * (x + kCubic * x * x * x)));
}

__global__ void swiglu_kernel(const SwiGluParams p) {
  const int64_t vec_per_row = p.dim / vec::kVec;
  const int64_t n = p.n_rows * vec_per_row;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / vec_per_row, c = (i % vec_per_row) * vec::kVec;
    float g[8], u[8], o[8];
    vec::load8(static_cast<const bf16*>(p.gate) + r * p.gate_stride + c, g);
    vec::load8(static_cast<const bf16*>(p.up) + r * p.up_stride + c, u);
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] = (p.gelu_tanh ? gelu_tanh(g[e]) : g[e] / (1.f + expf(-g[e]))) * u[e];
    vec::store8(static_cast<bf16*>(p.out) + r * p.out_stride + c, o);
  }
}

__global__ void add_kernel(bf16* y, const bf16* a, const bf16* b, int64_t n) {
  const int64_t nvec = n / vec::kVec;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < nvec; i += int64_t(gridDim.x) * blockDim.x) {
    float x[8], z[8];
    vec::load8(a + i * vec::kVec, x);
    vec::load8(b + i * vec::kVec, z);
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] += z[e];
    vec::store8(y + i * vec::kVec, x);
  }
  // Tail (n not a multiple of 8): block 0 does it element by element.
  if (blockIdx.x == 0)
    for (int64_t i = nvec * vec::kVec + threadIdx.x; i < n; i += blockDim.x)
      y[i] = __float2bfloat16_rn(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void fill_random_kernel(bf16* x, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t r = splitmix64(seed * 0x632be59bd9b4e019ull + uint64_t(i));
    const float u = float(r >> 40) * (1.f / 16777216.f);  // 24 random bits -> [0, 1)
    x[i] = __float2bfloat16_rn((2.f * u - 1.f) * scale);
  }
}

}  // namespace

void swiglu(const SwiGluParams& p_in, Stream s) {
  SwiGluParams p = p_in;
  LC_REQUIRE(p.gate && p.up && p.out, "swiglu: null pointer");
  if (!p.gate_stride) p.gate_stride = p.dim;
  if (!p.up_stride) p.up_stride = p.dim;
  if (!p.out_stride) p.out_stride = p.dim;
  LC_REQUIRE(p.dim > 0 && p.dim % vec::kVec == 0 && p.gate_stride % vec::kVec == 0 && p.up_stride % vec::kVec == 0 &&
                 p.out_stride % vec::kVec == 0,
             "swiglu: dim %lld and row strides must be multiples of 8", (long long)p.dim);
  LC_REQUIRE(vec::aligned16(p.gate) && vec::aligned16(p.up) && vec::aligned16(p.out),
             "swiglu: pointers must be 16-byte aligned");
  if (p.n_rows == 0) return;
  swiglu_kernel<<<blocks_for(p.n_rows * p.dim / vec::kVec), kThreads, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("swiglu_kernel rows=%lld dim=%lld", (long long)p.n_rows, (long long)p.dim);
}

void add(void* y, const void* a, const void* b, int64_t n, Stream s) {
  LC_REQUIRE(y && a && b, "add: null pointer");
  LC_REQUIRE(vec::aligned16(y) && vec::aligned16(a) && vec::aligned16(b), "add: pointers must be 16-byte aligned");
  if (n == 0) return;
  add_kernel<<<blocks_for(n / vec::kVec + 1), kThreads, 0, static_cast<cudaStream_t>(s)>>>(
      static_cast<bf16*>(y), static_cast<const bf16*>(a), static_cast<const bf16*>(b), n);
  LC_LAUNCH_CHECK("add_kernel n=%lld", (long long)n);
}

void fill_random_bf16(void* x, int64_t n, uint64_t seed, float scale, Stream s) {
  LC_REQUIRE(x, "fill_random_bf16: null pointer");
  if (n == 0) return;
  fill_random_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(s)>>>(static_cast<bf16*>(x), n, seed,
                                                                                   scale);
  LC_LAUNCH_CHECK("fill_random_kernel n=%lld", (long long)n);
}

}  // namespace longctx::cuda

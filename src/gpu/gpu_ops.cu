// gpu_ops.cu: kernels of gpu_ops.h. Memory-bound one-pass loops; grid-stride, 256 threads.
#include <cuda_bf16.h>

#include "gpu/gpu_ops.h"
#include "kernels/cuda/check.h"

namespace longctx::gpu {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // grid-stride beyond this: enough to fill any current GPU

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

__global__ void bias_add_kernel(bf16* y, const bf16* bias, int64_t n_rows, int64_t dim, int64_t stride) {
  const int64_t n = n_rows * dim;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / dim, j = i - r * dim;
    bf16* p = y + r * stride + j;
    *p = __float2bfloat16_rn(__bfloat162float(*p) + __bfloat162float(bias[j]));
  }
}

__global__ void fill_kernel(bf16* x, int64_t n, float v) {
  const bf16 b = __float2bfloat16_rn(v);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) x[i] = b;
}

// One thread per 16-byte vector (8 bf16) of the K row, and the same of the V row.
constexpr int64_t kVec = 8;
__global__ void kv_append_kernel(const uint4* k_row, const uint4* v_row, bf16* k_cache, bf16* v_cache,
                                 const int32_t* pos, int64_t row_elems, int64_t capacity) {
  const int64_t p = *pos;
  if (p < 0 || p >= capacity) return;
  const int64_t n = row_elems / kVec;
  uint4* kd = reinterpret_cast<uint4*>(k_cache + p * row_elems);
  uint4* vd = reinterpret_cast<uint4*>(v_cache + p * row_elems);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    kd[i] = k_row[i];
    vd[i] = v_row[i];
  }
}

}  // namespace

void kv_append(const KvAppendParams& p, cuda::Stream s) {
  LC_REQUIRE(p.k_row && p.v_row && p.k_cache && p.v_cache && p.pos, "kv_append: null pointer");
  LC_REQUIRE(p.row_elems > 0 && p.row_elems % kVec == 0 && p.capacity > 0,
             "kv_append: row of %lld elements (a positive multiple of %lld) and capacity %lld", (long long)p.row_elems,
             (long long)kVec, (long long)p.capacity);
  kv_append_kernel<<<blocks_for(p.row_elems / kVec), kThreads, 0, static_cast<cudaStream_t>(s)>>>(
      static_cast<const uint4*>(p.k_row), static_cast<const uint4*>(p.v_row), static_cast<bf16*>(p.k_cache),
      static_cast<bf16*>(p.v_cache), p.pos, p.row_elems, p.capacity);
  LC_LAUNCH_CHECK("kv_append_kernel row=%lld capacity=%lld", (long long)p.row_elems, (long long)p.capacity);
}

void bias_add_rows(const BiasAddParams& p, cuda::Stream s) {
  LC_REQUIRE(p.y && p.bias, "bias_add_rows: null pointer");
  LC_REQUIRE(p.n_rows >= 0 && p.dim > 0, "bias_add_rows: bad shape rows=%lld dim=%lld", (long long)p.n_rows,
             (long long)p.dim);
  if (p.n_rows == 0) return;
  bias_add_kernel<<<blocks_for(p.n_rows * p.dim), kThreads, 0, static_cast<cudaStream_t>(s)>>>(
      static_cast<bf16*>(p.y), static_cast<const bf16*>(p.bias), p.n_rows, p.dim, p.stride ? p.stride : p.dim);
  LC_LAUNCH_CHECK("bias_add_kernel rows=%lld dim=%lld", (long long)p.n_rows, (long long)p.dim);
}

void fill_bf16(void* x, int64_t n, float value, cuda::Stream s) {
  LC_REQUIRE(x || n == 0, "fill_bf16: null pointer");
  if (n == 0) return;
  fill_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(s)>>>(static_cast<bf16*>(x), n, value);
  LC_LAUNCH_CHECK("fill_kernel n=%lld", (long long)n);
}

}  // namespace longctx::gpu

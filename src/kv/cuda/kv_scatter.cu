// kv_scatter.cu: kernels of kv_scatter.h (argument checks in kv_scatter.cpp, so no fmt under
// nvcc). Memory-bound grid-stride loops over 8-element vectors (16 bytes of bf16, 8 of e4m3),
// 256 threads a block.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/fp8_vec.cuh"
#include "kv/cuda/kv_scatter_launch.h"

namespace longctx::kv {

namespace {

using bf16 = __nv_bfloat16;
using cuda::fp8vec::blocks_for;
using cuda::fp8vec::dequantize8;
using cuda::fp8vec::kThreads;
using cuda::fp8vec::quantize8;

// Table geometry of a view, by value.
struct Tables {
  const int32_t* table;
  const int32_t* lens;
  int stride;          // max_pages_per_seq
  int page_size;
  int64_t pool_rows;   // n_pages * page_size
};

// Pool row of position pos of batch row b, or -1 when outside the tables or the pool.
__device__ __forceinline__ int64_t pool_row(const Tables& t, int b, int64_t pos) {
  if (pos < 0) return -1;
  const int64_t p = pos / t.page_size;
  if (p >= t.stride) return -1;
  const int64_t page = t.table[int64_t(b) * t.stride + p];
  const int64_t r = page * t.page_size + pos % t.page_size;
  return page < 0 || r >= t.pool_rows ? -1 : r;
}

template <bool kFp8>
__global__ void scatter_kernel(Tables t, const uint4* k_new, const uint4* v_new, void* k_pool, void* v_pool,
                               int first_row, int n_new, int64_t n_rows, int64_t row_vec, float k_inv, float v_inv) {
  const int64_t total = n_rows * row_vec;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / row_vec, c = i % row_vec;
    const int b = first_row + int(r / n_new);
    const int64_t dst = pool_row(t, b, int64_t(t.lens[b]) - n_new + r % n_new);
    if (dst < 0) continue;
    if constexpr (kFp8) {
      static_cast<uint2*>(k_pool)[dst * row_vec + c] = quantize8(k_new[i], k_inv);
      static_cast<uint2*>(v_pool)[dst * row_vec + c] = quantize8(v_new[i], v_inv);
    } else {
      static_cast<uint4*>(k_pool)[dst * row_vec + c] = k_new[i];
      static_cast<uint4*>(v_pool)[dst * row_vec + c] = v_new[i];
    }
  }
}

template <bool kFp8>
__global__ void gather_kernel(Tables t, const void* k_pool, const void* v_pool, uint4* k_out, uint4* v_out, int row,
                              int64_t t0, int64_t n, int64_t row_vec, float k_scale, float v_scale) {
  const int64_t total = n * row_vec;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = i / row_vec, c = i % row_vec;
    const int64_t pos = t0 + j;
    if (pos >= t.lens[row]) continue;
    const int64_t src = pool_row(t, row, pos);
    if (src < 0) continue;
    if constexpr (kFp8) {
      if (k_out) k_out[i] = dequantize8(static_cast<const uint2*>(k_pool)[src * row_vec + c], k_scale);
      if (v_out) v_out[i] = dequantize8(static_cast<const uint2*>(v_pool)[src * row_vec + c], v_scale);
    } else {
      if (k_out) k_out[i] = static_cast<const uint4*>(k_pool)[src * row_vec + c];
      if (v_out) v_out[i] = static_cast<const uint4*>(v_pool)[src * row_vec + c];
    }
  }
}

Tables tables_of(const KvView& v) {
  return Tables{v.block_table, v.seq_lens, v.max_pages_per_seq, v.page_size, v.n_pages * v.page_size};
}

cudaStream_t st(cuda::Stream s) { return static_cast<cudaStream_t>(s); }

}  // namespace

namespace detail {

cudaError_t launch_scatter(const KvScatterParams& p, cuda::Stream s) {
  const int64_t n_rows = int64_t(p.n_seq) * p.n_new, row_vec = p.view.row_elems() / kKvVec;
  const Tables t = tables_of(p.view);
  const auto* kn = static_cast<const uint4*>(p.k_new);
  const auto* vn = static_cast<const uint4*>(p.v_new);
  const unsigned grid = blocks_for(n_rows * row_vec);
  if (p.view.elem == KvElem::fp8_e4m3)
    scatter_kernel<true><<<grid, kThreads, 0, st(s)>>>(t, kn, vn, p.k_pool, p.v_pool, p.first_row, p.n_new, n_rows,
                                                       row_vec, 1.f / p.view.k_scale, 1.f / p.view.v_scale);
  else
    scatter_kernel<false><<<grid, kThreads, 0, st(s)>>>(t, kn, vn, p.k_pool, p.v_pool, p.first_row, p.n_new, n_rows,
                                                        row_vec, 1.f, 1.f);
  return cudaGetLastError();
}

cudaError_t launch_gather(const KvGatherParams& p, cuda::Stream s) {
  const int64_t row_vec = p.view.row_elems() / kKvVec;
  const Tables t = tables_of(p.view);
  auto* ko = static_cast<uint4*>(p.k_out);
  auto* vo = static_cast<uint4*>(p.v_out);
  const unsigned grid = blocks_for(p.n * row_vec);
  if (p.view.elem == KvElem::fp8_e4m3)
    gather_kernel<true><<<grid, kThreads, 0, st(s)>>>(t, p.view.k_pool, p.view.v_pool, ko, vo, p.row, p.t0, p.n,
                                                      row_vec, p.view.k_scale, p.view.v_scale);
  else
    gather_kernel<false><<<grid, kThreads, 0, st(s)>>>(t, p.view.k_pool, p.view.v_pool, ko, vo, p.row, p.t0, p.n,
                                                       row_vec, 1.f, 1.f);
  return cudaGetLastError();
}

}  // namespace detail

}  // namespace longctx::kv

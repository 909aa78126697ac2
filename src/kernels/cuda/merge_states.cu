// merge_states.cu (cuda): exact merge of partial attention results carried with their LSE.
//
// What: lse = log(sum_j exp(lse_j)), o = sum_j exp(lse_j - lse) * o_j over the parts of a row
// (split-KV decode, sink+window+selected pieces of sparse methods, offloaded KV chunks).
// Layout: attention.h (MergeParams). Tested through decode and directly in test_attention.cpp.
// How: one warp per row; each lane owns 4 head dims (float4 loads), loops over parts twice
// (max, then weighted sum). Parts with lse = -inf (no keys) get weight 0; rows with no keys
// at all produce o = 0, lse = -inf instead of NaN.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/check.h"

namespace longctx::cuda {
namespace {

constexpr int kRowsPerBlock = 4;  // one warp per row, 128 threads
constexpr int kMaxHeadDim = 256;  // 32 lanes x 2 float4 each

__global__ void __launch_bounds__(kRowsPerBlock * 32) merge_states_kernel(const MergeParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= p.n_rows) return;
  const float* lse_row = p.lse_part + row * p.lse_row_stride;
  float M = -INFINITY;
  for (int j = 0; j < p.n_parts; ++j) M = fmaxf(M, lse_row[j * p.lse_part_stride]);
  float L = 0.f;
  float4 acc[2] = {make_float4(0.f, 0.f, 0.f, 0.f), make_float4(0.f, 0.f, 0.f, 0.f)};
  const float* o_row = p.o_part + row * p.o_row_stride;
  if (M != -INFINITY) {
    for (int j = 0; j < p.n_parts; ++j) {
      const float w = __expf(lse_row[j * p.lse_part_stride] - M);
      L += w;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int d = (lane + 32 * c) * 4;
        if (d < p.head_dim) {
          const float4 x = *reinterpret_cast<const float4*>(o_row + j * p.o_part_stride + d);
          acc[c].x += w * x.x;
          acc[c].y += w * x.y;
          acc[c].z += w * x.z;
          acc[c].w += w * x.w;
        }
      }
    }
  }
  const float inv = L > 0.f ? 1.f / L : 0.f;
  __nv_bfloat16* o = static_cast<__nv_bfloat16*>(p.o) + row * p.head_dim;
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const int d = (lane + 32 * c) * 4;
    if (d < p.head_dim) {
      __nv_bfloat162 lo = __floats2bfloat162_rn(acc[c].x * inv, acc[c].y * inv);
      __nv_bfloat162 hi = __floats2bfloat162_rn(acc[c].z * inv, acc[c].w * inv);
      uint2 packed;
      packed.x = *reinterpret_cast<uint32_t*>(&lo);
      packed.y = *reinterpret_cast<uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(o + d) = packed;
    }
  }
  if (p.lse && lane == 0) p.lse[row] = L > 0.f ? M + logf(L) : -INFINITY;
}

}  // namespace

void merge_attention_states(const MergeParams& p, Stream s) {
  LC_REQUIRE(p.o_part && p.lse_part && p.o, "merge_attention_states: null pointer");
  LC_REQUIRE(p.head_dim > 0 && p.head_dim % 4 == 0 && p.head_dim <= kMaxHeadDim,
             "merge_attention_states: head_dim %d must be a multiple of 4 and <= %d", p.head_dim, kMaxHeadDim);
  LC_REQUIRE(p.o_row_stride % 4 == 0 && p.o_part_stride % 4 == 0 &&
                 (reinterpret_cast<uintptr_t>(p.o_part) & 15u) == 0,
             "merge_attention_states: o_part and its strides must be 16-byte aligned");
  LC_REQUIRE(p.n_parts > 0, "merge_attention_states: n_parts %d must be positive", p.n_parts);
  if (p.n_rows == 0) return;
  const int64_t blocks = (p.n_rows + kRowsPerBlock - 1) / kRowsPerBlock;
  LC_REQUIRE(blocks <= 0x7fffffff, "merge_attention_states: too many rows");
  merge_states_kernel<<<unsigned(blocks), kRowsPerBlock * 32, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("merge_states_kernel rows=%lld parts=%d d=%d", (long long)p.n_rows, p.n_parts, p.head_dim);
}

}  // namespace longctx::cuda

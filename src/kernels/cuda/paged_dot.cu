// paged_dot.cu: see paged_dot.h.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/paged_dot.h"

namespace longctx::cuda {

namespace {

// Tensor cores: a warp takes 16 gathered rows at a time as the A operand of mma.m16n8k16 (rows x
// head_dim) and the GQA group's g <= 8 queries as B (head_dim x 8 heads), so each key row is read
// once for all its query heads and the products cost a few mma per 16 rows. The dot product does
// not care in which order head_dim is summed, so each thread loads 16 contiguous bytes of rows
// r and r + 8 (eight bf16: two k-steps' worth) and the queries' B fragments use the same
// permutation: thread (r, t) of a k-step pair p holds elements 32p + 8t + [0, 8) of both.
// fp32 queries (q_f32) are split as hi + lo bf16 (two mma), keeping ~16 mantissa bits; a bf16
// query has lo = 0. Why not CUDA-core FMAs: measured on an H200 at 1M candidates
// (bench/bench_tokenselect.cu) four lanes per row with the queries in shared memory streamed keys
// at 2.49 TB/s (limited by the shared-memory reads of the queries), one thread per row at 1.45
// and a warp per row with shuffle reductions at 1.76 (H100).
// A CTA's warps are KV heads (up to kMaxWarps; grid.y covers more) of the same 16-row tiles, so
// the CTA reads its rows' heads, adjacent in the pool, together. CTAs are persistent (a few per
// SM) and each warp loads tile i + 1 while it multiplies tile i, so the K stream never waits on
// a CTA's start or on the queries' fragments.
constexpr int kMaxWarps = 8;
constexpr int kCtasPerSm = 4;

template <int P>
__device__ __forceinline__ void load_tile(uint4 (&raw)[2][P], const __nv_bfloat16* __restrict__ k,
                                          const int32_t* __restrict__ slots, int64_t j0, int64_t n_slot,
                                          int n_kv_head, int kvh, int r, int t) {
  constexpr int D = 32 * P;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t j = j0 + 8 * h + r;
    const uint4* row = reinterpret_cast<const uint4*>(k + (int64_t(slots[j < n_slot ? j : 0]) * n_kv_head + kvh) * D);
#pragma unroll
    for (int p = 0; p < P; ++p) raw[h][p] = j < n_slot ? __ldg(row + 4 * p + t) : make_uint4(0, 0, 0, 0);
  }
}

template <int D, int G>
__global__ void __launch_bounds__(kMaxWarps * 32) paged_dot_kernel(const __nv_bfloat16* __restrict__ q,
                                                                   const float* __restrict__ q_f32,
                                                                   const __nv_bfloat16* __restrict__ k,
                                                                   const int32_t* __restrict__ slots,
                                                                   float* __restrict__ scores, int64_t n_slot,
                                                                   int n_kv_head, const int32_t* __restrict__ skip,
                                                                   const int32_t* __restrict__ n_dev, int32_t n_sub) {
  if (skip && *skip != 0) return;
  if (n_dev) n_slot = min(max(int64_t(*n_dev) - n_sub, int64_t(0)), n_slot);
  constexpr int P = D / 32;  // k-step pairs
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = lane >> 2, t = lane & 3;
  const int kvh = int(blockIdx.y) * kMaxWarps + warp;
  if (kvh >= n_kv_head) return;
  const int64_t n_tiles = (n_slot + 15) / 16;
  int64_t tile = blockIdx.x;
  if (tile >= n_tiles) return;
  uint4 raw[2][P];  // row r / r + 8, pair
  load_tile<P>(raw, k, slots, tile * 16, n_slot, n_kv_head, kvh, r, t);
  // B fragments: head r of the group (zero past g), elements 32p + 8t + [0, 8), as hi and lo.
  uint32_t b_hi[P][4], b_lo[P][4];
#pragma unroll
  for (int p = 0; p < P; ++p)
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      float x0 = 0.f, x1 = 0.f;
      if (r < G) {
        const int64_t e = (int64_t(kvh) * G + r) * D + 32 * p + 8 * t + 2 * w;
        x0 = q_f32 ? q_f32[e] : __bfloat162float(q[e]);
        x1 = q_f32 ? q_f32[e + 1] : __bfloat162float(q[e + 1]);
      }
      const float h0 = __bfloat162float(__float2bfloat16(x0)), h1 = __bfloat162float(__float2bfloat16(x1));
      b_hi[p][w] = mma::pack_bf16(h0, h1);
      b_lo[p][w] = mma::pack_bf16(x0 - h0, x1 - h1);
    }
  for (; tile < n_tiles; tile += gridDim.x) {
    uint4 cur[2][P];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int p = 0; p < P; ++p) cur[h][p] = raw[h][p];
    if (tile + gridDim.x < n_tiles) load_tile<P>(raw, k, slots, (tile + gridDim.x) * 16, n_slot, n_kv_head, kvh, r, t);
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const uint32_t a0[4] = {cur[0][p].x, cur[1][p].x, cur[0][p].y, cur[1][p].y};
      const uint32_t a1[4] = {cur[0][p].z, cur[1][p].z, cur[0][p].w, cur[1][p].w};
      mma::mma_bf16_16816(acc, a0, b_hi[p][0], b_hi[p][1]);
      mma::mma_bf16_16816(acc, a1, b_hi[p][2], b_hi[p][3]);
      mma::mma_bf16_16816(acc, a0, b_lo[p][0], b_lo[p][1]);
      mma::mma_bf16_16816(acc, a1, b_lo[p][2], b_lo[p][3]);
    }
    // acc: rows r (0, 1) and r + 8 (2, 3) for heads 2t and 2t + 1.
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int head = 2 * t + (c & 1);
      const int64_t j = tile * 16 + r + (c >> 1) * 8;
      if (head < G && j < n_slot) scores[(int64_t(kvh) * G + head) * n_slot + j] = acc[c];
    }
  }
}

int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev);
    return v > 0 ? v : 1;
  }();
  return n;
}

template <int D, int G>
void launch(const PagedDotParams& p, cudaStream_t s) {
  const int warps = p.n_kv_head < kMaxWarps ? p.n_kv_head : kMaxWarps;
  const int64_t n_tiles = (p.n_slot + 15) / 16;
  const unsigned head_groups = unsigned((p.n_kv_head + kMaxWarps - 1) / kMaxWarps);
  const int64_t ctas = std::min<int64_t>(n_tiles, std::max<int64_t>(1, int64_t(sm_count()) * kCtasPerSm / head_groups));
  paged_dot_kernel<D, G><<<dim3(unsigned(ctas), head_groups), warps * 32, 0, s>>>(
      static_cast<const __nv_bfloat16*>(p.q), p.q_f32, static_cast<const __nv_bfloat16*>(p.k_pool), p.slots,
      p.scores, p.n_slot, p.n_kv_head, p.skip, p.n_dev, p.n_sub);
}

template <int D>
void dispatch_g(const PagedDotParams& p, int g, cudaStream_t s) {
  switch (g) {
    case 1: return launch<D, 1>(p, s);
    case 2: return launch<D, 2>(p, s);
    case 4: return launch<D, 4>(p, s);
    case 7: return launch<D, 7>(p, s);
    case 8: return launch<D, 8>(p, s);
    default: LC_REQUIRE(false, "paged_dot: GQA group %d is not built (1, 2, 4, 7, 8)", g);
  }
}

}  // namespace

void paged_dot(const PagedDotParams& p, Stream s) {
  LC_REQUIRE(p.q || p.q_f32, "paged_dot: no query");
  LC_REQUIRE(p.n_head > 0 && p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0, "paged_dot: heads %d / %d", p.n_head, p.n_kv_head);
  LC_REQUIRE(p.head_dim == 64 || p.head_dim == 128, "paged_dot: head_dim %d (64 or 128)", p.head_dim);
  if (p.n_slot <= 0) return;
  const auto st = static_cast<cudaStream_t>(s);
  const int g = p.n_head / p.n_kv_head;
  if (p.head_dim == 128) dispatch_g<128>(p, g, st);
  else dispatch_g<64>(p, g, st);
  LC_LAUNCH_CHECK("paged_dot (n_slot %lld, heads %d/%d, d %d)", (long long)p.n_slot, p.n_head, p.n_kv_head, p.head_dim);
}

}  // namespace longctx::cuda

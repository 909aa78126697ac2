// paged_dot.cu: see paged_dot.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/fp8_vec.cuh"
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

// Keys per thread and row: bf16 loads eight keys (16 bytes) per k-step pair p, at elements
// 32p + 8t + [0, 8); fp8 loads sixteen (16 bytes) per two pairs, at 64(p/2) + 16t + [0, 16), pair p
// taking the half p % 2. kLoads = 16-byte loads per row and thread. A tile is 16 rows for bf16
// and 32 for fp8 (two 16-row mma blocks), so a warp keeps the same 4 KB of keys in flight with
// half-size rows (measured on an H100 at 1M: 16-row fp8 tiles streamed 2.3 TB/s of keys).
template <bool FP8, int P>
struct KeyTile {
  static constexpr int kLoads = FP8 ? P / 2 : P;
  static constexpr int kRowBytes = (FP8 ? 1 : 2) * 32 * P;
  static constexpr int kBlocks = FP8 ? 2 : 1;  // 16-row mma blocks
  static constexpr int kRows = 16 * kBlocks;
  uint4 raw[2 * kBlocks][kLoads];  // rows r, r + 8, r + 16, r + 24
};

template <bool FP8>
__device__ __forceinline__ int pair_elem(int p, int t) {
  return FP8 ? 64 * (p / 2) + 16 * t + 8 * (p % 2) : 32 * p + 8 * t;
}

template <bool FP8, int P>
__device__ __forceinline__ void load_tile(KeyTile<FP8, P>& kt, const uint8_t* __restrict__ k,
                                          const int32_t* __restrict__ slots, int64_t j0, int64_t n_slot,
                                          int n_kv_head, int kvh, int t) {
  using T = KeyTile<FP8, P>;
  const int r = (threadIdx.x & 31) >> 2;
#pragma unroll
  for (int h = 0; h < 2 * T::kBlocks; ++h) {
    const int64_t j = j0 + 8 * h + r;
    const uint4* row =
        reinterpret_cast<const uint4*>(k + (int64_t(slots[j < n_slot ? j : 0]) * n_kv_head + kvh) * T::kRowBytes);
#pragma unroll
    for (int l = 0; l < T::kLoads; ++l) kt.raw[h][l] = j < n_slot ? __ldg(row + 4 * l + t) : make_uint4(0, 0, 0, 0);
  }
}

// The A fragments (a0: elements 0..3 of the pair's eight, a1: 4..7) of pair p in 16-row block b:
// bf16 as loaded, fp8 widened to fp16 pairs.
template <bool FP8, int P>
__device__ __forceinline__ void a_frags(const KeyTile<FP8, P>& kt, int b, int p, uint32_t (&a0)[4], uint32_t (&a1)[4]) {
  uint32_t w[2][4];  // row r / r + 8 of the block: elements (0,1) (2,3) (4,5) (6,7)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if constexpr (FP8) {
      const uint4& v = kt.raw[2 * b + h][p / 2];
      const uint32_t lo = p % 2 ? v.z : v.x, hi = p % 2 ? v.w : v.y;
      const uint2 l4 = fp8vec::e4m3x4_to_f16x4(lo), h4 = fp8vec::e4m3x4_to_f16x4(hi);
      w[h][0] = l4.x, w[h][1] = l4.y, w[h][2] = h4.x, w[h][3] = h4.y;
    } else {
      const uint4& v = kt.raw[2 * b + h][p];
      w[h][0] = v.x, w[h][1] = v.y, w[h][2] = v.z, w[h][3] = v.w;
    }
  }
  a0[0] = w[0][0], a0[1] = w[1][0], a0[2] = w[0][1], a0[3] = w[1][1];
  a1[0] = w[0][2], a1[1] = w[1][2], a1[2] = w[0][3], a1[3] = w[1][3];
}

template <bool FP8>
__device__ __forceinline__ void mma16816(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (FP8) mma::mma_f16_16816(acc, a, b0, b1);
  else mma::mma_bf16_16816(acc, a, b0, b1);
}

// The running (max, sum of exp(x - max)) of one head's scores (the soft vote's first pass).
struct MaxSum {
  float m = -INFINITY, s = 0.f;
  __device__ void add(float x0, float x1) {
    const float mn = fmaxf(m, fmaxf(x0, x1));
    if (mn == -INFINITY) return;
    s = s * __expf(m - mn) + __expf(x0 - mn) + __expf(x1 - mn);
    m = mn;
  }
  __device__ void merge(float om, float os) {
    const float mn = fmaxf(m, om);
    if (mn == -INFINITY) return;
    s = s * __expf(m - mn) + os * __expf(om - mn);
    m = mn;
  }
};

// A score as stored: fp32, or fp16 rounded to nearest and kept finite (|s| <= 65504, so the
// vote's exp(s - max) never sees inf - inf).
template <typename S>
__device__ __forceinline__ S to_score(float x) {
  if constexpr (std::is_same_v<S, __half>) return __float2half_rn(fminf(fmaxf(x, -65504.f), 65504.f));
  else return x;
}

template <int D, int G, bool FP8, typename S>
__global__ void __launch_bounds__(kMaxWarps * 32) paged_dot_kernel(const __nv_bfloat16* __restrict__ q,
                                                                   const float* __restrict__ q_f32,
                                                                   const uint8_t* __restrict__ k, float k_scale,
                                                                   const int32_t* __restrict__ slots,
                                                                   S* __restrict__ scores, int64_t n_slot,
                                                                   int n_kv_head, const int32_t* __restrict__ skip,
                                                                   const int32_t* __restrict__ n_dev, int32_t n_sub,
                                                                   float* __restrict__ head_stats) {
  if (skip && *skip != 0) return;
  if (n_dev) n_slot = min(max(int64_t(*n_dev) - n_sub, int64_t(0)), n_slot);
  constexpr int P = D / 32;  // k-step pairs
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = lane >> 2, t = lane & 3;
  const int kvh = int(blockIdx.y) * kMaxWarps + warp;
  if (kvh >= n_kv_head) return;
  using Tile = KeyTile<FP8, P>;
  const int64_t n_tiles = (n_slot + Tile::kRows - 1) / Tile::kRows;
  int64_t tile = blockIdx.x;
  MaxSum st[2];  // heads 2t, 2t + 1
  if (tile < n_tiles) {
    Tile next;
    load_tile<FP8, P>(next, k, slots, tile * Tile::kRows, n_slot, n_kv_head, kvh, t);
    // B fragments: head r of the group (zero past g), the pair's elements, as hi and lo parts
    // (bf16, or fp16 against fp8 keys).
    uint32_t b_hi[P][4], b_lo[P][4];
#pragma unroll
    for (int p = 0; p < P; ++p)
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        float x0 = 0.f, x1 = 0.f;
        if (r < G) {
          const int64_t e = (int64_t(kvh) * G + r) * D + pair_elem<FP8>(p, t) + 2 * w;
          x0 = q_f32 ? q_f32[e] : __bfloat162float(q[e]);
          x1 = q_f32 ? q_f32[e + 1] : __bfloat162float(q[e + 1]);
        }
        if constexpr (FP8) {
          const float h0 = __half2float(__float2half_rn(x0)), h1 = __half2float(__float2half_rn(x1));
          b_hi[p][w] = mma::pack_f16(h0, h1);
          b_lo[p][w] = mma::pack_f16(x0 - h0, x1 - h1);
        } else {
          const float h0 = __bfloat162float(__float2bfloat16(x0)), h1 = __bfloat162float(__float2bfloat16(x1));
          b_hi[p][w] = mma::pack_bf16(h0, h1);
          b_lo[p][w] = mma::pack_bf16(x0 - h0, x1 - h1);
        }
      }
    for (; tile < n_tiles; tile += gridDim.x) {
      const Tile cur = next;
      if (tile + gridDim.x < n_tiles)
        load_tile<FP8, P>(next, k, slots, (tile + gridDim.x) * Tile::kRows, n_slot, n_kv_head, kvh, t);
#pragma unroll
      for (int b = 0; b < Tile::kBlocks; ++b) {
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int p = 0; p < P; ++p) {
          uint32_t a0[4], a1[4];
          a_frags<FP8, P>(cur, b, p, a0, a1);
          mma16816<FP8>(acc, a0, b_hi[p][0], b_hi[p][1]);
          mma16816<FP8>(acc, a1, b_hi[p][2], b_hi[p][3]);
          mma16816<FP8>(acc, a0, b_lo[p][0], b_lo[p][1]);
          mma16816<FP8>(acc, a1, b_lo[p][2], b_lo[p][3]);
        }
        // acc: rows r (0, 1) and r + 8 (2, 3) of the block for heads 2t and 2t + 1.
        const int64_t j = tile * Tile::kRows + 16 * b + r;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          if (FP8) acc[c] *= k_scale;
          const S x = to_score<S>(acc[c]);
          acc[c] = float(x);  // the stats below describe the scores as stored
          const int head = 2 * t + (c & 1);
          const int64_t jc = j + (c >> 1) * 8;
          if (head < G && jc < n_slot) scores[(int64_t(kvh) * G + head) * n_slot + jc] = x;
        }
        if (head_stats)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            st[e].add(j < n_slot ? acc[e] : -INFINITY, j + 8 < n_slot ? acc[2 + e] : -INFINITY);
      }
    }
  }
  if (!head_stats) return;
  // Fold the eight rows r of each t (lanes t, t + 4, ..); lane t writes heads 2t, 2t + 1.
#pragma unroll
  for (int e = 0; e < 2; ++e)
    for (int off = 4; off < 32; off <<= 1)
      st[e].merge(__shfl_xor_sync(0xffffffffu, st[e].m, off), __shfl_xor_sync(0xffffffffu, st[e].s, off));
  if (r == 0)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int head = 2 * t + e;
      if (head < G) {
        float* out = head_stats + ((int64_t(kvh) * G + head) * gridDim.x + blockIdx.x) * 2;
        out[0] = st[e].m;
        out[1] = st[e].s;
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

unsigned head_groups(int n_kv_head) { return unsigned((n_kv_head + kMaxWarps - 1) / kMaxWarps); }

template <int D, int G, typename S>
void launch_s(const PagedDotParams& p, cudaStream_t s) {
  const int warps = p.n_kv_head < kMaxWarps ? p.n_kv_head : kMaxWarps;
  const dim3 grid(unsigned(paged_dot_stats_parts(p.n_slot, p.n_kv_head)), head_groups(p.n_kv_head));
  const auto* q = static_cast<const __nv_bfloat16*>(p.q);
  const auto* k = static_cast<const uint8_t*>(p.k_pool);
  auto* scores = static_cast<S*>(p.scores);
  if (p.k_elem == PagedDotKeys::fp8_e4m3)
    paged_dot_kernel<D, G, true, S><<<grid, warps * 32, 0, s>>>(q, p.q_f32, k, p.k_scale, p.slots, scores, p.n_slot,
                                                                p.n_kv_head, p.skip, p.n_dev, p.n_sub, p.head_stats);
  else
    paged_dot_kernel<D, G, false, S><<<grid, warps * 32, 0, s>>>(q, p.q_f32, k, 1.f, p.slots, scores, p.n_slot,
                                                                 p.n_kv_head, p.skip, p.n_dev, p.n_sub, p.head_stats);
}

template <int D, int G>
void launch(const PagedDotParams& p, cudaStream_t s) {
  if (p.score_elem == ScoreElem::f16) launch_s<D, G, __half>(p, s);
  else launch_s<D, G, float>(p, s);
}

template <int D>
void dispatch_g(const PagedDotParams& p, int g, cudaStream_t s) {
  switch (g) {
    case 1: return launch<D, 1>(p, s);
    case 2: return launch<D, 2>(p, s);
    case 3: return launch<D, 3>(p, s);
    case 4: return launch<D, 4>(p, s);
    case 5: return launch<D, 5>(p, s);
    case 6: return launch<D, 6>(p, s);
    case 7: return launch<D, 7>(p, s);
    case 8: return launch<D, 8>(p, s);
    default: LC_REQUIRE(false, "paged_dot: GQA group %d (1 to 8: one mma's 8 columns)", g);
  }
}

}  // namespace

int paged_dot_max_stats_parts() { return sm_count() * kCtasPerSm; }

int paged_dot_stats_parts(int64_t n_slot, int n_kv_head) {
  const int64_t n_tiles = (n_slot + 15) / 16;
  return int(std::max<int64_t>(1, std::min<int64_t>(n_tiles, std::max<int64_t>(1, paged_dot_max_stats_parts() / head_groups(n_kv_head)))));
}

void paged_dot(const PagedDotParams& p, Stream s) {
  LC_REQUIRE(p.q || p.q_f32, "paged_dot: no query");
  LC_REQUIRE(p.n_head > 0 && p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0, "paged_dot: heads %d / %d", p.n_head, p.n_kv_head);
  LC_REQUIRE(p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256, "paged_dot: head_dim %d (64, 128 or 256)",
             p.head_dim);
  LC_REQUIRE(p.k_elem == PagedDotKeys::bf16 || p.k_scale > 0.f, "paged_dot: fp8 key scale %g", double(p.k_scale));
  if (p.n_slot <= 0) return;
  const auto st = static_cast<cudaStream_t>(s);
  const int g = p.n_head / p.n_kv_head;
  if (p.head_dim == 256) dispatch_g<256>(p, g, st);
  else if (p.head_dim == 128) dispatch_g<128>(p, g, st);
  else dispatch_g<64>(p, g, st);
  LC_LAUNCH_CHECK("paged_dot (n_slot %lld, heads %d/%d, d %d)", (long long)p.n_slot, p.n_head, p.n_kv_head, p.head_dim);
}

}  // namespace longctx::cuda

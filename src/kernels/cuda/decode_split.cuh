// decode_split.cuh (cuda, internal): the split-KV decode mainloop shared by dense decode
// (attention_decode.cu) and sparse decode (sparse_decode.cu).
//
// What: one CTA = (KV split, unit of query heads sharing one KV head and one key set, sequence).
// It streams its split's 64-key tiles of K and V, runs the online softmax, writes one fp32
// partial (O, LSE) per query head, and the last CTA of each (sequence, unit) to finish merges
// all splits exactly by log-sum-exp (the math of merge_states.cu), so a decode step is one launch.
// Which keys a CTA attends, and where they sit in the pool, is the key source's business
// (template parameter Keys, described at DecodeArgs): dense decode walks a sequence's keys in
// order, sparse decode walks a gathered list of pool rows. Everything else is this file's, once.
// How: the unit's query heads (<= 16) form the 16 rows of one mma tile, so every K/V byte is read
// once for all heads that share it. Tiles stream through a cp.async pipeline; each of 4 key groups
// owns 16 keys of a tile and keeps its own online-softmax state (mma.sync m16n8k16): one warp per
// group, two at head_dim 256 (each accumulating half of O's columns; DecodeTile says why). The
// groups' states are combined through shared memory. fp8 e4m3 tiles are widened to fp16 in shared memory.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/fa2_tile.cuh"
#include "kernels/cuda/fp8_vec.cuh"
#include "kernels/cuda/mma.cuh"

namespace longctx::cuda::decode_split {

using bf16 = __nv_bfloat16;
using namespace mma;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kMaxGroup = 16;  // query heads per CTA that fit one m16 tile

template <int D, bool kFp8>
struct DecodeTile {
  // 4 key groups of 16 keys each. d = 256: two warps per key group, each accumulating P V over
  // half of the head dim (both compute the group's S): 8 warps per CTA instead of 4 and 64 O
  // registers per thread instead of 128. One CTA fits an SM at d = 256 (the ring is 192 KB), and
  // with 4 warps the SM had one warp per scheduler: every ldmatrix -> mma and cp.async wait was
  // exposed (69% of copy bandwidth at 128K keys on an H200, bf16 and fp8 alike).
  static constexpr int kKeyGroups = 4;
  static constexpr int kDimSplit = D == 256 ? 2 : 1;
  static constexpr int kDw = D / kDimSplit;              // O columns per warp
  static constexpr int kWarps = kKeyGroups * kDimSplit;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kKeysPerWarp = 16;
  static constexpr int kBlockN = kKeyGroups * kKeysPerWarp;  // keys per pipeline stage
  // bf16: 3 stages, 2 tiles in flight while one computes (~64 KB/CTA at d=128), 2 CTAs/SM.
  // fp8: 2 stages leave room for 3 CTAs/SM (64 KB each with the fp16 widening tiles).
  static constexpr int kStages = kFp8 ? 2 : 3;
  static constexpr int kElem = kFp8 ? 1 : 2;              // bytes per stored K/V element
  static constexpr int kChunks = D * kElem / 16;          // 16-byte chunks per stored row
  static constexpr int kSmemKV = kBlockN * D * kElem;     // one stored K (or V) tile
  static constexpr int kSmemPipe = 2 * kStages * kSmemKV;
  // fp8: each tile is widened to fp16 (same swizzled layout as bf16) before ldmatrix.
  static constexpr int kSmemConv = kFp8 ? 2 * kBlockN * D * 2 : 0;
  static constexpr int kSmemCombine = kKeyGroups * 16 * (D + 2) * 4;  // per-group O [16][D] + max, sum
  static constexpr int kSmemMerge = kMaxGroup * 512 * 4 + 2 * kMaxGroup * 4;  // split weights
  static constexpr int kSmem = std::max({kSmemPipe + kSmemConv, kSmemCombine, kSmemMerge});
};

// What every split kernel needs besides its key source (Keys below).
struct DecodeArgs {
  const bf16* q;    // [n_seq][n_head][D]
  const void* k;    // pool base, bf16 or fp8 e4m3; rows of ld_row elements (all KV heads)
  const void* v;
  float* o_part;    // [n_seq * n_head][n_splits][D]
  float* lse_part;  // [n_seq * n_head][n_splits]
  int* counters;    // [n_seq * n_units] finished splits; zero between calls (self-resetting)
  bf16* o;          // [n_seq * n_head][D]
  float* lse;       // [n_seq * n_head], optional
  int n_head;
  int group;        // query heads per KV head
  int cta_heads;    // query heads per CTA (<= group, all of one KV head and one key set)
  int n_splits;
  float scale_log2;  // softmax scale * log2(e) (* k_scale for fp8 KV)
  float v_scale;     // fp8 KV: V's dequantisation scale, applied to each split's O
  int64_t window;    // > 0: a row attends only its last `window` keys (its tiles only); 0: all
};

// Keys: where the attended keys of a CTA's rows come from. A key source is a plain struct with
//   int64_t n_keys(int b, int h0)            keys attended by sequence b's query heads h0.. (the CTA's)
//   int split_tiles(int64_t n_tiles, int n_splits)   64-key tiles per split (>= 1)
//   Tile tile(int b, int h0, int64_t n0)     the 64-key tile starting at key n0 (in the source's
//                                            order), with int64_t Tile::elem(int r): the element
//                                            offset of key n0 + r's pool row (before the KV head
//                                            offset), called only for n0 + r < n_keys.
// attention_decode.cu (all keys of a sequence, contiguous or paged) and sparse_decode.cu (a
// gathered list of pool rows) each define one; the mainloop, the online softmax and the merge are
// this file's, shared.
template <int D, bool kFp8, class Keys>
__global__ void __launch_bounds__(DecodeTile<D, kFp8>::kThreads)
    attn_decode_split_kernel(const DecodeArgs a, const Keys keys) {
  using T = DecodeTile<D, kFp8>;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sK = smem_u32(smem);
  const uint32_t sV = sK + T::kStages * T::kSmemKV;
  const uint32_t sKc = sK + T::kSmemPipe;        // fp8 path: fp16 K tile
  const uint32_t sVc = sKc + T::kBlockN * D * 2;  // fp8 path: fp16 V tile

  // CTA = (split, unit of cta_heads query heads, sequence).
  const int split = blockIdx.x, unit = blockIdx.y, b = blockIdx.z;
  const int h0 = unit * a.cta_heads, kvh = h0 / a.group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // Warp = (key group: 16 keys of each tile, dim part: O columns col0 .. col0 + kDw - 1).
  const int key_group = warp % T::kKeyGroups, col0 = (warp / T::kKeyGroups) * T::kDw;
  const int g = lane >> 2, tq = lane & 3;
  const int64_t n_kv = keys.n_keys(b, h0);  // keys of this CTA's rows
  // Sliding window: keys [key_lo, n_kv), streamed from the tile holding key_lo.
  const int64_t key_lo = a.window > 0 ? max(int64_t(0), n_kv - a.window) : 0;
  const int64_t tile_lo = key_lo / T::kBlockN;
  const int64_t n_tiles_total = (n_kv + T::kBlockN - 1) / T::kBlockN - tile_lo;
  const int tiles_per_split = keys.split_tiles(n_tiles_total, a.n_splits);
  // Splits that hold tiles of this row: the others leave at once, and the merge reads only these.
  // At least one, so that a row without keys is still written (O = 0, LSE = -inf).
  const int n_active =
      max(1, int(min(int64_t(a.n_splits), (n_tiles_total + tiles_per_split - 1) / tiles_per_split)));
  if (split >= n_active) return;
  const int64_t t_begin = tile_lo + int64_t(split) * tiles_per_split;  // tile indices in the key order
  const int64_t t_end = min(tile_lo + n_tiles_total, t_begin + tiles_per_split);
  const int n_tiles = t_end > t_begin ? int(t_end - t_begin) : 0;
  const uint8_t* kg = static_cast<const uint8_t*>(a.k) + int64_t(kvh) * D * T::kElem;
  const uint8_t* vg = static_cast<const uint8_t*>(a.v) + int64_t(kvh) * D * T::kElem;

  auto load_kv = [&](int i, int stage) {  // i: tile index within this split
    const int64_t n0 = (t_begin + i) * T::kBlockN;
    const auto tile = keys.tile(b, h0, n0);
#pragma unroll
    for (int j = 0; j < T::kBlockN * T::kChunks / T::kThreads; ++j) {
      const int idx = tid + j * T::kThreads;
      const int r = idx / T::kChunks, c = idx % T::kChunks;
      const bool ok = n0 + r < n_kv;
      const int64_t off = ok ? tile.elem(r) * T::kElem + c * 16 : 0;  // bytes
      // A key source whose V rows do not sit at its K rows' offsets (KV offload: a missed key is
      // read from host memory, whose K and V pools are not as far apart as the GPU banks) gives
      // its Tile a v_elem(r); the others read V at K's offset (the same code as without the hook).
      int64_t voff = off;
      if constexpr (requires { tile.v_elem(r); }) voff = ok ? tile.v_elem(r) * T::kElem + c * 16 : 0;
      // bf16 tiles go straight to the swizzled ldmatrix layout; fp8 tiles land row-major and are
      // widened below.
      const uint32_t dst = kFp8 ? uint32_t(r * D + c * 16) : swz<D>(r, c);
      cp_async16(sK + stage * T::kSmemKV + dst, ok ? kg + off : a.k, ok ? 16 : 0);
      cp_async16(sV + stage * T::kSmemKV + dst, ok ? vg + voff : a.v, ok ? 16 : 0);
    }
  };
#pragma unroll
  for (int i = 0; i < T::kStages - 1; ++i) {
    if (i < n_tiles) load_kv(i, i);
    cp_async_commit();
  }

  // Q fragments straight from global memory: row r of the tile = query head h0 + r.
  uint32_t qf[D / 16][4];
  {
    const bf16* qb = a.q + (int64_t(b) * a.n_head + h0) * D;
    const bool lo_ok = g < a.cta_heads, hi_ok = g + 8 < a.cta_heads;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int c0 = kk * 16 + 2 * tq;
      qf[kk][0] = lo_ok ? *reinterpret_cast<const uint32_t*>(qb + g * D + c0) : 0u;
      qf[kk][1] = hi_ok ? *reinterpret_cast<const uint32_t*>(qb + (g + 8) * D + c0) : 0u;
      qf[kk][2] = lo_ok ? *reinterpret_cast<const uint32_t*>(qb + g * D + c0 + 8) : 0u;
      qf[kk][3] = hi_ok ? *reinterpret_cast<const uint32_t*>(qb + (g + 8) * D + c0 + 8) : 0u;
      if constexpr (kFp8) {  // the fp8 path multiplies in fp16
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&qf[kk][i]));
          qf[kk][i] = pack_f16(f.x, f.y);
        }
      }
    }
  }

  float oacc[T::kDw / 8][4];  // O columns col0 .. col0 + kDw - 1 of the 16 rows
#pragma unroll
  for (int i = 0; i < T::kDw / 8; ++i) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.f;
  float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.f, 0.f};

  for (int i = 0; i < n_tiles; ++i) {
    const int st = i % T::kStages;
    if (i + T::kStages - 1 < n_tiles) load_kv(i + T::kStages - 1, (i + T::kStages - 1) % T::kStages);
    cp_async_commit();
    cp_async_wait<T::kStages - 1>();
    __syncthreads();

    uint32_t kbase = sK + st * T::kSmemKV, vbase = sV + st * T::kSmemKV;
    if constexpr (kFp8) {
      // Widen the e4m3 tiles to fp16 in the swizzled layout the ldmatrix code below reads.
      for (int idx = tid; idx < T::kBlockN * T::kChunks; idx += T::kThreads) {
        const int r = idx / T::kChunks, c = idx % T::kChunks;  // 16 fp8 = dims c*16 .. c*16+15
#pragma unroll
        for (int kv = 0; kv < 2; ++kv) {
          const uint4 raw = *reinterpret_cast<const uint4*>(smem + (kv ? sV - sK : 0) + st * T::kSmemKV + r * D +
                                                            c * 16);
          const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
          uint32_t h[8];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const uint2 f = fp8vec::e4m3x4_to_f16x4(w[i]);
            h[2 * i] = f.x;
            h[2 * i + 1] = f.y;
          }
          const uint32_t dst = (kv ? sVc : sKc) - sK;
          *reinterpret_cast<uint4*>(smem + dst + swz<D>(r, 2 * c)) = make_uint4(h[0], h[1], h[2], h[3]);
          *reinterpret_cast<uint4*>(smem + dst + swz<D>(r, 2 * c + 1)) = make_uint4(h[4], h[5], h[6], h[7]);
        }
      }
      __syncthreads();
      kbase = sKc;
      vbase = sVc;
    }
    const int kr = key_group * T::kKeysPerWarp;  // this warp's 16 keys within the tile
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4(kbase + swz<D>(kr + (lane & 7) + (lane >> 4) * 8, 2 * kk + ((lane >> 3) & 1)), b0, b1, b2, b3);
      if constexpr (kFp8) {
        mma_f16_16816(s[0], qf[kk], b0, b1);
        mma_f16_16816(s[1], qf[kk], b2, b3);
      } else {
        mma_bf16_16816(s[0], qf[kk], b0, b1);
        mma_bf16_16816(s[1], qf[kk], b2, b3);
      }
    }
    const int64_t key0 = (t_begin + i) * T::kBlockN + kr;
    const bool need_mask = key0 + T::kKeysPerWarp > n_kv || key0 < key_lo;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * a.scale_log2;
        const int64_t key = key0 + nt * 8 + 2 * tq + (e & 1);
        if (need_mask && (key >= n_kv || key < key_lo)) x = -INFINITY;
        s[nt][e] = x;
      }
    fa2::softmax_update<T::kDw>(s, m_r, l_r, oacc);
    auto pack = [](float x, float y) { return kFp8 ? pack_f16(x, y) : pack_bf16(x, y); };
    const uint32_t pa[4] = {pack(s[0][0], s[0][1]), pack(s[0][2], s[0][3]), pack(s[1][0], s[1][1]),
                            pack(s[1][2], s[1][3])};
#pragma unroll
    for (int dp = 0; dp < T::kDw / 16; ++dp) {
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4_trans(vbase + swz<D>(kr + (lane & 7) + ((lane >> 3) & 1) * 8, col0 / 8 + 2 * dp + (lane >> 4)), b0,
                        b1, b2, b3);
      if constexpr (kFp8) {
        mma_f16_16816(oacc[2 * dp], pa, b0, b1);
        mma_f16_16816(oacc[2 * dp + 1], pa, b2, b3);
      } else {
        mma_bf16_16816(oacc[2 * dp], pa, b0, b1);
        mma_bf16_16816(oacc[2 * dp + 1], pa, b2, b3);
      }
    }
    __syncthreads();  // stage st (and the fp16 tiles) are refilled by a later iteration
  }
  cp_async_wait<0>();
  __syncthreads();

  // Combine the 4 key groups' states: sO [group][16][D] unnormalised (each warp writes its
  // columns), sM/sL [group][16] (the group's warps hold the same m and l).
  float* sO = reinterpret_cast<float*>(smem);
  float* sM = sO + T::kKeyGroups * 16 * D;
  float* sL = sM + T::kKeyGroups * 16;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_r[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    l_r[r] = l;
  }
#pragma unroll
  for (int dt = 0; dt < T::kDw / 8; ++dt) {
    float* row_lo = sO + (key_group * 16 + g) * D + col0 + dt * 8 + 2 * tq;
    float* row_hi = row_lo + 8 * D;
    row_lo[0] = oacc[dt][0];
    row_lo[1] = oacc[dt][1];
    row_hi[0] = oacc[dt][2];
    row_hi[1] = oacc[dt][3];
  }
  if (tq == 0 && col0 == 0) {
    sM[key_group * 16 + g] = m_r[0];
    sL[key_group * 16 + g] = l_r[0];
    sM[key_group * 16 + g + 8] = m_r[1];
    sL[key_group * 16 + g + 8] = l_r[1];
  }
  __syncthreads();
  for (int idx = tid; idx < a.cta_heads * D; idx += T::kThreads) {
    const int r = idx / D, d = idx % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < T::kKeyGroups; ++w) M = fmaxf(M, sM[w * 16 + r]);
    float L = 0.f, acc = 0.f;
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < T::kKeyGroups; ++w) {
        const float wgt = exp2f(sM[w * 16 + r] - M);
        L += sL[w * 16 + r] * wgt;
        acc += sO[(w * 16 + r) * D + d] * wgt;
      }
    }
    const int64_t row = int64_t(b) * a.n_head + h0 + r;
    a.o_part[(row * a.n_splits + split) * D + d] = L > 0.f ? acc / L * a.v_scale : 0.f;
    if (d == 0) a.lse_part[row * a.n_splits + split] = L > 0.f ? M * kLn2 + logf(L) : -INFINITY;
  }

  // Fused merge: the last CTA of this (sequence, unit) to finish combines all splits, so a
  // decode step is one launch. Classic threadfence reduction: publish the partials, count, and
  // the CTA that brings the counter to n_active resets it and reads everyone's partials.
  __shared__ int s_last;
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    int* ctr = a.counters + int64_t(b) * gridDim.y + unit;
    s_last = atomicAdd(ctr, 1) == n_active - 1;
    if (s_last) atomicExch(ctr, 0);  // every other split has counted: safe to reset for the next call
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  // Per-row weights exp(lse_j - M) in shared memory (the pipeline buffers are free now).
  float* sW = reinterpret_cast<float*>(smem);  // [cta_heads][n_splits]
  float* sInvL = sW + a.cta_heads * a.n_splits;  // [cta_heads]
  float* sLse = sInvL + kMaxGroup;             // [cta_heads]
  for (int r = warp; r < a.cta_heads; r += T::kWarps) {
    const int64_t row = int64_t(b) * a.n_head + h0 + r;
    const float* lp = a.lse_part + row * a.n_splits;
    float M = -INFINITY;
    for (int j = lane; j < n_active; j += 32) M = fmaxf(M, __ldcg(lp + j));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
    float L = 0.f;
    for (int j = lane; j < n_active; j += 32) {
      const float w = M == -INFINITY ? 0.f : __expf(__ldcg(lp + j) - M);
      sW[r * a.n_splits + j] = w;
      L += w;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) L += __shfl_xor_sync(0xffffffffu, L, off);
    if (lane == 0) {
      sInvL[r] = L > 0.f ? 1.f / L : 0.f;
      sLse[r] = L > 0.f ? M + logf(L) : -INFINITY;
    }
  }
  __syncthreads();
  for (int idx = tid; idx < a.cta_heads * D; idx += T::kThreads) {
    const int r = idx / D, d = idx % D;
    const int64_t row = int64_t(b) * a.n_head + h0 + r;
    const float* op = a.o_part + row * a.n_splits * D + d;
    float acc = 0.f;
    for (int j = 0; j < n_active; ++j) acc += sW[r * a.n_splits + j] * __ldcg(op + int64_t(j) * D);
    a.o[row * D + d] = __float2bfloat16_rn(acc * sInvL[r]);
    if (d == 0 && a.lse) a.lse[row] = sLse[r];
  }
}


// CTAs of the split kernel that fit one SM (shared memory bound); also raises the smem limit.
template <int D, bool kFp8, class Keys>
int ctas_per_sm() {
  using T = DecodeTile<D, kFp8>;
  static const int n = [] {
    LC_CUDA_CHECK(cudaFuncSetAttribute(attn_decode_split_kernel<D, kFp8, Keys>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmem),
                  "attn_decode_split_kernel<d=%d>: raising dynamic shared memory to %d bytes", D, T::kSmem);
    int blocks = 0;
    LC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, attn_decode_split_kernel<D, kFp8, Keys>,
                                                                T::kThreads, T::kSmem),
                  "attn_decode_split_kernel<d=%d>: occupancy query", D);
    return std::max(1, blocks);
  }();
  return n;
}

// Head dims a key source is compiled for: 64, 128 and 256, plus (bf16 only) 16 and 32 when the
// source says `static constexpr bool kAllHeadDims = true` (dense decode: the tiny test models).
template <class Keys>
constexpr bool all_head_dims() {
  if constexpr (requires { Keys::kAllHeadDims; }) return Keys::kAllHeadDims;
  return false;
}

// Calls f(integral_constant<int, D>{}, bool_constant<fp8>{}) for the kernel variant of
// (head_dim, fp8); the callers have checked that the variant exists.
template <class Keys, class F>
decltype(auto) with_variant(int head_dim, bool fp8, F&& f) {
  using D256 = std::integral_constant<int, 256>;
  using D128 = std::integral_constant<int, 128>;
  using D64 = std::integral_constant<int, 64>;
  using D32 = std::integral_constant<int, 32>;
  using D16 = std::integral_constant<int, 16>;
  if (head_dim == 256) return fp8 ? f(D256{}, std::true_type{}) : f(D256{}, std::false_type{});
  if constexpr (all_head_dims<Keys>()) {
    if (head_dim == 32) return f(D32{}, std::false_type{});
    if (head_dim == 16) return f(D16{}, std::false_type{});
  }
  if (head_dim == 128) return fp8 ? f(D128{}, std::true_type{}) : f(D128{}, std::false_type{});
  return fp8 ? f(D64{}, std::true_type{}) : f(D64{}, std::false_type{});
}

template <class Keys>
int ctas_per_sm(int head_dim, bool fp8) {
  return with_variant<Keys>(head_dim, fp8, [](auto d_tag, auto fp8_tag) {
    return ctas_per_sm<decltype(d_tag)::value, decltype(fp8_tag)::value, Keys>();
  });
}

inline int num_sms() {
  static const int n = [] {
    int dev = 0, sms = 0;
    LC_CUDA_CHECK(cudaGetDevice(&dev), "decode: cudaGetDevice");
    LC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "decode: SM count");
    return sms;
  }();
  return n;
}

constexpr int kBlockN = DecodeTile<128, false>::kBlockN;  // keys per tile
static_assert(DecodeTile<64, true>::kBlockN == kBlockN, "one tile size for all variants");

// Most splits per (sequence, unit): the fused merge keeps cta_heads x n_splits weights in the
// CTA's shared memory (16 x 512 x 4 B = 32 KB, within the d=64 kernel's 48 KB).
constexpr int64_t kMaxSplits = 512;
static_assert(kMaxGroup * kMaxSplits * 4 + 2 * kMaxGroup * 4 <= DecodeTile<64, true>::kSmemMerge,
              "merge weights fit smem");

// The counters sit at the start of a workspace, at a fixed size, so a workspace zeroed once stays
// valid while lengths (growing every decode step) and the split count change.
constexpr size_t kCounterBytes = 64 << 10;
constexpr int64_t kMaxCounters = kCounterBytes / sizeof(int);  // n_seq * units <= 16384

struct SplitPlan {
  int n_splits, tiles_per_split;  // tiles_per_split: for the longest row
};

// Splits per (sequence, unit) for n_keys keys (the longest row): one wave of CTAs,
// n_units_total * n_splits ~= SMs * CTAs per SM; requested > 0 caps it instead.
template <class Keys>
SplitPlan plan_splits(int64_t n_units_total, int head_dim, bool fp8, int64_t n_keys, int requested) {
  const int64_t n_tiles = std::max<int64_t>(1, (n_keys + kBlockN - 1) / kBlockN);
  int64_t want = requested;
  if (want <= 0) {
    const int64_t slots = int64_t(num_sms()) * ctas_per_sm<Keys>(head_dim, fp8);  // one wave of CTAs
    want = std::max<int64_t>(1, slots / n_units_total);
    // Short splits finish unevenly and their start-up shows: below kMinTilesPerSplit tiles a
    // second wave of half-length splits balances better (H200, 2026-11-22: 128K keys went from
    // 0.150 to 0.138 ms with 64 instead of 33 splits; 1M keys were fastest with one wave).
    constexpr int64_t kMinTilesPerSplit = 128;
    if ((n_tiles + want - 1) / want < kMinTilesPerSplit) want *= 2;
  }
  want = std::min({want, n_tiles, kMaxSplits});
  const int tps = int((n_tiles + want - 1) / want);
  return {int((n_tiles + tps - 1) / tps), tps};
}

// Launches the split kernel for the head dims of with_variant, bf16/fp8, grid (n_splits, units, n_seq).
template <class Keys>
void launch_split_kernel(const DecodeArgs& a, const Keys& keys, int head_dim, bool fp8, int n_units, int n_seq,
                         cudaStream_t stream) {
  const dim3 grid(a.n_splits, n_units, n_seq);
  with_variant<Keys>(head_dim, fp8, [&](auto d_tag, auto fp8_tag) {
    constexpr int D = decltype(d_tag)::value;
    constexpr bool F = decltype(fp8_tag)::value;
    (void)ctas_per_sm<D, F, Keys>();  // sets the smem attribute
    attn_decode_split_kernel<D, F, Keys><<<grid, DecodeTile<D, F>::kThreads, DecodeTile<D, F>::kSmem, stream>>>(a, keys);
  });
}

}  // namespace longctx::cuda::decode_split

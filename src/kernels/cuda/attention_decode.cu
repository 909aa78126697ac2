// attention_decode.cu (cuda): decode attention (one query per sequence), split-KV flash-decoding.
//
// What: for each sequence and query head, O = softmax(scale * q K^T) V over all n_kv keys, and
// the LSE. Layout and semantics: attention.h. Tested by tests/cuda/test_attention.cpp, timed by
// bench/bench_cuda.cu (goal: K+V streamed at >= 85% of the device copy bandwidth).
//
// How: decode is a pure stream of K and V, so the kernel is built around bytes in flight.
// One CTA = (KV split, KV head, sequence); its GQA group of query heads (<= 16) forms the 16 rows
// of one mma tile, so every K/V byte is read once for all heads that share it. 64-key tiles
// stream through a 3-stage cp.async pipeline; each of the 4 warps owns 16 keys of a tile and
// keeps its own online-softmax state (mma.sync m16n8k16, as in the prefill kernel). The warps'
// states are combined through shared memory, and each CTA writes one fp32 partial (O, LSE);
// the last CTA of each (sequence, KV head) to finish merges the splits exactly (the math of
// merge_states.cu), so a decode step is one launch. The number of splits fills the GPU in one
// wave: n_kv_head * n_seq * n_splits ~= SMs * CTAs per SM.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/mma.cuh"

namespace longctx::cuda {
namespace {

using bf16 = __nv_bfloat16;
using namespace mma;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kMaxGroup = 16;  // query heads per KV head that fit one m16 tile

template <int D, bool kFp8>
struct DecodeTile {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kKeysPerWarp = 16;
  static constexpr int kBlockN = kWarps * kKeysPerWarp;  // keys per pipeline stage
  // bf16: 3 stages, 2 tiles in flight while one computes (~64 KB/CTA at d=128), 2 CTAs/SM.
  // fp8: 2 stages leave room for 3 CTAs/SM (64 KB each with the fp16 widening tiles).
  static constexpr int kStages = kFp8 ? 2 : 3;
  static constexpr int kElem = kFp8 ? 1 : 2;              // bytes per stored K/V element
  static constexpr int kChunks = D * kElem / 16;          // 16-byte chunks per stored row
  static constexpr int kSmemKV = kBlockN * D * kElem;     // one stored K (or V) tile
  static constexpr int kSmemPipe = 2 * kStages * kSmemKV;
  // fp8: each tile is widened to fp16 (same swizzled layout as bf16) before ldmatrix.
  static constexpr int kSmemConv = kFp8 ? 2 * kBlockN * D * 2 : 0;
  static constexpr int kSmemCombine = kWarps * 16 * (D + 2) * 4;  // per-warp O [16][D] + max, sum
  static constexpr int kSmemMerge = kMaxGroup * 512 * 4 + 2 * kMaxGroup * 4;  // split weights
  static constexpr int kSmem = std::max({kSmemPipe + kSmemConv, kSmemCombine, kSmemMerge});
};

struct DecodeArgs {
  const bf16* q;
  const void* k;  // bf16 or fp8 e4m3
  const void* v;
  float* o_part;    // [n_seq * n_head][n_splits][D]
  float* lse_part;  // [n_seq * n_head][n_splits]
  int* counters;    // [n_seq * n_kv_head] finished splits; zero between calls (self-resetting)
  bf16* o;          // [n_seq * n_head][D]
  float* lse;       // [n_seq * n_head], optional
  int64_t n_kv, kv_seq_stride;     // n_kv: the longest sequence (kv_lens absent: every sequence)
  const int32_t* kv_lens;          // optional per-sequence lengths
  const int32_t* page_table;       // optional: [n_seq][max_pages] page ids into the K/V pools
  int page_size, max_pages;
  int n_head, n_kv_head, group, n_splits, tiles_per_split;
  float scale_log2;  // softmax scale * log2(e) (* k_scale for fp8 KV)
  float v_scale;     // fp8 KV: V's dequantisation scale, applied to each split's O
};

template <int D, bool kFp8>
__global__ void __launch_bounds__(DecodeTile<D, kFp8>::kThreads) attn_decode_split_kernel(const DecodeArgs a) {
  using T = DecodeTile<D, kFp8>;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sK = smem_u32(smem);
  const uint32_t sV = sK + T::kStages * T::kSmemKV;
  const uint32_t sKc = sK + T::kSmemPipe;        // fp8 path: fp16 K tile
  const uint32_t sVc = sKc + T::kBlockN * D * 2;  // fp8 path: fp16 V tile

  const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, tq = lane & 3;
  const int64_t n_kv = a.kv_lens ? int64_t(a.kv_lens[b]) : a.n_kv;  // this sequence's keys
  const int64_t n_tiles_total = (n_kv + T::kBlockN - 1) / T::kBlockN;
  const int64_t t_begin = int64_t(split) * a.tiles_per_split;
  const int64_t t_end = min(n_tiles_total, t_begin + a.tiles_per_split);
  const int n_tiles = t_end > t_begin ? int(t_end - t_begin) : 0;
  const int64_t ldk = int64_t(a.n_kv_head) * D;
  // Contiguous: sequence b's rows start at b * kv_seq_stride. Paged: pools of pages, the table
  // maps (sequence, key / page_size) to a page; a 64-key tile never straddles a page
  // (page_size is a multiple of 64).
  const int64_t base = int64_t(kvh) * D + (a.page_table ? 0 : int64_t(b) * a.kv_seq_stride);  // elements
  const uint8_t* kg = static_cast<const uint8_t*>(a.k) + base * T::kElem;
  const uint8_t* vg = static_cast<const uint8_t*>(a.v) + base * T::kElem;

  auto load_kv = [&](int i, int stage) {  // i: tile index within this split
    const int64_t n0 = (t_begin + i) * T::kBlockN;
    int64_t row0 = n0;
    if (a.page_table) {
      const int64_t page = a.page_table[int64_t(b) * a.max_pages + n0 / a.page_size];
      row0 = page * a.page_size + n0 % a.page_size;
    }
#pragma unroll
    for (int j = 0; j < T::kBlockN * T::kChunks / T::kThreads; ++j) {
      const int idx = tid + j * T::kThreads;
      const int r = idx / T::kChunks, c = idx % T::kChunks;
      const bool ok = n0 + r < n_kv;
      const int64_t off = (row0 + r) * ldk * T::kElem + c * 16;  // bytes
      // bf16 tiles go straight to the swizzled ldmatrix layout; fp8 tiles land row-major and are
      // widened below.
      const uint32_t dst = kFp8 ? uint32_t(r * D + c * 16) : swz<D>(r, c);
      cp_async16(sK + stage * T::kSmemKV + dst, ok ? kg + off : a.k, ok ? 16 : 0);
      cp_async16(sV + stage * T::kSmemKV + dst, ok ? vg + off : a.v, ok ? 16 : 0);
    }
  };
#pragma unroll
  for (int i = 0; i < T::kStages - 1; ++i) {
    if (i < n_tiles) load_kv(i, i);
    cp_async_commit();
  }

  // Q fragments straight from global memory: row r of the tile = query head kvh*group + r.
  uint32_t qf[D / 16][4];
  {
    const bf16* qb = a.q + (int64_t(b) * a.n_head + int64_t(kvh) * a.group) * D;
    const bool lo_ok = g < a.group, hi_ok = g + 8 < a.group;
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

  float oacc[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.f;
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
            const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(w[i] & 0xffffu), __NV_E4M3);
            const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(w[i] >> 16), __NV_E4M3);
            h[2 * i] = uint32_t(lo.x) | (uint32_t(lo.y) << 16);
            h[2 * i + 1] = uint32_t(hi.x) | (uint32_t(hi.y) << 16);
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
    const int kr = warp * T::kKeysPerWarp;  // this warp's 16 keys within the tile
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
    const bool need_mask = key0 + T::kKeysPerWarp > n_kv;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * a.scale_log2;
        if (need_mask && key0 + nt * 8 + 2 * tq + (e & 1) >= n_kv) x = -INFINITY;
        s[nt][e] = x;
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_r[r], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float corr = exp2f(m_r[r] - m_use);
      m_r[r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        s[nt][2 * r] = exp2f(s[nt][2 * r] - m_use);
        s[nt][2 * r + 1] = exp2f(s[nt][2 * r + 1] - m_use);
        sum += s[nt][2 * r] + s[nt][2 * r + 1];
      }
      l_r[r] = l_r[r] * corr + sum;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        oacc[dt][2 * r] *= corr;
        oacc[dt][2 * r + 1] *= corr;
      }
    }
    auto pack = [](float x, float y) { return kFp8 ? pack_f16(x, y) : pack_bf16(x, y); };
    const uint32_t pa[4] = {pack(s[0][0], s[0][1]), pack(s[0][2], s[0][3]), pack(s[1][0], s[1][1]),
                            pack(s[1][2], s[1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4_trans(vbase + swz<D>(kr + (lane & 7) + ((lane >> 3) & 1) * 8, 2 * dp + (lane >> 4)), b0, b1, b2,
                        b3);
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

  // Combine the 4 warps' states: sO [warp][16][D] unnormalised, sM/sL [warp][16].
  float* sO = reinterpret_cast<float*>(smem);
  float* sM = sO + T::kWarps * 16 * D;
  float* sL = sM + T::kWarps * 16;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_r[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    l_r[r] = l;
  }
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    float* row_lo = sO + (warp * 16 + g) * D + dt * 8 + 2 * tq;
    float* row_hi = row_lo + 8 * D;
    row_lo[0] = oacc[dt][0];
    row_lo[1] = oacc[dt][1];
    row_hi[0] = oacc[dt][2];
    row_hi[1] = oacc[dt][3];
  }
  if (tq == 0) {
    sM[warp * 16 + g] = m_r[0];
    sL[warp * 16 + g] = l_r[0];
    sM[warp * 16 + g + 8] = m_r[1];
    sL[warp * 16 + g + 8] = l_r[1];
  }
  __syncthreads();
  for (int idx = tid; idx < a.group * D; idx += T::kThreads) {
    const int r = idx / D, d = idx % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < T::kWarps; ++w) M = fmaxf(M, sM[w * 16 + r]);
    float L = 0.f, acc = 0.f;
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < T::kWarps; ++w) {
        const float wgt = exp2f(sM[w * 16 + r] - M);
        L += sL[w * 16 + r] * wgt;
        acc += sO[(w * 16 + r) * D + d] * wgt;
      }
    }
    const int64_t row = int64_t(b) * a.n_head + int64_t(kvh) * a.group + r;
    a.o_part[(row * a.n_splits + split) * D + d] = L > 0.f ? acc / L * a.v_scale : 0.f;
    if (d == 0) a.lse_part[row * a.n_splits + split] = L > 0.f ? M * kLn2 + logf(L) : -INFINITY;
  }

  // Fused merge: the last CTA of this (sequence, KV head) to finish combines all splits, so a
  // decode step is one launch. Classic threadfence reduction: publish the partials, count, and
  // the CTA that brings the counter to n_splits resets it and reads everyone's partials.
  __shared__ int s_last;
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    int* ctr = a.counters + int64_t(b) * a.n_kv_head + kvh;
    s_last = atomicAdd(ctr, 1) == a.n_splits - 1;
    if (s_last) atomicExch(ctr, 0);  // every other split has counted: safe to reset for the next call
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  // Per-row weights exp(lse_j - M) in shared memory (the pipeline buffers are free now).
  float* sW = reinterpret_cast<float*>(smem);  // [group][n_splits]
  float* sInvL = sW + a.group * a.n_splits;    // [group]
  float* sLse = sInvL + kMaxGroup;             // [group]
  for (int r = warp; r < a.group; r += T::kWarps) {
    const int64_t row = int64_t(b) * a.n_head + int64_t(kvh) * a.group + r;
    const float* lp = a.lse_part + row * a.n_splits;
    float M = -INFINITY;
    for (int j = lane; j < a.n_splits; j += 32) M = fmaxf(M, __ldcg(lp + j));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
    float L = 0.f;
    for (int j = lane; j < a.n_splits; j += 32) {
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
  for (int idx = tid; idx < a.group * D; idx += T::kThreads) {
    const int r = idx / D, d = idx % D;
    const int64_t row = int64_t(b) * a.n_head + int64_t(kvh) * a.group + r;
    const float* op = a.o_part + row * a.n_splits * D + d;
    float acc = 0.f;
    for (int j = 0; j < a.n_splits; ++j) acc += sW[r * a.n_splits + j] * __ldcg(op + int64_t(j) * D);
    a.o[row * D + d] = __float2bfloat16_rn(acc * sInvL[r]);
    if (d == 0 && a.lse) a.lse[row] = sLse[r];
  }
}

// CTAs of the split kernel that fit one SM (shared memory bound); also raises the smem limit.
template <int D, bool kFp8>
int decode_ctas_per_sm() {
  using T = DecodeTile<D, kFp8>;
  static const int n = [] {
    LC_CUDA_CHECK(cudaFuncSetAttribute(attn_decode_split_kernel<D, kFp8>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmem),
                  "attn_decode_split_kernel<d=%d>: raising dynamic shared memory to %d bytes", D, T::kSmem);
    int blocks = 0;
    LC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, attn_decode_split_kernel<D, kFp8>,
                                                                T::kThreads, T::kSmem),
                  "attn_decode_split_kernel<d=%d>: occupancy query", D);
    return std::max(1, blocks);
  }();
  return n;
}

int num_sms() {
  static const int n = [] {
    int dev = 0, sms = 0;
    LC_CUDA_CHECK(cudaGetDevice(&dev), "decode: cudaGetDevice");
    LC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "decode: SM count");
    return sms;
  }();
  return n;
}

constexpr int kDecodeBlockN = DecodeTile<128, false>::kBlockN;
static_assert(DecodeTile<64, true>::kBlockN == kDecodeBlockN, "one tile size for all variants");

struct SplitPlan {
  int n_splits, tiles_per_split;
};

// Most splits per (sequence, KV head): the fused merge keeps group x n_splits weights in the
// CTA's shared memory (16 x 512 x 4 B = 32 KB, within the d=64 kernel's 48 KB).
constexpr int64_t kMaxSplits = 512;
static_assert(kMaxGroup * kMaxSplits * 4 + 2 * kMaxGroup * 4 <= DecodeTile<64, true>::kSmemMerge,
              "merge weights fit smem");

// Workspace: [counters: fixed 64 KB][o_part][lse_part]. The counters sit at a fixed place so a
// workspace zeroed once stays valid while n_kv (growing every decode step) and n_seq change.
constexpr size_t kCounterBytes = 64 << 10;
constexpr int64_t kMaxCounters = kCounterBytes / sizeof(int);  // n_seq * n_kv_head <= 16384
struct WorkspaceLayout {
  size_t o_part, lse_part, total;  // byte offsets
};
WorkspaceLayout workspace_layout(int n_seq, int n_head, int head_dim, int64_t n_splits) {
  auto al = [](size_t x) { return (x + 255) & ~size_t(255); };
  WorkspaceLayout l{};
  const size_t rows = size_t(n_seq) * n_head;
  l.o_part = kCounterBytes;
  l.lse_part = l.o_part + al(rows * n_splits * head_dim * sizeof(float));
  l.total = l.lse_part + al(rows * n_splits * sizeof(float));
  return l;
}

SplitPlan plan_splits(int n_seq, int n_kv_head, int head_dim, bool fp8, int64_t n_kv, int requested) {
  const int64_t n_tiles = std::max<int64_t>(1, (n_kv + kDecodeBlockN - 1) / kDecodeBlockN);
  int64_t want = requested;
  if (want <= 0) {
    const int per_sm = head_dim == 128 ? (fp8 ? decode_ctas_per_sm<128, true>() : decode_ctas_per_sm<128, false>())
                                       : (fp8 ? decode_ctas_per_sm<64, true>() : decode_ctas_per_sm<64, false>());
    const int64_t slots = int64_t(num_sms()) * per_sm;  // one wave of CTAs
    want = std::max<int64_t>(1, slots / (int64_t(n_kv_head) * n_seq));
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

void check_decode(const DecodeParams& p) {
  LC_REQUIRE(p.q && p.k && p.v && p.o, "attention_decode: null q/k/v/o pointer");
  LC_REQUIRE(p.head_dim == 64 || p.head_dim == 128, "attention_decode: head_dim %d unsupported (64 or 128)",
             p.head_dim);
  LC_REQUIRE(p.n_head > 0 && p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0 &&
                 p.n_head / p.n_kv_head <= kMaxGroup,
             "attention_decode: n_head %d / n_kv_head %d must be a positive integer <= %d", p.n_head, p.n_kv_head,
             kMaxGroup);
  LC_REQUIRE(p.kv_dtype == KvDtype::bf16 || (p.kv_dtype == KvDtype::fp8_e4m3 && p.k_scale > 0.f && p.v_scale > 0.f),
             "attention_decode: unknown kv_dtype %d or non-positive fp8 scales", int(p.kv_dtype));
  LC_REQUIRE(p.n_seq > 0 && p.n_kv > 0, "attention_decode: n_seq %d and n_kv %lld must be positive", p.n_seq,
             (long long)p.n_kv);
  LC_REQUIRE(p.n_seq <= 65535 && int64_t(p.n_seq) * p.n_kv_head <= kMaxCounters,
             "attention_decode: n_seq %d x n_kv_head %d exceeds %lld per launch", p.n_seq, p.n_kv_head,
             (long long)kMaxCounters);
  LC_REQUIRE(!p.page_table || (p.page_size > 0 && p.page_size % kDecodeBlockN == 0 && p.max_pages_per_seq > 0 &&
                               int64_t(p.max_pages_per_seq) * p.page_size >= p.n_kv),
             "attention_decode: paged KV needs page_size a multiple of %d (got %d) and max_pages_per_seq * "
             "page_size >= n_kv (%d * %d < %lld)",
             kDecodeBlockN, p.page_size, p.max_pages_per_seq, p.page_size, (long long)p.n_kv);
}

}  // namespace

int decode_num_splits(const DecodeParams& p) {
  check_decode(p);
  return plan_splits(p.n_seq, p.n_kv_head, p.head_dim, p.kv_dtype == KvDtype::fp8_e4m3, p.n_kv, p.n_splits).n_splits;
}

size_t decode_workspace_bytes(int n_seq, int n_head, int head_dim, int64_t n_kv) {
  // Upper bound over any n_splits (at most one split per 64-key tile, at most kMaxSplits);
  // n_kv_head <= n_head bounds the counters.
  const int64_t n_tiles = std::max<int64_t>(1, (n_kv + kDecodeBlockN - 1) / kDecodeBlockN);
  return workspace_layout(n_seq, n_head, head_dim, std::min(n_tiles, kMaxSplits)).total;
}

void decode_workspace_init(void* workspace, size_t workspace_bytes, Stream s) {
  LC_REQUIRE(workspace, "decode_workspace_init: null workspace");
  LC_CUDA_CHECK(cudaMemsetAsync(workspace, 0, workspace_bytes, static_cast<cudaStream_t>(s)),
                "decode_workspace_init(%zu bytes)", workspace_bytes);
}

void attention_decode(const DecodeParams& p, Stream s) {
  check_decode(p);
  const bool fp8 = p.kv_dtype == KvDtype::fp8_e4m3;
  const SplitPlan plan = plan_splits(p.n_seq, p.n_kv_head, p.head_dim, fp8, p.n_kv, p.n_splits);
  const WorkspaceLayout used = workspace_layout(p.n_seq, p.n_head, p.head_dim, plan.n_splits);
  LC_REQUIRE(p.workspace && p.workspace_bytes >= decode_workspace_bytes(p.n_seq, p.n_head, p.head_dim, p.n_kv),
             "attention_decode: workspace of %zu bytes given, %zu needed; size it with decode_workspace_bytes and "
             "zero it once with decode_workspace_init",
             p.workspace_bytes, decode_workspace_bytes(p.n_seq, p.n_head, p.head_dim, p.n_kv));
  DecodeArgs a{};
  a.q = static_cast<const bf16*>(p.q);
  a.k = p.k;
  a.v = p.v;
  char* ws = static_cast<char*>(p.workspace);
  a.o_part = reinterpret_cast<float*>(ws + used.o_part);
  a.lse_part = reinterpret_cast<float*>(ws + used.lse_part);
  a.counters = reinterpret_cast<int*>(ws);
  a.o = static_cast<bf16*>(p.o);
  a.lse = p.lse;
  a.n_kv = p.n_kv;
  a.kv_lens = p.kv_lens;
  a.page_table = p.page_table;
  a.page_size = p.page_size;
  a.max_pages = p.max_pages_per_seq;
  a.kv_seq_stride = p.kv_seq_stride ? p.kv_seq_stride : p.n_kv * p.n_kv_head * int64_t(p.head_dim);
  a.n_head = p.n_head;
  a.n_kv_head = p.n_kv_head;
  a.group = p.n_head / p.n_kv_head;
  a.n_splits = plan.n_splits;
  a.tiles_per_split = plan.tiles_per_split;
  const float scale = p.scale > 0.f ? p.scale : 1.f / std::sqrt(float(p.head_dim));
  a.scale_log2 = scale * kLog2e * (fp8 ? p.k_scale : 1.f);
  a.v_scale = fp8 ? p.v_scale : 1.f;
  auto stream = static_cast<cudaStream_t>(s);
  const dim3 grid(plan.n_splits, p.n_kv_head, p.n_seq);
  auto launch = [&](auto d_tag, auto fp8_tag) {
    constexpr int D = decltype(d_tag)::value;
    constexpr bool F = decltype(fp8_tag)::value;
    (void)decode_ctas_per_sm<D, F>();  // sets the smem attribute
    attn_decode_split_kernel<D, F><<<grid, DecodeTile<D, F>::kThreads, DecodeTile<D, F>::kSmem, stream>>>(a);
  };
  using D128 = std::integral_constant<int, 128>;
  using D64 = std::integral_constant<int, 64>;
  if (p.head_dim == 128)
    fp8 ? launch(D128{}, std::true_type{}) : launch(D128{}, std::false_type{});
  else
    fp8 ? launch(D64{}, std::true_type{}) : launch(D64{}, std::false_type{});
  LC_LAUNCH_CHECK("attn_decode_split_kernel<d=%d,fp8=%d> n_seq=%d n_kv=%lld heads=%d/%d splits=%d", p.head_dim, int(fp8),
                  p.n_seq, (long long)p.n_kv, p.n_head, p.n_kv_head, plan.n_splits);
}

}  // namespace longctx::cuda

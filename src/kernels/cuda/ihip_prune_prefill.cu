// ihip_prune_prefill.cu: InfiniteHiP's pruning stage for a prefill chunk (every 64-row query block
// at once) and its sparse index; see ihip_prune.h ("Prefill").
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ihip_prune.cuh"
#include "kernels/cuda/ihip_prune.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/sm90.cuh"

namespace longctx::cuda {

namespace {

using namespace ihip;

constexpr int kBlockQ = 64;   // rows per query block (the sparse index's block)
constexpr int kThreads = 256;
constexpr int kMmaQTile = 256;  // the tensor-core scorer's queries (bf16): one tile, group x 64 <= 256
constexpr int kWarps = kThreads / 32;
// Chunks per tensor-core pass: 32 chunks = 64 probes, so a pass's dependent key gather (the
// bisection's next probes wait for this pass's scores) is paid once per 64 x 256 x D dot products.
constexpr int kMmaChunks = 32;
static_assert(kThreads == kMmaQTile, "score_kernel copies a tile's offsets one a thread");
constexpr int kMmaSlots = 2 * kMmaChunks;

// The shapes of one score CTA at head_dim D (64, 128 or 256). The FMA scorer holds kQTile queries in
// shared memory at once (fp32, transposed: [D][kQStride], so 128 of them at D = 256 to fit) and
// gives each thread a tile of 4 queries x 8 probes, so a pass probes kSlots = 8 x (256 / (kQTile
// / 4)) keys: kChunks = kSlots / 2 chunks, a bisection step probing two keys per chunk. The
// tensor-core scorer probes kMmaSlots keys a pass instead.
template <int D>
struct Shape {
  static_assert(D == 64 || D == 128 || D == 256, "head_dim 64, 128 or 256");
  static constexpr int kQTile = D <= 128 ? 256 : 128;
  static constexpr int kQStride = kQTile + 4;  // a row of qT: 16-byte aligned, the fill's stores spread over banks
  static constexpr int kQuads = kQTile / 4;     // threads along the queries (4 queries each)
  static constexpr int kOctets = kThreads / kQuads;  // threads along the probes (8 probes each)
  static constexpr int kSlots = 8 * kOctets;    // probes per pass
  static constexpr int kChunks = kSlots / 2;
  static constexpr size_t kScoreSmem = size_t(D) * kQStride * 4 + size_t(D) * kSlots * 4 + size_t(kQuads) * kSlots * 4;
  // Tensor-core scoring: each warp holds its 32 queries' A fragments in registers for the whole
  // CTA (D / 2 registers a thread: 64 at D = 128), so a pass reads only the probe keys from shared
  // memory: [kMmaSlots][D] bf16 (16-byte chunks swizzled by row parity: conflict-free fragment
  // loads at D = 128), then per-warp maxima [kWarps][kMmaSlots]. The registers bound the CTAs an
  // SM (65536 / 256 threads): 3 at D = 64 (<= 85 a thread), 2 at D = 128 (<= 128), 1 at D = 256;
  // while one CTA waits for its gather another computes.
  static constexpr int kMmaCtasPerSm = D == 64 ? 3 : D == 128 ? 2 : 1;
  static constexpr size_t kMmaSmem = size_t(kMmaSlots) * D * 2 + size_t(kWarps) * kMmaSlots * 4;
  // The pipelined tensor-core scorer (RoPE none): two lanes' probe keys, then the per-warp maxima.
  static constexpr size_t kPipeSmem = 2 * size_t(kMmaSlots) * D * 2 + size_t(kWarps) * kMmaSlots * 4;
  // Its wgmma form: the same, plus room to align the key buffers to 1024 bytes (the 128-byte swizzle).
  static constexpr size_t kWgSmem = kPipeSmem + 1024;
};
// std::max's choice (ihip_select_rep's running max): b when a < b, else a (signed zeros as the CPU).
__device__ inline float max_as_std(float a, float b) { return a < b ? b : a; }
// Element offset of 16-byte chunk c (0 .. D / 8 - 1) of row r in a swizzled [rows][D] bf16 tile:
// the 8 lanes of a quarter warp read rows of both parities, chunks 4p + t: 8 distinct bank groups
// (at D = 64 a row is the 32 banks, chunks 0-3 of one parity and 4-7 of the other).
template <int D>
__device__ inline int swz(int r, int c) { return r * D + ((c ^ ((r & 1) << 2)) << 3); }

struct Block {  // one query block of the chunk
  int64_t row0, rows, q_last;
};
__device__ inline Block block_of(const IhipPrefillGpuParams& p, int64_t b) {
  Block k;
  k.row0 = b * kBlockQ;
  k.rows = p.n_q - k.row0 < kBlockQ ? p.n_q - k.row0 : kBlockQ;
  k.q_last = p.q_pos0 + k.row0 + k.rows - 1;
  return k;
}

__device__ inline Cands block_cands(const IhipPrefillGpuParams& p, const IhipPrefillStage& st, int64_t b,
                                    const Block& blk) {
  return cands_of(st.in ? st.in + b * st.in_cap : nullptr, st.in ? st.in_len[b] : 0, blk.q_last, p.n_sink,
                  p.n_stream);
}

// acc[i][j] (query 4 qq + i, probe 8 ko + j) = lane l's partial of hip_dot: fp32 FMAs over its
// elements 8l..8l+7, then 64+8l..64+8l+7, ... (D / 64 runs of 8), in order.
template <int D>
__device__ inline void lane_dot(const float* qT, const float* kT, int qq, int ko, int l, float (&acc)[4][8]) {
  using S = Shape<D>;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
#pragma unroll
  for (int h = 0; h < D / 64; ++h)
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int d = 64 * h + 8 * l + e;
      const float4 q = *reinterpret_cast<const float4*>(qT + d * S::kQStride + 4 * qq);
      const float4 k0 = *reinterpret_cast<const float4*>(kT + d * S::kSlots + 8 * ko);
      const float4 k1 = *reinterpret_cast<const float4*>(kT + d * S::kSlots + 8 * ko + 4);
      const float qv[4] = {q.x, q.y, q.z, q.w}, kv[8] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(qv[i], kv[j], acc[i][j]);
    }
}

__device__ inline void add_to(float (&a)[4][8], const float (&b)[4][8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) a[i][j] = a[i][j] + b[i][j];
}

// The 4 x 8 dots of the thread's tile in hip_dot's order.
template <int D>
__device__ inline void tile_dots(const float* qT, const float* kT, int qq, int ko, float (&r)[4][8]) {
  float s1[4][8], a[4][8], b[4][8];
  lane_dot<D>(qT, kT, qq, ko, 0, r);
  lane_dot<D>(qT, kT, qq, ko, 4, a);
  add_to(r, a);  // p0 + p4
  lane_dot<D>(qT, kT, qq, ko, 2, a);
  lane_dot<D>(qT, kT, qq, ko, 6, b);
  add_to(a, b);  // p2 + p6
  add_to(r, a);  // t0
  lane_dot<D>(qT, kT, qq, ko, 1, s1);
  lane_dot<D>(qT, kT, qq, ko, 5, a);
  add_to(s1, a);  // p1 + p5
  lane_dot<D>(qT, kT, qq, ko, 3, a);
  lane_dot<D>(qT, kT, qq, ko, 7, b);
  add_to(a, b);   // p3 + p7
  add_to(s1, a);  // t1
  add_to(r, s1);
}

struct Probe {  // one slot of a pass
  int32_t key;  // absolute key position; < 0: unused slot
  int32_t kpos; // RoPE position of the key (relative: 0 / 1; chunk-indexed: the chunk)
};

// A warp's query fragments for the tensor-core pass: queries [32 w, 32 w + 32) of the group's
// kMmaQTile (2 m-tiles of 16) x D. The head dimension is permuted the same way in A and B
// (hip_estimate.cu's scorer): k-step 2p + j, half h, element e of lane t lives at
// 32p + 8t + 4j + 2h + e, so each fragment pair is one 16-byte load.
template <int D>
struct QueryFrags {
  uint32_t a[2][D / 32][2][4];  // [m-tile][p][k-step of the pair][register]
};

// Rounds the fp32 pair (lo, hi) to bf16 (round to nearest even), lo in the low half (memory order).
__device__ inline uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// One lane's share of a key for the FMA scorers (score_kernel's gather, offsets_kernel): 8 threads
// a key in hip_dot's lane layout, lane l (< 8) holding elements 64 c + 8 l .. + 8 (c < D / 64), widened
// to fp32 into y and, with RoPE, rotated at table row kpos. The rotate-half pairs (i, i + D / 2)
// sit in runs c and c + D / 128; at D = 64 in lanes l and l + 4, exchanged by a shuffle, so every
// thread of the warp calls it (on false: y stays zero, src and kpos are not read).
template <int D>
__device__ inline void gather_key_lane(float (&y)[D / 8], const __nv_bfloat16* src, int64_t kpos, bool on, int l,
                                       const IhipPrefillGpuParams& p) {
  constexpr int kRuns = D / 64, kHalfD = D / 2;
#pragma unroll
  for (int e = 0; e < 8 * kRuns; ++e) y[e] = 0.f;
  if (on) {
#pragma unroll
    for (int c = 0; c < kRuns; ++c) {
      const uint4 u = *reinterpret_cast<const uint4*>(src + 64 * c);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 a = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(&u)[e]);
        y[8 * c + 2 * e] = a.x, y[8 * c + 2 * e + 1] = a.y;
      }
    }
    if (p.rope_mode != 0) {
#pragma unroll
      for (int c = 0; c < kRuns / 2; ++c) {
        const float* cs = p.rope_cos + kpos * kHalfD + 64 * c + 8 * l;
        const float* sn = p.rope_sin + kpos * kHalfD + 64 * c + 8 * l;
#pragma unroll
        for (int e = 0; e < 8; ++e) rotate(y[8 * c + e], y[8 * (c + kRuns / 2) + e], cs[e], sn[e]);
      }
    }
  }
  if constexpr (D == 64) {
    if (p.rope_mode != 0) {  // pair (i, i + 32): i = 8 l + e in lane l < 4, its partner in lane l + 4
      const bool low = l < 4;
      const int64_t row = on ? kpos * kHalfD + 8 * (l % 4) : 0;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float other = __shfl_xor_sync(0xffffffffu, y[e], 4);
        float a = low ? y[e] : other, bb = low ? other : y[e];
        if (on) rotate(a, bb, p.rope_cos[row + e], p.rope_sin[row + e]);
        y[e] = low ? a : bb;
      }
    }
  }
}

// Rotates the 8 bf16 elements x[i] (u) and their rotate-half partners x[i + D / 2] (w) at the
// table row cs / sn (8 consecutive entries, 32-byte aligned): rotate()'s fp32 formula, then each
// result rounded to bf16, so the tensor cores see the FMA scorer's rotated values to bf16 precision.
__device__ inline void rotate_bf16x8(uint4& u, uint4& w, const float* cs, const float* sn) {
  uint32_t* a = reinterpret_cast<uint32_t*>(&u);
  uint32_t* b = reinterpret_cast<uint32_t*>(&w);
  const float4 c0 = __ldg(reinterpret_cast<const float4*>(cs)), c1 = __ldg(reinterpret_cast<const float4*>(cs) + 1);
  const float4 s0 = __ldg(reinterpret_cast<const float4*>(sn)), s1 = __ldg(reinterpret_cast<const float4*>(sn) + 1);
  const float c[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
  const float s[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&a[i]));
    const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&b[i]));
    float x0 = x.x, y0 = y.x, x1 = x.y, y1 = y.y;
    rotate(x0, y0, c[2 * i], s[2 * i]);
    rotate(x1, y1, c[2 * i + 1], s[2 * i + 1]);
    a[i] = pack_bf16(x0, x1);
    b[i] = pack_bf16(y0, y1);
  }
}

// Loads the warp's fragments from global memory once per CTA: query t of the group (t = h' * rows
// + r) is head g * group + h', row row0 + r; zeros past n_qs. With RoPE each query is rotated at
// its mode's position (ihip_pack_queries) and rounded to bf16: lane t's chunk 4p + t (elements
// 32p + 8t ..) has its rotate-half partner in chunk 4(p + D / 64) + t, in the same lane.
template <int D>
__device__ inline void load_query_frags(const IhipPrefillGpuParams& p, int kv_head, int group, const Block& blk,
                                        int n_qs, int64_t n_chunk, QueryFrags<D>& f) {
  const auto* q = static_cast<const __nv_bfloat16*>(p.q);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  constexpr int kHalfP = D / 64;  // the p of the first half's partner offset
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {  // rows g and g + 8 of the m-tile
      const int qi = 32 * warp + 16 * mt + 8 * hh + g;
      uint4 v[D / 32];
#pragma unroll
      for (int pp = 0; pp < D / 32; ++pp) v[pp] = make_uint4(0, 0, 0, 0);
      if (qi < n_qs) {
        const int h = kv_head * group + qi / int(blk.rows);
        const int64_t row = blk.row0 + qi % int(blk.rows);
        const __nv_bfloat16* src = q + (row * p.n_head + h) * D;
#pragma unroll
        for (int pp = 0; pp < D / 32; ++pp) v[pp] = *reinterpret_cast<const uint4*>(src + 8 * (4 * pp + t));
        if (p.rope_mode != 0) {
          const int64_t qp = query_pos(p.rope_mode, p.q_pos0 + row, n_chunk, p.n_stream);
#pragma unroll
          for (int pp = 0; pp < kHalfP; ++pp) {
            const int64_t e = qp * (D / 2) + 8 * (4 * pp + t);
            rotate_bf16x8(v[pp], v[pp + kHalfP], p.rope_cos + e, p.rope_sin + e);
          }
        }
      }
#pragma unroll
      for (int pp = 0; pp < D / 32; ++pp) {
        f.a[mt][pp][0][hh] = v[pp].x, f.a[mt][pp][0][2 + hh] = v[pp].y;
        f.a[mt][pp][1][hh] = v[pp].z, f.a[mt][pp][1][2 + hh] = v[pp].w;
      }
    }
}

// The tensor-core pass's dots and maxima: warp w multiplies its queries (fragments in registers)
// by the kMmaSlots probes (kMmaSlots / 8 n-tiles of 8) with mma.m16n8k16 (bf16 in, fp32 accumulate),
// masks the rows past n_qs, and writes each probe's max over its rows to red[w][slot]. kLocal
// (rank=local): each row's accumulators start at minus its offset off[row] (shared memory, the
// tile's), so the mma sums q.k - offset: no instruction or register past the paper's pass (a
// subtraction after the dot held the offsets through the pass and spilled at D = 64 and 128). The
// fp32 order differs from ihip_probe's (dot, then __fsub_rn) as the dot's own does: judged
// against fp64 (exact, so bit-equal, on exact-dot inputs).
template <int D, bool kLocal = false>
__device__ inline void mma_pass(const QueryFrags<D>& f, const __nv_bfloat16* kb, int n_qs, float* red,
                                const float* off) {
  constexpr int kTiles = 2;  // n-tiles at a time (the accumulators beside the fragments: no spills)
  constexpr int kSlots = kMmaSlots;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
#pragma unroll 1
  for (int j0 = 0; j0 < kSlots / 8; j0 += kTiles) {
    float acc[kTiles][2][4];
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[j][mt][i] = kLocal ? -off[32 * warp + 16 * mt + 8 * (i / 2) + g] : 0.f;
    // Issue order: the 4 accumulators' mmas of a k-step one after another, so each mma's
    // dependent successor comes 4 issues later (the mma asm is volatile, so this order stands;
    // with an accumulator's two k-steps back to back ncu counted 4.9 of 10.6 cycles an instruction
    // as fixed-latency stalls). Each accumulator still sums its k-steps in order: scores unchanged.
#pragma unroll
    for (int p = 0; p < D / 32; ++p) {
      uint4 b[kTiles];
#pragma unroll
      for (int j = 0; j < kTiles; ++j) b[j] = *reinterpret_cast<const uint4*>(kb + swz<D>(8 * (j0 + j) + g, 4 * p + t));
#pragma unroll
      for (int kk = 0; kk < 2; ++kk)
#pragma unroll
        for (int j = 0; j < kTiles; ++j)
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
            mma::mma_bf16_16816(acc[j][mt], f.a[mt][p][kk], kk ? b[j].z : b[j].x, kk ? b[j].w : b[j].y);
    }
    // C: acc[j][mt][0..1] = (query 32w + 16mt + g, probes 8(j0 + j) + 2t, + 1), [2..3] = row + 8.
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      float b0 = -INFINITY, b1 = -INFINITY;
#pragma unroll
      for (int r = 0; r < 4; ++r)  // rows g + 8r: m-tile r / 2, half r % 2 (NaN never wins)
        if (32 * warp + 8 * r + g < n_qs) {
          const float v0 = acc[j][r / 2][2 * (r % 2)], v1 = acc[j][r / 2][2 * (r % 2) + 1];
          if (v0 > b0) b0 = v0;
          if (v1 > b1) b1 = v1;
        }
#pragma unroll
      for (int off = 4; off < 32; off *= 2) {
        const float o0 = __shfl_xor_sync(0xffffffffu, b0, off), o1 = __shfl_xor_sync(0xffffffffu, b1, off);
        if (o0 > b0) b0 = o0;
        if (o1 > b1) b1 = o1;
      }
      const int slot = 8 * (j0 + j) + 2 * t;
      if (g == 0) red[warp * kSlots + slot] = b0, red[warp * kSlots + slot + 1] = b1;
    }
  }
}

// The wgmma scorer (RoPE none, sm_90a). Warpgroup w4 = warp / 4 of the CTA multiplies its 128
// queries (two m-tiles of 64, A fragments in registers for the CTA) by the pass's probe keys (B,
// shared memory): each wgmma reads its 16 x 32 slice of B once for the warpgroup's 4 warps, where
// each mma.sync warp reads all of it, so a pass reads the probe keys 4 times a CTA instead of 8.
// Row of the group's query tile held by lane g of warp w in m-tile mt, half hh (rows g, g + 8).
__device__ inline int wg_row(int warp, int mt, int hh, int g) {
  return 128 * (warp / 4) + 64 * mt + 16 * (warp % 4) + 8 * hh + g;
}
// rank=local: block b's offsets for KV head kv_head (p.offset's [group * 64], query t = h' * rows
// + r as the fragments) copied to off_s[kMmaQTile] by the CTA's kMmaQTile threads, 0 past n_qs
// (masked rows). The tensor-core passes read them after the next barrier.
__device__ inline void copy_tile_offsets(const IhipPrefillGpuParams& p, int64_t b, int kv_head, int n_qs, float* off_s) {
  const float* o = p.offset + (b * p.n_kv_head + kv_head) * (int64_t(p.n_head / p.n_kv_head) * kBlockQ);
  const int t = threadIdx.x;
  off_s[t] = t < n_qs ? o[t] : 0.f;
}
template <int D>
struct WgQueryFrags {
  uint32_t a[2][D / 16][4];  // [m-tile][k-step][register]: (row g, k 2t..2t+1), (g + 8, ..), (g, 2t+8..), (g + 8, ..)
};
// Loads the warp's fragments once per CTA, the head dimension in natural order (wgmma reads B that
// way): query t of the group (t = h' * rows + r) is head g * group + h', row row0 + r; zeros past n_qs.
template <int D>
__device__ inline void load_query_frags_wg(const IhipPrefillGpuParams& p, int kv_head, int group, const Block& blk,
                                           int n_qs, WgQueryFrags<D>& f) {
  const auto* q = static_cast<const __nv_bfloat16*>(p.q);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int qi = wg_row(warp, mt, hh, g);
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) f.a[mt][ks][hh] = f.a[mt][ks][2 + hh] = 0u;
      if (qi < n_qs) {
        const int h = kv_head * group + qi / int(blk.rows);
        const int64_t row = blk.row0 + qi % int(blk.rows);
        const auto* src = reinterpret_cast<const uint32_t*>(q + (row * p.n_head + h) * D);  // bf16 pairs
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
          f.a[mt][ks][hh] = __ldg(src + 8 * ks + t);
          f.a[mt][ks][2 + hh] = __ldg(src + 8 * ks + 4 + t);
        }
      }
    }
}
// Element offset of 16-byte chunk c (0 .. D / 8 - 1) of probe row r in a [kMmaSlots][D] bf16 tile
// in wgmma's K-major 128-byte-swizzle layout: D / 64 panels of kMmaSlots rows x 128 bytes, chunk
// c % 8 of a row stored at (c % 8) ^ (r % 8) (the tile 1024-byte aligned; sm90::desc_sw128).
template <int D>
__device__ inline int sw128(int r, int c) {
  return (c / 8) * (kMmaSlots * 64) + r * 64 + (((c % 8) ^ (r % 8)) << 3);
}
// The pass's dots and maxima on wgmma: per 32 probes, each m-tile's D / 16 wgmmas (m64n32k16,
// interleaved over the two m-tiles' accumulators), then each probe's max over the warp's rows
// below n_qs into red[warp][slot] as mma_pass. kb: the tile's shared address.
// The maxima over the warp's 8 row groups (lanes g = lane / 4) are a transposing butterfly: at each
// of the 3 exchanges a lane sends the half of its values its partner keeps, so 8 values need 4 + 2
// + 1 shuffles (a shuffle per value per exchange would need 24) and lane (g, t) ends with probe
// value g's maximum, which it stores: 32 lanes, 32 distinct slots, one store each. fmaxf: a NaN
// never wins over a number.
// Instruction count matters here (ncu at 1M: issue-bound, not waiting on memory): where every row
// of the CTA's tile is a query (n_qs = 256, every full block of a 4-head group) a lane's 4 rows
// reduce as a tree of 3 fmaxf a value with no liveness predicates (ptxas turned the predicated
// form into ~2.5 instructions a value); and the wgmma descriptors are one base a pass half plus
// constant offsets (the address field is addr >> 4 in the low 14 bits: shared addresses < 2^18, so
// adding off >> 4 never carries out of it).
// kLocal (rank=local): each row's accumulators start at minus its offset, as mma_pass's.
template <int D, bool kLocal = false>
__device__ inline void wgmma_pass(const WgQueryFrags<D>& f, uint32_t kb, int n_qs, float* red, const float* off) {
  constexpr int kN = 32;                         // probes per wgmma
  constexpr uint32_t kPanel = kMmaSlots * 128;   // bytes of a 64-dim panel
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const bool all_live = n_qs >= kMmaQTile;  // CTA-uniform
  bool live[2][2];  // whether the row of (m-tile, half) is a query
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) live[mt][hh] = wg_row(warp, mt, hh, g) < n_qs;
  // Lane (g, t)'s probe after the butterfly: value g = 2j + e is probe 8j + 2t + e of the 32.
  const int my_slot = 8 * (g / 2) + 2 * t + g % 2;
#pragma unroll 1
  for (int n0 = 0; n0 < kMmaSlots; n0 += kN) {
    float acc[2][16];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int i = 0; i < 16; ++i) acc[mt][i] = kLocal ? -off[wg_row(warp, mt, (i / 2) % 2, g)] : 0.f;
      sm90::fence_regs(acc[mt]);
    }
    const uint64_t desc0 = sm90::desc_sw128(kb + n0 * 128, 16);
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)  // 16 dims = 32 bytes of a panel row
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
        sm90::wgmma_rs_n32(acc[mt], f.a[mt][ks], desc0 + (((ks / 4) * kPanel + (ks % 4) * 32) >> 4), kLocal || ks > 0);
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) sm90::fence_regs(acc[mt]);
    // acc[mt][4j + 2hh + e] = (query wg_row(warp, mt, hh, g), probe n0 + 8j + 2t + e): v[2j + e] is
    // the max over the lane's live rows.
    float v[8];
    if (all_live) {
#pragma unroll
      for (int j = 0; j < kN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          v[2 * j + e] = fmaxf(fmaxf(acc[0][4 * j + e], acc[0][4 * j + 2 + e]),
                               fmaxf(acc[1][4 * j + e], acc[1][4 * j + 2 + e]));
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = -INFINITY;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
          if (live[mt][hh])
#pragma unroll
            for (int j = 0; j < kN / 8; ++j)
#pragma unroll
              for (int e = 0; e < 2; ++e) v[2 * j + e] = fmaxf(v[2 * j + e], acc[mt][4 * j + 2 * hh + e]);
    }
    // Exchange over lane bit 4 (g bit 2), then 3, then 2: a lane with the bit set keeps the upper
    // half of its values, so after the three it holds value g's maximum in v[0].
#pragma unroll
    for (int half = 4; half >= 1; half /= 2) {
      const bool up = lane & (4 * half);  // lane bit 2 + log2(half): g's bit log2(half)
#pragma unroll
      for (int i = 0; i < half; ++i) {
        const float keep = up ? v[i + half] : v[i], send = up ? v[i] : v[i + half];
        v[i] = fmaxf(keep, __shfl_xor_sync(0xffffffffu, send, 4 * half));
      }
    }
    red[warp * kMmaSlots + n0 + my_slot] = v[0];
  }
}

// One score CTA: chunks [x * per_cta, ...) of block z for KV head y. kMma: the tensor-core pass
// (one query tile; with RoPE the rotated operands rounded to bf16); else the fp32 FMA pass in
// hip_dot's order. rank=local: the FMA pass subtracts p.offset (read per tile); the tensor-core
// pass only when kLocal (the offsets in registers: the paper's instantiation is unchanged).
template <int D, bool kMma, bool kLocal = false>
__global__ void __launch_bounds__(kThreads, kMma ? Shape<D>::kMmaCtasPerSm : 1) score_kernel(IhipPrefillGpuParams p,
                                                                                          IhipPrefillStage st) {
  using S = Shape<D>;
  constexpr int kHalfD = D / 2, kQStride = S::kQStride;
  constexpr int kSlots = kMma ? kMmaSlots : S::kSlots, kChunks = kSlots / 2;
  constexpr int kSlotsPerRound = kThreads / 8;  // the gathers and the reduction: 8 threads per slot
  constexpr int kQuads = S::kQuads, kQTile = kMma ? kMmaQTile : S::kQTile;
  extern __shared__ __align__(16) float smem[];
  float* qT = smem;                 // [D][kQStride] the rotated queries, transposed
  float* kT = qT + D * kQStride;    // [D][kSlots] the pass's probe keys, rotated, transposed
  float* red = kT + D * kSlots;     // [kQuads][kSlots] per-thread maxima
  auto* kb = reinterpret_cast<__nv_bfloat16*>(smem);          // kMma: [kSlots][D] swizzled probe keys
  float* red_mma = reinterpret_cast<float*>(kb + kSlots * D);  // kMma: [kWarps][kSlots]
  QueryFrags<D> qf;  // kMma: the warp's queries (unused, so dropped, in the FMA scorer)
  __shared__ float off_s[kMma && kLocal ? kMmaQTile : 1];  // kMma && kLocal: the tile's offsets
  __shared__ Probe probe[kSlots];
  __shared__ float result[kSlots];
  __shared__ int lo[kChunks], hi[kChunks];
  __shared__ float path_best[kChunks];  // the running max of the chunk's probes (its score)
  const int tid = threadIdx.x, g = blockIdx.y;
  const int64_t b = blockIdx.z;
  const Block blk = block_of(p, b);
  const Cands c = block_cands(p, st, b, blk);
  const int64_t n_chunk = (c.n + st.l_c - 1) / st.l_c, keep = st.k / st.l_c;
  if (n_chunk > st.max_chunks) __trap();  // the host bound is broken: never write past the workspace
  const bool relative = p.rope_mode == 1;
  const int per_cta = kChunks;  // chunks per pass
  if (n_chunk <= keep || int64_t(blockIdx.x) * per_cta >= n_chunk) return;
  const int group = p.n_head / p.n_kv_head, n_qs = group * int(blk.rows);
  const int n_qtile = (n_qs + kQTile - 1) / kQTile;
  const int qq = tid % kQuads, ko = tid / kQuads;
  const auto* q = static_cast<const __nv_bfloat16*>(p.q);
  const auto* kp = static_cast<const __nv_bfloat16*>(p.k);

  // Queries t0 .. t0 + kQTile of the group (t = h' * rows + r), rotated (ihip_pack_queries).
  auto load_queries = [&](int t0) {  // element-fastest: each warp reads a query row's contiguous elements
    if constexpr (kMma) {  // bf16 into registers (rotated, rounded to bf16); one tile (t0 = 0)
      load_query_frags<D>(p, g, group, blk, n_qs, n_chunk, qf);
      if constexpr (kLocal) copy_tile_offsets(p, b, g, n_qs, off_s);
    } else {
    for (int i = tid; i < kQTile * kHalfD; i += kThreads) {
      const int tt = i / kHalfD, e = i % kHalfD, t = t0 + tt;
      float a = 0.f, bb = 0.f;
      if (t < n_qs) {
        const int h = g * group + t / int(blk.rows);
        const int64_t r = t % int(blk.rows), row = blk.row0 + r;
        const __nv_bfloat16* src = q + (row * p.n_head + h) * D;
        a = __bfloat162float(src[e]);
        bb = __bfloat162float(src[e + kHalfD]);
        if (p.rope_mode != 0) {
          const int64_t qp = query_pos(p.rope_mode, p.q_pos0 + row, n_chunk, p.n_stream);
          rotate(a, bb, p.rope_cos[qp * kHalfD + e], p.rope_sin[qp * kHalfD + e]);
        }
      }
      qT[e * kQStride + tt] = a;
      qT[(e + kHalfD) * kQStride + tt] = bb;
    }
    }
  };
  // One pass: result[s] = max over the group's queries of q~ . rot(key_s) for the n_slots probes.
  auto run_pass = [&](int n_slots) {
    if constexpr (kMma) {
      // gather: 8 threads per slot, D / 64 chunks of 16 bytes each (zeros for an unused slot)
      constexpr int kPer = D / 64;
#pragma unroll
      for (int round = 0; round < kSlots / kSlotsPerRound; ++round) {
        const int s = kSlotsPerRound * round + tid / 8;
        const int l = tid % 8;
        uint4 u[kPer];
#pragma unroll
        for (int c = 0; c < kPer; ++c) u[c] = make_uint4(0, 0, 0, 0);
        if (s < n_slots && probe[s].key >= 0) {
          const __nv_bfloat16* src = kp + (int64_t(probe[s].key) * p.n_kv_head + g) * D + 8 * kPer * l;
#pragma unroll
          for (int c = 0; c < kPer; ++c) u[c] = *reinterpret_cast<const uint4*>(src + 8 * c);
        }
        if (p.rope_mode != 0) {
          // Rotated at the probe's position, rounded to bf16: lane l's chunk kPer l + c pairs with
          // lane (l ^ 4)'s chunk c (D / 2 elements on); lanes below 4 keep the first halves.
          // Every thread runs every round (the shuffles need every lane).
          const bool on = s < n_slots && probe[s].key >= 0, low = l < 4;
#pragma unroll
          for (int c = 0; c < kPer; ++c) {
            uint4 o;
            o.x = __shfl_xor_sync(0xffffffffu, u[c].x, 4), o.y = __shfl_xor_sync(0xffffffffu, u[c].y, 4);
            o.z = __shfl_xor_sync(0xffffffffu, u[c].z, 4), o.w = __shfl_xor_sync(0xffffffffu, u[c].w, 4);
            if (on) {
              const int64_t e = int64_t(probe[s].kpos) * kHalfD + 8 * (kPer * (l % 4) + c);
              if (low)
                rotate_bf16x8(u[c], o, p.rope_cos + e, p.rope_sin + e);
              else
                rotate_bf16x8(o, u[c], p.rope_cos + e, p.rope_sin + e);
            }
          }
        }
#pragma unroll
        for (int c = 0; c < kPer; ++c) *reinterpret_cast<uint4*>(kb + swz<D>(s, kPer * l + c)) = u[c];
      }
      __syncthreads();
      mma_pass<D, kLocal>(qf, kb, n_qs, red_mma, off_s);
      __syncthreads();
      if (tid < n_slots) {
        float m = -INFINITY;
        for (int w = 0; w < kWarps; ++w)
          if (red_mma[w * kSlots + tid] > m) m = red_mma[w * kSlots + tid];
        result[tid] = m;
      }
      __syncthreads();
    } else {
    // gather: 8 threads per slot in the lane layout of hip_dot: lane l holds elements 64 c + 8 l
    // .. + 8 (c < D / 64), so the rotate-half pairs (i, i + D / 2) sit in runs c and c + D / 128;
    // at D = 64 in lanes l and l + 4, exchanged by a shuffle (every thread runs every round).
    constexpr int kRuns = D / 64;
#pragma unroll
    for (int round = 0; round < kSlots / kSlotsPerRound; ++round) {
      const int s = kSlotsPerRound * round + tid / 8;
      const int l = tid % 8;
      float y[8 * kRuns];
      const bool on = s < n_slots && probe[s].key >= 0;
      gather_key_lane<D>(y, on ? kp + (int64_t(probe[s].key) * p.n_kv_head + g) * D + 8 * l : nullptr,
                         on ? int64_t(probe[s].kpos) : 0, on, l, p);
#pragma unroll
      for (int c = 0; c < kRuns; ++c)
#pragma unroll
        for (int e = 0; e < 8; ++e) kT[(64 * c + 8 * l + e) * kSlots + s] = y[8 * c + e];
    }
    float best[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) best[j] = -INFINITY;
    for (int qt = 0; qt < n_qtile; ++qt) {
      if (n_qtile > 1) {
        __syncthreads();
        load_queries(qt * kQTile);
      }
      __syncthreads();
      float r[4][8];
      tile_dots<D>(qT, kT, qq, ko, r);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int t = qt * kQTile + 4 * qq + i;
        if (t < n_qs) {
          const float o = p.offset ? p.offset[(b * p.n_kv_head + g) * (group * kBlockQ) + t] : 0.f;  // rank=local
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const float v = p.offset ? __fsub_rn(r[i][j], o) : r[i][j];
            if (v > best[j]) best[j] = v;  // NaN never wins
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) red[qq * kSlots + 8 * ko + j] = best[j];
    __syncthreads();
    // max over the quads: 8 threads per slot, then across them (red holds no NaN); every thread
    // runs the same rounds (the shuffles need every lane)
#pragma unroll
    for (int round = 0; round < kSlots / kSlotsPerRound; ++round) {
      const int s = kSlotsPerRound * round + tid / 8;
      const int part = tid % 8;
      float m = -INFINITY;
      for (int i = part; i < kQuads; i += 8)
        if (red[i * kSlots + s] > m) m = red[i * kSlots + s];
#pragma unroll
      for (int off = 4; off; off >>= 1) {
        const float o = __shfl_xor_sync(0xffffffffu, m, off);
        if (o > m) m = o;
      }
      if (part == 0 && s < n_slots) result[s] = m;
    }
    __syncthreads();
    }
  };
  // Warms L2 with a key row the next step may probe (its gather then waits less).
  auto prefetch_key = [&](int32_t key) {
    const char* a = reinterpret_cast<const char*>(kp + (int64_t(key) * p.n_kv_head + g) * D);
#pragma unroll
    for (int o = 0; o < 2 * D; o += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(a + o));
  };

  if (n_qtile == 1) load_queries(0);  // else each pass loads its tiles
  int n_iter = 0;
  while ((1 << n_iter) < st.l_c) ++n_iter;
  // The CTA's groups of per_cta chunks, the queries loaded once for all of them.
  for (int64_t j0 = int64_t(blockIdx.x) * per_cta; j0 < n_chunk; j0 += int64_t(gridDim.x) * per_cta) {
    __syncthreads();
    const int64_t n_mine = n_chunk - j0 < per_cta ? n_chunk - j0 : per_cta;
    // Chunk i's entry count (the last chunk may be shorter).
    auto chunk_len = [&](int i) {
      const int64_t rest = c.n - (j0 + i) * st.l_c;
      return int(rest < st.l_c ? rest : st.l_c);
    };
    if (tid < per_cta) {
      lo[tid] = 0;
      hi[tid] = tid < n_mine ? chunk_len(tid) : 0;
      path_best[tid] = -INFINITY;
    }
    // Slot of chunk i's probe of entry e at RoPE branch br (0 left, 1 right).
    auto set_probe = [&](int slot, int i, int e, int br, bool on) {
      const int64_t j = j0 + i;
      probe[slot].key = on ? c.at(j * st.l_c + e) : -1;
      probe[slot].kpos = relative ? br : int32_t(j);
    };
    // Warms L2 with the two keys the next step probes if it keeps the half [a, a_end).
    auto prefetch_half = [&](int64_t first, int a, int a_end) {
      if (a_end - a <= 1) return;
      const int m = a + (a_end - a) / 2;
      prefetch_key(c.at(first + a + (m - a) / 2));
      prefetch_key(c.at(first + m + (a_end - m) / 2));
    };
    // ihip_select_rep's steps: slot i probes the middle of the left half at the left position,
    // slot per_cta + i the middle of the right half at the right one; the left half is kept only
    // when left > right (ties go right); every step's probes enter the running max.
    for (int it = 0; it < n_iter; ++it) {
      __syncthreads();
      if (tid < per_cta) {
        const bool active = tid < n_mine && hi[tid] - lo[tid] > 1;
        const int mid = lo[tid] + (hi[tid] - lo[tid]) / 2;
        set_probe(tid, tid, lo[tid] + (mid - lo[tid]) / 2, 0, active);
        set_probe(per_cta + tid, tid, mid + (hi[tid] - mid) / 2, 1, active);
        if (active && it + 1 < n_iter) {  // the next step probes the middles of one half's quarters
          const int64_t first = (j0 + tid) * st.l_c;
          prefetch_half(first, lo[tid], mid);
          prefetch_half(first, mid, hi[tid]);
        }
      }
      __syncthreads();
      run_pass(2 * per_cta);
      if (tid < per_cta && tid < n_mine && hi[tid] - lo[tid] > 1) {
        const int mid = lo[tid] + (hi[tid] - lo[tid]) / 2;
        const float left = result[tid], right = result[per_cta + tid];
        if (left > right)
          hi[tid] = mid;
        else
          lo[tid] = mid;  // ties go right
        path_best[tid] = max_as_std(path_best[tid], max_as_std(left, right));
      }
    }
    // The representative after the loop: relative RoPE probes it at both positions (right, then
    // left, as the CPU), the other modes only for a one-entry chunk. The barrier also publishes lo.
    const bool one_entry = __syncthreads_or(tid < n_mine && chunk_len(tid) == 1);
    if (relative || one_entry) {
      if (tid < per_cta) {
        const bool on = tid < n_mine && (relative || chunk_len(tid) == 1);
        set_probe(tid, tid, lo[tid], 1, on);
        set_probe(per_cta + tid, tid, lo[tid], 0, on && relative);
      }
      __syncthreads();
      run_pass(relative ? 2 * per_cta : per_cta);
      if (tid < n_mine && (relative || chunk_len(tid) == 1)) {
        path_best[tid] = max_as_std(path_best[tid], result[tid]);
        if (relative) path_best[tid] = max_as_std(path_best[tid], result[per_cta + tid]);
      }
    }
    if (tid < n_mine) st.scores[(b * p.n_kv_head + g) * st.max_chunks + j0 + tid] = path_best[tid];
  }
}

// The tensor-core scorer without RoPE, pipelined: the CTA walks its chunk groups in two lanes
// (groups 0, 2, 4, .. and 1, 3, 5, ..), alternating one bisection step of each, so one lane's
// probe keys travel (cp.async into its own key buffer) while the other lane's probes are scored.
// Warp w owns chunks 4w .. 4w + 3 of each lane's group (probe slots 4w + k left, kMmaChunks + 4w
// + k right): after a step's mma it reduces its 8 slots over the warps, moves its chunks'
// bisection (lane k < 4 of the warp holds chunk 4w + k) and issues their next probes' copies, with
// no barrier between; a step costs 2 barriers (keys landed, maxima written). The probes, their
// order and the mma operands are score_kernel<D, true>'s with RoPE none, and a probe's maximum is
// over the same values, so the scores are equal.
// kWg: the dots on wgmma (wgmma_pass; the keys in its swizzled layout, the queries in its fragment
// order): the same probes and maxima, each dot summed in the wgmma's fp32 order instead of
// mma.sync's (scores within fp32 rounding of the mma.sync kernel's, equal on exact-dot inputs).
// At D = 64 the wgmma form takes 2 CTAs an SM, not 3: at <= 85 registers ptxas serialises its
// wgmmas (C7512). kLocal (rank=local): each row's dots minus its offset (p.offset, in registers)
// before the maxima.
template <int D, bool kWg, bool kLocal = false>
__global__ void __launch_bounds__(kThreads, kWg && D == 64 ? 2 : Shape<D>::kMmaCtasPerSm)
    score_kernel_pipelined(IhipPrefillGpuParams p, IhipPrefillStage st) {
  constexpr int kSlots = kMmaSlots, kChunks = kMmaChunks;
  constexpr int kOwned = kChunks / kWarps;  // chunks a warp owns (4): 2 probe slots each
  constexpr int kRowChunks = D / 8;         // 16-byte chunks of a key row
  constexpr int kPerLane = kRowChunks * 2 * kOwned / 32;  // a warp's copies per lane (4 at D = 128)
  static_assert(kOwned == 4 && 2 * kOwned * kRowChunks % 32 == 0, "a warp owns 4 chunks, 8 probe rows");
  extern __shared__ __align__(16) float smem[];
  // [2 lanes][kSlots][D] swizzled probe keys (kWg: from the first 1024-byte boundary)
  auto* kb = reinterpret_cast<__nv_bfloat16*>(reinterpret_cast<char*>(smem) +
                                              (kWg ? (1024u - (mma::smem_u32(smem) & 1023u)) & 1023u : 0u));
  float* red = reinterpret_cast<float*>(kb + 2 * kSlots * D);  // [kWarps][kSlots] per-warp maxima
  __shared__ int lo[2][kChunks], hi[2][kChunks];  // each entry read and written by its owner lane only
  __shared__ float path_best[2][kChunks];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = blockIdx.y;
  const int64_t b = blockIdx.z;
  const Block blk = block_of(p, b);
  const Cands c = block_cands(p, st, b, blk);
  const int64_t n_chunk = (c.n + st.l_c - 1) / st.l_c, keep = st.k / st.l_c;
  if (n_chunk > st.max_chunks) __trap();  // the host bound is broken: never write past the workspace
  if (n_chunk <= keep || int64_t(blockIdx.x) * kChunks >= n_chunk) return;
  const int n_qs = p.n_head / p.n_kv_head * int(blk.rows);
  const auto* kp = static_cast<const __nv_bfloat16*>(p.k);
  std::conditional_t<kWg, WgQueryFrags<D>, QueryFrags<D>> qf;
  if constexpr (kWg)
    load_query_frags_wg<D>(p, g, p.n_head / p.n_kv_head, blk, n_qs, qf);
  else
    load_query_frags<D>(p, g, p.n_head / p.n_kv_head, blk, n_qs, n_chunk, qf);
  __shared__ float off_s[kLocal ? kMmaQTile : 1];  // kLocal: the tile's offsets
  if constexpr (kLocal) copy_tile_offsets(p, b, g, n_qs, off_s);  // read after the first pass's barrier
  int n_iter = 0;
  while ((1 << n_iter) < st.l_c) ++n_iter;
  // Chunk j's entry count (the last chunk may be shorter).
  auto chunk_len = [&](int64_t j) {
    const int64_t rest = c.n - j * st.l_c;
    return int(rest < st.l_c ? rest : st.l_c);
  };
  // The group's steps: n_iter bisection steps, then one probe of the representative where a chunk
  // has one entry (ihip_select_rep scores a one-entry chunk by its only key).
  const bool last_one = chunk_len(n_chunk - 1) == 1;  // the last chunk has one entry (once, not every pass)
  auto n_steps = [&](int64_t j0) {
    const bool one_entry = st.l_c == 1 || (last_one && j0 + kChunks >= n_chunk);
    return n_iter + (one_entry ? 1 : 0);
  };
  const int own = kOwned * warp + lane % kOwned;  // the chunk of lane lane % 4's state
  auto prefetch_key = [&](int32_t key) {  // warms L2 with a key row a later step may probe
    const char* a = reinterpret_cast<const char*>(kp + (int64_t(key) * p.n_kv_head + g) * D);
#pragma unroll
    for (int o = 0; o < 2 * D; o += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(a + o));
  };
  auto prefetch_half = [&](int64_t first, int a, int a_end) {  // the two keys a step keeping [a, a_end) probes
    if (a_end - a <= 1) return;
    const int m = a + (a_end - a) / 2;
    prefetch_key(c.at(first + a + (m - a) / 2));
    prefetch_key(c.at(first + m + (a_end - m) / 2));
  };
  // Warp-wide: the probes of step it of lane x's group j0 for the warp's chunks, copied into the
  // lane's key buffer (an unused slot zero-filled), as one cp.async group.
  auto issue = [&](int x, int64_t j0, int it) {
    int32_t left = -1, right = -1;
    if (lane < kOwned) {
      const int64_t j = j0 + own, first = j * st.l_c;
      const int l = lo[x][own], h = hi[x][own];
      if (it < n_iter) {  // slot left: the middle of the left half, right: of the right half
        if (j < n_chunk && h - l > 1) {
          const int mid = l + (h - l) / 2;
          left = c.at(first + l + (mid - l) / 2);
          right = c.at(first + mid + (h - mid) / 2);
          if (p.l2_prefetch && it + 1 < n_iter) {
            prefetch_half(first, l, mid);
            prefetch_half(first, mid, h);
          }
        }
      } else if (j < n_chunk && chunk_len(j) == 1) {
        left = c.at(first + l);
      }
    }
    constexpr int kRowLanes = 32 / (2 * kOwned);  // 8 rows, 4 lanes each
    const int row = lane / kRowLanes, part = lane % kRowLanes;
    const int32_t key_l = __shfl_sync(0xffffffffu, left, row % kOwned);
    const int32_t key_r = __shfl_sync(0xffffffffu, right, row % kOwned);
    const int32_t key = row < kOwned ? key_l : key_r;
    const int slot = (row < kOwned ? 0 : kChunks) + kOwned * warp + row % kOwned;
    // the lane's first chunk; chunk kRowLanes u + part is kRowLanes u chunks on (constant offsets)
    const __nv_bfloat16* src = kp + (int64_t(key < 0 ? 0 : key) * p.n_kv_head + g) * D + 8 * part;
    __nv_bfloat16* dst = kb + x * kSlots * D;
#pragma unroll
    for (int u = 0; u < kPerLane; ++u) {  // a row's 4 lanes copy 64 consecutive bytes at a time
      const int ch = kRowLanes * u + part;
      mma::cp_async16(mma::smem_u32(dst + (kWg ? sw128<D>(slot, ch) : swz<D>(slot, ch))), src + 8 * kRowLanes * u,
                      key < 0 ? 0 : 16);
    }
    mma::cp_async_commit();
  };
  auto init_group = [&](int x, int64_t j0) {
    if (lane < kOwned) {
      const int64_t j = j0 + own;
      lo[x][own] = 0;
      hi[x][own] = j < n_chunk ? chunk_len(j) : 0;
      path_best[x][own] = -INFINITY;
    }
    __syncwarp();
  };
  // Warp-wide, after step it's maxima are in red: slot 4w + k's and kChunks + 4w + k's maxima over
  // the warps reach lane k, which moves chunk 4w + k as ihip_select_rep does.
  auto finish = [&](int x, int64_t j0, int it) {
    const int s = lane % (2 * kOwned), slot = (s < kOwned ? 0 : kChunks) + kOwned * warp + s % kOwned;
    float m = -INFINITY;  // a NaN in red (all of a warp's rows NaN) never wins
    constexpr int kWarpStep = 32 / (2 * kOwned);  // the lanes reading one slot: 4, each kWarps / 4 warps
#pragma unroll
    for (int i = 0; i < kWarps / kWarpStep; ++i) {
      const float r = red[(lane / (2 * kOwned) + kWarpStep * i) * kSlots + slot];
      if (r > m) m = r;
    }
#pragma unroll
    for (int off = 2 * kOwned; off < 32; off *= 2) {
      const float o = __shfl_xor_sync(0xffffffffu, m, off);
      if (o > m) m = o;
    }
    const float right = __shfl_down_sync(0xffffffffu, m, kOwned), left = m;
    if (lane < kOwned) {
      const int64_t j = j0 + own;
      const int l = lo[x][own], h = hi[x][own];
      if (it < n_iter) {
        if (j < n_chunk && h - l > 1) {
          const int mid = l + (h - l) / 2;
          if (left > right)
            hi[x][own] = mid;
          else
            lo[x][own] = mid;  // ties go right
          path_best[x][own] = max_as_std(path_best[x][own], max_as_std(left, right));
        }
      } else if (j < n_chunk && chunk_len(j) == 1) {
        path_best[x][own] = max_as_std(path_best[x][own], left);
      }
    }
    __syncwarp();
  };

  // Every thread follows both lanes' (group j, step it) alike, so the loop's branches are uniform:
  // the lane to step now (x) and the other (y), swapped after every step (registers, no indexing).
  struct LaneState {
    int x;       // the lane: its key buffer and chunk states
    int64_t j;   // its group's first chunk (>= n_chunk: no group left)
    int it;      // its step in the group
  };
  const int64_t stride = 2 * int64_t(gridDim.x) * kChunks;
  LaneState now{0, int64_t(blockIdx.x) * kChunks, 0}, other{1, (int64_t(blockIdx.x) + gridDim.x) * kChunks, 0};
  init_group(0, now.j);
  issue(0, now.j, 0);
  if (other.j < n_chunk) {
    init_group(1, other.j);
    issue(1, other.j, 0);
  } else {
    mma::cp_async_commit();  // an empty group: each lane's copies stay one group apart
  }
  bool other_issued_last = true;  // the other lane's copies are the newest committed group
  while (now.j < n_chunk || other.j < n_chunk) {
    if (now.j >= n_chunk) {  // this lane is done: the other steps alone
      const LaneState t = now;
      now = other, other = t;
      other_issued_last = false;
      continue;
    }
    if (other_issued_last)
      mma::cp_async_wait<1>();  // the other lane's newer copies may still travel
    else
      mma::cp_async_wait<0>();
    if constexpr (kWg) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // wgmma reads async
    __syncthreads();  // every warp's copies for this lane landed; red's last readers are done
    if constexpr (kWg)
      wgmma_pass<D, kLocal>(qf, mma::smem_u32(kb + now.x * kSlots * D), n_qs, red, off_s);
    else
      mma_pass<D, kLocal>(qf, kb + now.x * kSlots * D, n_qs, red, off_s);
    __syncthreads();  // red holds every warp's maxima; this lane's key buffer is free
    finish(now.x, now.j, now.it);
    if (++now.it == n_steps(now.j)) {
      if (lane < kOwned && now.j + own < n_chunk)
        st.scores[(b * p.n_kv_head + g) * st.max_chunks + now.j + own] = path_best[now.x][own];
      now.j += stride;
      now.it = 0;
      if (now.j < n_chunk) init_group(now.x, now.j);
    }
    if (now.j < n_chunk)
      issue(now.x, now.j, now.it);
    else
      mma::cp_async_commit();
    const LaneState t = now;
    now = other, other = t;
    other_issued_last = true;
  }
}

// rank=local's offsets of block z's rows for KV head y (ihip_local_offsets): the local keys (the
// sinks, then the window of the block's last row) kSlots at a time, gathered in the FMA scorer's
// lane layout (8 threads a key, rotated at the local position: its gather), against the block's
// queries (kQTile at a time, rotated as the FMA scorer loads them) by tile_dots (hip_dot's
// order); a key counts for the rows at or after it (causal). Running max per query in registers,
// then over the kOctets threads that share a query quad.
template <int D>
__global__ void __launch_bounds__(kThreads, 1) offsets_kernel(IhipPrefillGpuParams p, IhipPrefillStage st) {
  using S = Shape<D>;
  constexpr int kHalfD = D / 2, kQStride = S::kQStride, kSlots = S::kSlots, kQTile = S::kQTile;
  constexpr int kQuads = S::kQuads, kOctets = S::kOctets, kSlotsPerRound = kThreads / 8, kRuns = D / 64;
  extern __shared__ __align__(16) float smem[];
  float* qT = smem;               // [D][kQStride] the rotated queries, transposed
  float* kT = qT + D * kQStride;  // [D][kSlots] the pass's local keys, rotated, transposed
  float* red = kT + D * kSlots;   // [kOctets][kQTile] per-thread maxima
  __shared__ int32_t key_of[kSlots];
  const int tid = threadIdx.x, g = blockIdx.y;
  const int64_t b = blockIdx.z;
  const Block blk = block_of(p, b);
  const Cands c = block_cands(p, st, b, blk);
  const int64_t n_chunk = (c.n + st.l_c - 1) / st.l_c, keep = st.k / st.l_c;
  if (n_chunk <= keep) return;  // the stage keeps every candidate: nothing is scored
  const int group = p.n_head / p.n_kv_head, n_qs = group * int(blk.rows);
  const int n_qtile = (n_qs + kQTile - 1) / kQTile;
  const int qq = tid % kQuads, ko = tid / kQuads;
  const auto* q = static_cast<const __nv_bfloat16*>(p.q);
  const auto* kp = static_cast<const __nv_bfloat16*>(p.k);
  const int64_t pos0 = p.q_pos0 + blk.row0;
  const int64_t n_sink = p.n_sink < blk.q_last + 1 ? p.n_sink : blk.q_last + 1;
  const int64_t win = blk.q_last - p.n_stream + 1 > p.n_sink ? blk.q_last - p.n_stream + 1 : p.n_sink;
  const int64_t n_loc = n_sink + (blk.q_last + 1 - win > 0 ? blk.q_last + 1 - win : 0);
  const int64_t kpos = p.rope_mode == 1 ? 0 : n_chunk - 1;  // ihip_local_key_pos (n_chunk > keep >= 1)
  float* out = p.offset + (b * p.n_kv_head + g) * (int64_t(group) * kBlockQ);
  for (int qt = 0; qt < n_qtile; ++qt) {
    __syncthreads();
    for (int i = tid; i < kQTile * kHalfD; i += kThreads) {  // score_kernel's FMA load_queries
      const int tt = i / kHalfD, e = i % kHalfD, t = qt * kQTile + tt;
      float a = 0.f, bb = 0.f;
      if (t < n_qs) {
        const int h = g * group + t / int(blk.rows);
        const int64_t row = blk.row0 + t % int(blk.rows);
        const __nv_bfloat16* src = q + (row * p.n_head + h) * D;
        a = __bfloat162float(src[e]);
        bb = __bfloat162float(src[e + kHalfD]);
        if (p.rope_mode != 0) {
          const int64_t qp = query_pos(p.rope_mode, p.q_pos0 + row, n_chunk, p.n_stream);
          rotate(a, bb, p.rope_cos[qp * kHalfD + e], p.rope_sin[qp * kHalfD + e]);
        }
      }
      qT[e * kQStride + tt] = a;
      qT[(e + kHalfD) * kQStride + tt] = bb;
    }
    float best[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) best[i] = -INFINITY;
    for (int64_t base = 0; base < n_loc; base += kSlots) {
      __syncthreads();  // the previous pass's keys are read
#pragma unroll
      for (int round = 0; round < kSlots / kSlotsPerRound; ++round) {  // score_kernel's FMA gather
        const int s = kSlotsPerRound * round + tid / 8, l = tid % 8;
        const int64_t i = base + s;
        const bool on = i < n_loc;
        const int64_t key = on ? (i < n_sink ? i : win + (i - n_sink)) : 0;
        if (l == 0) key_of[s] = on ? int32_t(key) : INT32_MAX;  // INT32_MAX: counts for no row
        float y[8 * kRuns];
        gather_key_lane<D>(y, kp + (key * p.n_kv_head + g) * D + 8 * l, kpos, on, l, p);
#pragma unroll
        for (int cc = 0; cc < kRuns; ++cc)
#pragma unroll
          for (int e = 0; e < 8; ++e) kT[(64 * cc + 8 * l + e) * kSlots + s] = y[8 * cc + e];
      }
      __syncthreads();
      float r[4][8];
      tile_dots<D>(qT, kT, qq, ko, r);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int t = qt * kQTile + 4 * qq + i;
        const int64_t pos = pos0 + t % int(blk.rows);
#pragma unroll
        for (int j = 0; j < 8; ++j)
          if (t < n_qs && key_of[8 * ko + j] <= pos && r[i][j] > best[i]) best[i] = r[i][j];  // NaN never wins
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) red[ko * kQTile + 4 * qq + i] = best[i];
    __syncthreads();
    if (tid < kQTile && qt * kQTile + tid < n_qs) {
      float m = -INFINITY;
      for (int o = 0; o < kOctets; ++o)
        if (red[o * kQTile + tid] > m) m = red[o * kQTile + tid];
      out[qt * kQTile + tid] = m;
    }
  }
}

__global__ void __launch_bounds__(kSelectThreads) select_kernel(IhipPrefillGpuParams p, IhipPrefillStage st) {
  extern __shared__ __align__(16) char sel_smem[];
  const int64_t b = blockIdx.x;
  const Cands c = block_cands(p, st, b, block_of(p, b));
  const float* sc = st.scores + b * p.n_kv_head * st.max_chunks;
  const int n_kv = p.n_kv_head;
  const int64_t mc = st.max_chunks;
  auto score = [sc, n_kv, mc](int64_t i) {  // max over KV heads (NaN never wins)
    float m = -INFINITY;
    for (int g = 0; g < n_kv; ++g)
      if (sc[g * mc + i] > m) m = sc[g * mc + i];
    return m;
  };
  select_chunks(c, st.l_c, st.k / st.l_c, st.max_chunks, score, st.out + b * st.out_cap, st.out_len + b, sel_smem);
}

__global__ void index_kernel(IhipPrefillIndexParams p) {
  const int64_t b = blockIdx.x, R = p.ranges_per_blk(), kmax = p.sel_cap / p.l_c;
  const int64_t rows = p.n_q - b * kBlockQ < kBlockQ ? p.n_q - b * kBlockQ : kBlockQ;
  const int64_t q_last = p.q_pos0 + b * kBlockQ + rows - 1, end = q_last + 1;
  const int64_t w = q_last - p.n_stream + 1 > p.n_sink ? q_last - p.n_stream + 1 : p.n_sink;
  const int32_t* sel = p.sel + b * p.sel_cap;
  const int64_t n = p.sel_len[b], n_run = (n + p.l_c - 1) / p.l_c;
  int32_t* rg = p.ranges + 2 * b * R;
  for (int64_t i = threadIdx.x; i < R; i += blockDim.x) {
    int64_t a, e;
    if (i == 0) {
      a = 0, e = p.n_sink < end ? p.n_sink : end;
    } else if (i <= kmax && i - 1 < n_run) {  // the run's entries are consecutive positions
      const int64_t f = (i - 1) * p.l_c, len = n - f < p.l_c ? n - f : p.l_c;
      a = sel[f], e = sel[f] + len;
    } else if (i <= kmax) {
      a = e = w;
    } else {
      a = w, e = end > w ? end : w;
    }
    rg[2 * i] = int32_t(a);
    rg[2 * i + 1] = int32_t(e);
  }
  if (threadIdx.x == 0) {
    p.range_ptr[b + 1] = (b + 1) * R;
    p.col_ptr[b + 1] = 0;
    if (b == 0) p.range_ptr[0] = p.col_ptr[0] = 0;
  }
}

size_t g_score_smem[3][2][4] = {}, g_select_smem = 0, g_offsets_smem[3] = {};  // score: [head_dim 64, 128, 256][rank=local][kind]
constexpr int dim_slot(int D) { return D == 64 ? 0 : D == 128 ? 1 : 2; }

void allow_smem(const void* kernel, size_t bytes, size_t& done, const char* what) {
  if (bytes <= done) return;
  int dev = 0, limit = 0;
  LC_CUDA_CHECK(cudaGetDevice(&dev), "ihip device");
  LC_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "ihip smem limit");
  // + the score kernel's static arrays (probe slots, results, chunk states: <= 1.2 KB)
  LC_REQUIRE(bytes + 2048 <= size_t(limit), "infinitehip: %s needs %zu bytes of shared memory, over the device's %d", what,
             bytes, limit);
  LC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)), "ihip smem %s",
                what);
  done = bytes;
}

void check_prefill(const IhipPrefillGpuParams& p, const IhipPrefillStage& st) {
  LC_REQUIRE(p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256,
             "infinitehip: GPU pruning needs head_dim 64, 128 or 256, got %d", p.head_dim);
  LC_REQUIRE(p.n_kv_head >= 1 && p.n_head % p.n_kv_head == 0,
             "infinitehip: GPU pruning needs n_head a multiple of n_kv_head (got %d / %d)", p.n_head, p.n_kv_head);
  LC_REQUIRE(p.n_blk() <= 65535, "infinitehip: a prefill chunk of %lld queries exceeds 65535 query blocks",
             (long long)p.n_q);
  LC_REQUIRE(st.l_c >= 1 && st.k >= st.l_c && st.k % st.l_c == 0 && st.out_cap >= st.k && st.max_chunks >= 1,
             "internal: infinitehip stage l_c=%d k=%lld out_cap=%lld", st.l_c, (long long)st.k, (long long)st.out_cap);
  LC_REQUIRE(p.rope_mode == 0 || (p.rope_cos && p.rope_sin), "internal: infinitehip RoPE table missing");
  LC_REQUIRE(p.n_kv < (int64_t(1) << 31), "infinitehip: %lld keys exceed 2^31", (long long)p.n_kv);
}

}  // namespace

// The tensor-core scorer's case: a KV head's queries of a block (group x 64) in one tile, and
// RoPE none (the queries and keys are bf16 as stored) or a RoPE mode with rope_tensor_cores;
// rank=local (offset set) alike (the kLocal instantiations).
bool prefill_uses_mma(const IhipPrefillGpuParams& p) {
  return (p.rope_mode == 0 || p.rope_tensor_cores) && int64_t(p.n_head / p.n_kv_head) * kBlockQ <= kMmaQTile;
}

namespace {

// The score kernel of kind (0 FMA, 1 tensor cores with RoPE, 2 pipelined mma.sync, 3 pipelined
// wgmma), rank=local's (kLocal) or the paper's; the FMA scorer reads p.offset itself.
template <int D, bool kLocal>
void launch_score_kind(int kind, const dim3& grid, size_t bytes, const IhipPrefillGpuParams& p,
                       const IhipPrefillStage& st, cudaStream_t stream) {
  auto go = [&](auto kernel) {
    allow_smem(reinterpret_cast<const void*>(kernel), bytes, g_score_smem[dim_slot(D)][kLocal ? 1 : 0][kind],
               "the prefill queries");
    kernel<<<grid, kThreads, bytes, stream>>>(p, st);
  };
  if (kind == 3)
    go(score_kernel_pipelined<D, true, kLocal>);
  else if (kind == 2)
    go(score_kernel_pipelined<D, false, kLocal>);
  else if (kind == 1)
    go(score_kernel<D, true, kLocal>);
  else
    go(score_kernel<D, false>);
}

template <int D>
void launch_score_prefill(const IhipPrefillGpuParams& p, const IhipPrefillStage& st, cudaStream_t stream) {
  const bool mma = prefill_uses_mma(p);
  const int per_cta = mma ? kMmaChunks : Shape<D>::kChunks;
  // FMA, tensor cores with RoPE, pipelined mma.sync, pipelined wgmma
  const int kind = !mma ? 0 : p.rope_mode != 0 ? 1 : p.wgmma_scorer ? 3 : 2;
  const size_t bytes = kind == 3   ? Shape<D>::kWgSmem
                       : kind == 2 ? Shape<D>::kPipeSmem
                       : kind == 1 ? Shape<D>::kMmaSmem
                                   : Shape<D>::kScoreSmem;
  // CTAs per (block, KV head): enough for ~4 waves over the SMs, each looping over its share of
  // the chunk groups (the queries are loaded once per CTA).
  static int n_sm = 0;
  if (!n_sm) {
    int dev = 0;
    LC_CUDA_CHECK(cudaGetDevice(&dev), "ihip device");
    LC_CUDA_CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev), "ihip SM count");
  }
  const int64_t groups = (st.max_chunks + per_cta - 1) / per_cta, pairs = p.n_blk() * p.n_kv_head;
  const int64_t per_pair = std::min<int64_t>(groups, std::max<int64_t>(1, (4 * n_sm + pairs - 1) / pairs));
  const dim3 grid(unsigned(per_pair), unsigned(p.n_kv_head), unsigned(p.n_blk()));
  if (p.offset)
    launch_score_kind<D, true>(kind, grid, bytes, p, st, stream);
  else
    launch_score_kind<D, false>(kind, grid, bytes, p, st, stream);
  LC_LAUNCH_CHECK("ihip prefill score l_c=%d max_chunks=%lld kind=%d d=%d local=%d", st.l_c,
                  (long long)st.max_chunks, kind, D, int(p.offset != nullptr));
}

}  // namespace

void ihip_score_prefill(const IhipPrefillGpuParams& p, const IhipPrefillStage& st, Stream s) {
  check_prefill(p, st);
  if (p.n_q <= 0) return;
  const auto stream = static_cast<cudaStream_t>(s);
  if (p.head_dim == 64)
    launch_score_prefill<64>(p, st, stream);
  else if (p.head_dim == 128)
    launch_score_prefill<128>(p, st, stream);
  else
    launch_score_prefill<256>(p, st, stream);
}

void ihip_select_prefill(const IhipPrefillGpuParams& p, const IhipPrefillStage& st, Stream s) {
  check_prefill(p, st);
  if (p.n_q <= 0) return;
  const size_t bytes = select_smem(st.max_chunks, st.k / st.l_c);
  allow_smem(reinterpret_cast<const void*>(select_kernel), bytes, g_select_smem, "the chunk ranking");
  select_kernel<<<unsigned(p.n_blk()), kSelectThreads, bytes, static_cast<cudaStream_t>(s)>>>(p, st);
  LC_LAUNCH_CHECK("ihip prefill select l_c=%d max_chunks=%lld", st.l_c, (long long)st.max_chunks);
}

void ihip_offsets_prefill(const IhipPrefillGpuParams& p, const IhipPrefillStage& st, Stream s) {
  check_prefill(p, st);
  LC_REQUIRE(p.offset, "internal: infinitehip offsets without a workspace");
  if (p.n_q <= 0) return;
  const auto stream = static_cast<cudaStream_t>(s);
  const dim3 grid(1, unsigned(p.n_kv_head), unsigned(p.n_blk()));
  auto launch = [&](auto kernel, size_t bytes, size_t& done) {
    allow_smem(reinterpret_cast<const void*>(kernel), bytes, done, "the offsets' queries");
    kernel<<<grid, kThreads, bytes, stream>>>(p, st);
  };
  if (p.head_dim == 64)
    launch(offsets_kernel<64>, Shape<64>::kScoreSmem, g_offsets_smem[0]);
  else if (p.head_dim == 128)
    launch(offsets_kernel<128>, Shape<128>::kScoreSmem, g_offsets_smem[1]);
  else
    launch(offsets_kernel<256>, Shape<256>::kScoreSmem, g_offsets_smem[2]);
  LC_LAUNCH_CHECK("ihip prefill offsets l_c=%d d=%d", st.l_c, p.head_dim);
}

void ihip_prune_stage_prefill(const IhipPrefillGpuParams& p, const IhipPrefillStage& st, Stream s) {
  if (p.offset) ihip_offsets_prefill(p, st, s);
  ihip_score_prefill(p, st, s);
  ihip_select_prefill(p, st, s);
}

void ihip_prefill_index(const IhipPrefillIndexParams& p, Stream s) {
  if (p.n_q <= 0) return;
  LC_REQUIRE(p.l_c >= 1 && p.sel_cap % p.l_c == 0, "internal: infinitehip index l_c=%d sel_cap=%lld", p.l_c,
             (long long)p.sel_cap);
  index_kernel<<<unsigned(p.n_blk()), 128, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("ihip prefill index n_q=%lld", (long long)p.n_q);
}

}  // namespace longctx::cuda

// fa2_tile.cuh (cuda, internal): the per-warp steps of the FlashAttention-2-style mma.sync
// kernels, shared by the dense prefill (attention_prefill.cu) and the generic sparse prefill
// (sparse_attention_generic.cu), which differ only in which 64-key tiles they stream and how
// they mask them.
//
// A warp owns 16 query rows; a lane holds rows g = lane / 4 and g + 8 (r = 0, 1) of every
// m16n8 fragment. Tiles are [64 keys][D] bf16 in shared memory with the 128-byte swizzle of
// mma.cuh swz<D>. Scores s[nt][e] (nt = 8-key group, e = fragment element) are in the log2
// domain after the caller scales and masks them (-inf = masked); m_r / l_r are the running
// max and this lane's partial row sums, oacc [D/8][4] the unnormalised output.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/cuda/mma.cuh"

namespace longctx::cuda::fa2 {

using namespace mma;

// The warp's Q fragments (rows warp*16 .. +15 of the Q tile at sQ), loaded once per CTA.
template <int D>
__device__ __forceinline__ void load_q_frags(uint32_t (&qf)[D / 16][4], uint32_t sQ, int warp, int lane) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    ldmatrix_x4(sQ + swz<D>(warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, 2 * kk + (lane >> 4)), qf[kk][0],
                qf[kk][1], qf[kk][2], qf[kk][3]);
}

// s = Q K^T for the 64-key tile at kbase (raw dot products).
template <int D>
__device__ __forceinline__ void qk_tile(float (&s)[8][4], const uint32_t (&qf)[D / 16][4], uint32_t kbase, int lane) {
#pragma unroll
  for (int i = 0; i < 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4(kbase + swz<D>(np * 16 + (lane & 7) + (lane >> 4) * 8, 2 * kk + ((lane >> 3) & 1)), b0, b1, b2, b3);
      mma_bf16_16816(s[2 * np], qf[kk], b0, b1);
      mma_bf16_16816(s[2 * np + 1], qf[kk], b2, b3);
    }
  }
}

// The same with the warp's Q fragments read from the Q tile at sQ for every k-step instead of
// registers: head_dim 256, whose 64 Q-fragment registers would spill next to the [256/8][4]
// output accumulator (one more ldmatrix per 4 of K).
template <int D>
__device__ __forceinline__ void qk_tile_smem_q(float (&s)[8][4], uint32_t sQ, int warp, uint32_t kbase, int lane) {
#pragma unroll
  for (int i = 0; i < 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t qa[4];
    ldmatrix_x4(sQ + swz<D>(warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, 2 * kk + (lane >> 4)), qa[0], qa[1], qa[2],
                qa[3]);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4(kbase + swz<D>(np * 16 + (lane & 7) + (lane >> 4) * 8, 2 * kk + ((lane >> 3) & 1)), b0, b1, b2, b3);
      mma_bf16_16816(s[2 * np], qa, b0, b1);
      mma_bf16_16816(s[2 * np + 1], qa, b2, b3);
    }
  }
}

// Online softmax over one tile of scaled, masked scores (NT n-tiles of 8 keys per warp row
// pair: 8 for the prefill kernels' 64-key tiles, 2 for decode's 16 keys per warp): new row max,
// s -> exp2(s - max), running sums and output rescaled by exp2(old max - new max). The one
// online-softmax step of the mma.sync kernels (dense prefill, generic sparse, dense and sparse
// decode: decode_split.cuh).
template <int D, int NT>
__device__ __forceinline__ void softmax_update(float (&s)[NT][4], float (&m_r)[2], float (&l_r)[2],
                                               float (&oacc)[D / 8][4]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m_r[r], mx);
    const float m_use = m_new == -INFINITY ? 0.f : m_new;  // nothing visible yet: avoid inf - inf
    const float corr = exp2f(m_r[r] - m_use);
    m_r[r] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
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
}

// oacc += P V for the tile's V at vbase (P = s, packed to bf16: the C fragment of S is the A
// fragment of P V, so P never leaves registers).
template <int D>
__device__ __forceinline__ void pv_tile(const float (&s)[8][4], uint32_t vbase, float (&oacc)[D / 8][4], int lane) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {  // 16 keys per k-step
    const uint32_t pa[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                            pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                            pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4_trans(vbase + swz<D>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, 2 * dp + (lane >> 4)), b0, b1, b2,
                        b3);
      mma_bf16_16816(oacc[2 * dp], pa, b0, b1);
      mma_bf16_16816(oacc[2 * dp + 1], pa, b2, b3);
    }
  }
}

// Epilogue, part 1: full row sums (quad reduce, written back to l_r) and the normalised output
// rows packed to bf16 into the warp's 16 rows of the (swizzled) tile at sO.
template <int D>
__device__ __forceinline__ void stage_output(const float (&oacc)[D / 8][4], float (&l_r)[2], uint32_t sO, int warp,
                                             int lane) {
  float inv_l[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_r[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    l_r[r] = l;
    inv_l[r] = l > 0.f ? 1.f / l : 0.f;
  }
  const int g = lane >> 2, tq = lane & 3;
  __syncwarp();  // the warp's Q rows (read by its ldmatrix at the start) may be overwritten below
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    const uint32_t lo = pack_bf16(oacc[dt][0] * inv_l[0], oacc[dt][1] * inv_l[0]);
    const uint32_t hi = pack_bf16(oacc[dt][2] * inv_l[1], oacc[dt][3] * inv_l[1]);
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sO + swz<D>(warp * 16 + g, dt) + 4 * tq), "r"(lo));
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sO + swz<D>(warp * 16 + g + 8, dt) + 4 * tq), "r"(hi));
  }
  __syncwarp();
}

// Epilogue, part 2: the warp's staged rows to o (16-byte stores; rows at or past n_q skipped)
// and, when lse is set, each row's natural-log LSE (-inf for a row that saw no key).
// o, lse: the whole tensors ([n_q, ldo] bf16 and [heads, n_q] fp32, lse optional); h: the head
// (columns h*D.. of o, row h of lse); row_warp0: query index of the warp's row 0;
// row_g: of this lane's row g (= row_warp0 + lane / 4, which the caller already holds).
template <int D>
__device__ __forceinline__ void write_output(const uint8_t* smem, __nv_bfloat16* o, float* lse, int h, int64_t ldo,
                                             int64_t row_warp0, int64_t row_g, int64_t n_q, int warp, int lane,
                                             const float (&m_r)[2], const float (&l_r)[2]) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  constexpr float kLn2 = 0.6931471805599453f;
  for (int i = lane; i < 16 * kChunks; i += 32) {
    const int r = i / kChunks, c = i % kChunks;
    const int64_t qi = row_warp0 + r;
    if (qi < n_q)
      *reinterpret_cast<uint4*>(o + qi * ldo + int64_t(h) * D + c * 8) =
          *reinterpret_cast<const uint4*>(smem + swz<D>(warp * 16 + r, c));
  }
  if (lse && (lane & 3) == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t qi = row_g + r * 8;
      if (qi < n_q) lse[int64_t(h) * n_q + qi] = l_r[r] > 0.f ? m_r[r] * kLn2 + logf(l_r[r]) : -INFINITY;
    }
  }
}

}  // namespace longctx::cuda::fa2

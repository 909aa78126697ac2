// quant_dot_avx512_panels.cpp (cpu): the prefill GEMM for Q4_0, Q4_1, Q8_0 and Q4_K with AVX-512
// VNNI on 512-bit vectors, without horizontal sums: quant_gemm_tile_avx512vnni sends tiles of
// kPanelMinTokens or more token rows here (quant_dot.h).
//
// The weights are repacked, 16 rows at a time (a panel), so that one vector holds the same 4
// inputs of 16 rows: panel dword [b][k][r] = the quants of weights 4k..4k+3 of block b of row r,
// as unsigned bytes u (vpdpbusd multiplies unsigned by signed bytes):
//   Q8_0: u = q + 128, w = d (u - 128)     Q4_0: u = q, w = d (u - 8)     Q4_1: u = q, w = d u + m
//   Q4_K: u = q, w = (d s_j) u - dmin m_j per sub-block j of 32 (a block here), so it is Q4_1's
//         form with d s_j and -dmin m_j as the block's scale and min.
// A token's 4 activations of that k are broadcast to all 16 lanes, so 8 vpdpbusd give the 16
// rows' block sums in 16 int32 lanes. They start from -bias * sum(q_x) (bias 128, 8 or 0), so the
// sums come out exact: sum_i (u_i - bias) q_i. Each block's sums are then scaled by d_w (16 lanes)
// * d_x (broadcast) into 16 fp32 lanes per token (Q4_1, Q4_K add m * s_x, s_x = d_x sum(q_x)), and
// those lanes are the outputs y[t, r0..r0+15]: no reduction at the end either.
// Per token and block: 8 vpdpbusd, 1 start value, 1 convert, 1 multiply, 1 FMA (with a min: 2); per
// panel and block the repack is ~40 shuffles (and the nibble unpacking), paid once for all the
// tile's token rows.
// Standard headers come before the target pragma so their inline code stays portable.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/quant_dot.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() as the unused merge operand, which
// -Wmaybe-uninitialized reports at every call.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/quant_blocks.h"

namespace longctx {
namespace {

constexpr int kPanel = 16;   // weight rows per panel: the 16 int32 lanes of a vector
constexpr int kDwords = 8;   // 4-byte groups per block of 32
constexpr int kTokens = 8;   // token rows per pass over a panel: 8 sums + 8 accumulators in registers

// Block layouts (quant_dot.h): bytes per block, offset of the quants, the bias of the unsigned quants.
template <QuantType Q> constexpr int kBytes = Q == QuantType::q4_0 ? 18 : Q == QuantType::q4_1 ? 20 : 34;
template <QuantType Q> constexpr int kQuants = Q == QuantType::q4_1 ? 4 : 2;
template <QuantType Q> constexpr int kBias = Q == QuantType::q8_0 ? 128 : Q == QuantType::q4_0 ? 8 : 0;
template <QuantType Q> constexpr bool kHasMin = Q == QuantType::q4_1 || Q == QuantType::q4_k;  // an m s_x term

inline float f16(const uint8_t* p) { return _cvtsh_ss(read_u16(p)); }

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Block b (of 32 weights) of a row -> 32 unsigned bytes, weights 0..31 in order.
template <QuantType Q>
inline __m256i unsigned_quants(const uint8_t* row, int64_t b) {
  if constexpr (Q == QuantType::q4_k) {  // 32 bytes hold sub-blocks 2k (low nibbles) and 2k + 1 (high)
    const int j = int(b % kQ4KSub);
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b / kQ4KSub * kQ4KBytes + 16 + 32 * (j / 2)));
    return _mm256_and_si256(j % 2 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0F));
  }
  const uint8_t* blk = row + b * kBytes<Q>;
  if constexpr (Q == QuantType::q8_0) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)), _mm256_set1_epi8(char(0x80)));
  } else {  // nibbles: byte j holds weights j (low) and j + 16 (high)
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQuants<Q>));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0F));
  }
}

// A repacked panel: wq[b * 8 + k] (16 rows' dword k of block b), wd[b] (d per row, fp32),
// wm[b] (the min per row: Q4_1, Q4_K); rows past n have zero scales and their outputs are not stored.
struct Panel {
  __m512i* wq;
  __m512* wd;
  __m512* wm;
  int64_t nb;
  int64_t r0;
  int n;
};

template <QuantType Q>
void pack_panel(const QuantTile& p, const Panel& w) {
  // The last step of the 8 x 8 dword transpose (per 256-bit half: rows 0-7, then rows 8-15).
  const __m512i lo_idx = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi_idx = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  const __m512i row_offsets = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                 _mm512_set1_epi32(int32_t(p.row_bytes)));
  const __mmask16 valid = __mmask16((1u << w.n) - 1);
  const uint8_t* base = p.w + w.r0 * p.row_bytes;
  alignas(64) float k_scale[kQ4KSub][kPanel], k_min[kQ4KSub][kPanel];  // Q4_K: one super-block's, per row
  for (int64_t b = 0; b < w.nb; ++b) {
    __m512i v[8];  // v[i]: row i's 8 dwords, then row i + 8's
    for (int i = 0; i < 8; ++i) {
      const __m256i lo = i < w.n ? unsigned_quants<Q>(base + i * p.row_bytes, b) : _mm256_setzero_si256();
      const __m256i hi = i + 8 < w.n ? unsigned_quants<Q>(base + (i + 8) * p.row_bytes, b) : _mm256_setzero_si256();
      v[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    __m512i s[8], u[8];
    for (int i = 0; i < 4; ++i) {
      s[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
      s[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    // u[j] (and u[j + 4] for rows 4-7 / 12-15): dword j of rows 0-3 / 8-11 in each half's low
    // 128 bits, dword j + 4 in its high 128 bits.
    for (int h = 0; h < 2; ++h) {
      u[4 * h + 0] = _mm512_unpacklo_epi64(s[4 * h + 0], s[4 * h + 2]);
      u[4 * h + 1] = _mm512_unpackhi_epi64(s[4 * h + 0], s[4 * h + 2]);
      u[4 * h + 2] = _mm512_unpacklo_epi64(s[4 * h + 1], s[4 * h + 3]);
      u[4 * h + 3] = _mm512_unpackhi_epi64(s[4 * h + 1], s[4 * h + 3]);
    }
    __m512i* out = w.wq + b * kDwords;
    for (int j = 0; j < 4; ++j) {
      _mm512_store_si512(out + j, _mm512_permutex2var_epi64(u[j], lo_idx, u[j + 4]));
      _mm512_store_si512(out + j + 4, _mm512_permutex2var_epi64(u[j], hi_idx, u[j + 4]));
    }
    if constexpr (Q == QuantType::q4_k) {  // d * s_j and -dmin * m_j of sub-block j, per row
      const int j = int(b % kQ4KSub);
      if (j == 0) {
        for (int r = 0; r < kPanel; ++r) {
          const uint8_t* sup = base + r * p.row_bytes + b / kQ4KSub * kQ4KBytes;
          const float d = r < w.n ? f16(sup) : 0.f, dmin = r < w.n ? f16(sup + 2) : 0.f;
          for (int k = 0; k < kQ4KSub; ++k) {
            int sc = 0, m = 0;
            if (r < w.n) q4k_scale_min(k, sup + 4, sc, m);
            k_scale[k][r] = d * float(sc);
            k_min[k][r] = -dmin * float(m);
          }
        }
      }
      w.wd[b] = _mm512_load_ps(k_scale[j]);
      w.wm[b] = _mm512_load_ps(k_min[j]);
    } else {  // the 16 rows' fp16 d (and Q4_1's m after it): one gather of each row's block's first dword
      const __m512i dm = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, row_offsets, base + b * kBytes<Q>, 1);
      w.wd[b] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
      if constexpr (Q == QuantType::q4_1) w.wm[b] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
    }
  }
}

// y[t + c, r0 .. r0 + n) for C token rows starting at tile row t; start[t * nb + b] =
// -bias * sum(q) of token row t's block b.
template <QuantType Q, int C>
void panel_tokens(const QuantTile& p, const Panel& w, const int32_t* start, int64_t t) {
  const int64_t nb = w.nb;
  const int8_t* xq[C];
  const float* xd[C];
  const float* xs[C];
  const int32_t* x0[C];
  for (int c = 0; c < C; ++c) {
    const int64_t i = (p.t0 + t + c) * nb;
    xq[c] = p.x->q.data() + i * kQ8Block;
    xd[c] = p.x->d.data() + i;
    xs[c] = p.x->s.data() + i;
    x0[c] = start + (t + c) * nb;
  }
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m512i* wb = w.wq + b * kDwords;
    __m512i sum[C];
    for (int c = 0; c < C; ++c) sum[c] = kBias<Q> ? _mm512_set1_epi32(x0[c][b]) : _mm512_setzero_si512();
    for (int k = 0; k < kDwords; ++k) {  // k outer: one weight vector live, C independent chains
      const __m512i wk = _mm512_load_si512(wb + k);
      for (int c = 0; c < C; ++c)
        sum[c] = _mm512_dpbusd_epi32(sum[c], wk, _mm512_set1_epi32(load_i32(xq[c] + b * kQ8Block + 4 * k)));
    }
    const __m512 dw = w.wd[b];
    for (int c = 0; c < C; ++c) {
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[c]), _mm512_mul_ps(dw, _mm512_set1_ps(xd[c][b])), acc[c]);
      if constexpr (kHasMin<Q>) acc[c] = _mm512_fmadd_ps(w.wm[b], _mm512_set1_ps(xs[c][b]), acc[c]);
    }
  }
  const __mmask16 valid = __mmask16((1u << w.n) - 1);
  for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(p.y + (t + c) * p.ldy + w.r0, valid, acc[c]);
}

// The last rem < kTokens token rows.
template <QuantType Q, int C = kTokens - 1>
void panel_tail(const QuantTile& p, const Panel& w, const int32_t* start, int64_t t, int64_t rem) {
  if constexpr (C > 0) {
    if (rem == C) return panel_tokens<Q, C>(p, w, start, t);
    panel_tail<Q, C - 1>(p, w, start, t, rem);
  }
}

// 64-byte aligned scratch of at least `bytes`, reused by the thread.
uint8_t* scratch(std::vector<uint8_t>& buf, size_t bytes) {
  if (buf.size() < bytes + 64) buf.resize(bytes + 64);
  const uintptr_t a = reinterpret_cast<uintptr_t>(buf.data());
  return buf.data() + ((64 - a % 64) % 64);
}

template <QuantType Q>
void panels(const QuantTile& p) {
  const int64_t nb = p.n_in / kQ8Block;
  thread_local std::vector<uint8_t> panel_buf, start_buf;
  uint8_t* pb = scratch(panel_buf, size_t(nb) * (kDwords + 2) * 64);
  Panel w{reinterpret_cast<__m512i*>(pb), reinterpret_cast<__m512*>(pb + size_t(nb) * kDwords * 64),
          reinterpret_cast<__m512*>(pb + size_t(nb) * (kDwords + 1) * 64), nb, 0, 0};
  int32_t* start = reinterpret_cast<int32_t*>(scratch(start_buf, size_t(p.T * nb) * 4));
  if constexpr (kBias<Q> != 0) {
    for (int64_t t = 0; t < p.T; ++t) {  // sum(q) = sum(q + 128) (vpsadbw) - 32 * 128
      const int8_t* q = p.x->q.data() + (p.t0 + t) * nb * kQ8Block;
      for (int64_t b = 0; b < nb; ++b) {
        const __m256i v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * kQ8Block)),
                                           _mm256_set1_epi8(char(0x80)));
        const __m256i s4 = _mm256_sad_epu8(v, _mm256_setzero_si256());
        const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
        const int64_t sum = _mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1) - kQ8Block * 128;
        start[t * nb + b] = int32_t(-kBias<Q> * sum);
      }
    }
  }
  for (w.r0 = 0; w.r0 < p.rows; w.r0 += kPanel) {
    w.n = int(std::min<int64_t>(kPanel, p.rows - w.r0));
    pack_panel<Q>(p, w);
    int64_t t = 0;
    for (; t + kTokens <= p.T; t += kTokens) panel_tokens<Q, kTokens>(p, w, start, t);
    panel_tail<Q>(p, w, start, t, p.T - t);
  }
}

}  // namespace

void quant_gemm_tile_panels_avx512(const QuantTile& p) {
  switch (p.type) {
    case QuantType::q4_0: return panels<QuantType::q4_0>(p);
    case QuantType::q4_1: return panels<QuantType::q4_1>(p);
    case QuantType::q8_0: return panels<QuantType::q8_0>(p);
    case QuantType::q4_k: return panels<QuantType::q4_k>(p);
  }
}

}  // namespace longctx
#else
namespace longctx {
void quant_gemm_tile_panels_avx512(const QuantTile& p) { quant_gemm_tile_scalar(p); }
}  // namespace longctx
#endif

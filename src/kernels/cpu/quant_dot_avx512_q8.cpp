// quant_dot_avx512_q8.cpp (cpu): the Q8_0 prefill GEMM with AVX-512 VNNI on 512-bit vectors,
// without horizontal sums: quant_gemm_tile_avx512vnni sends Q8_0 tiles of kQ8PanelMinTokens or
// more token rows here (quant_dot.h).
//
// The weights are repacked, 16 rows at a time (a panel), so that one vector holds the same 4
// inputs of 16 rows: panel dword [b][k][r] = weights 4k..4k+3 of block b of row r, as unsigned
// bytes w + 128 (vpdpbusd multiplies unsigned by signed bytes). A token's 4 activations of that
// k are broadcast to all 16 lanes (vpdpbusd's {1to16} memory operand), so 8 vpdpbusd give the 16
// rows' block sums in 16 int32 lanes, starting from -128 * sum(q_x) so the sums come out exact:
//   sum_i (w_i + 128) q_i - 128 sum_i q_i = sum_i w_i q_i.
// Each block's sums are then scaled by d_w (16 lanes) * d_x (broadcast) into 16 fp32 lanes per
// token, which are the outputs y[t, r0..r0+15] (stored with no reduction).
// Per token and block: 8 vpdpbusd, 1 broadcast start value, 1 convert, 1 multiply, 1 FMA; per
// panel and block the repack is ~40 shuffles, paid once for all the tile's token rows.
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

namespace longctx {
namespace {

constexpr int kPanel = 16;      // weight rows per panel: the 16 int32 lanes of a vector
constexpr int kDwords = 8;      // 4-byte groups per block of 32
constexpr int kQ8Bytes = 34;    // Q8_0 block: fp16 d, 32 int8
constexpr int kTokens = 8;      // token rows per pass over a panel: 8 sums + 8 accumulators in registers

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Rows r0 .. r0 + n - 1 (n <= 16) of the tile, all nb blocks, into the panel layout above:
// wq[b * 8 + k] (the weights + 128) and wd[b] (the 16 scales as fp32; 0 for rows past n).
void pack_panel(const QuantTile& p, int64_t r0, int n, int64_t nb, __m512i* wq, __m512* wd) {
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  // The last step of the 8 x 8 dword transpose (per 256-bit half: rows 0-7, then rows 8-15).
  const __m512i lo_idx = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi_idx = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  const int32_t rb = int32_t(p.row_bytes);
  const __m512i row_offsets = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                 _mm512_set1_epi32(rb));
  const __mmask16 valid = __mmask16((1u << n) - 1);
  const uint8_t* base = p.w + r0 * p.row_bytes;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = base + b * kQ8Bytes;
    __m512i v[8];  // v[i]: row i's 8 dwords, then row i + 8's
    for (int i = 0; i < 8; ++i) {
      const __m256i lo = i < n ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + i * p.row_bytes + 2))
                               : _mm256_setzero_si256();
      const __m256i hi = i + 8 < n ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + (i + 8) * p.row_bytes + 2))
                                   : _mm256_setzero_si256();
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
    __m512i* out = wq + b * kDwords;
    for (int j = 0; j < 4; ++j) {
      _mm512_store_si512(out + j, _mm512_xor_si512(_mm512_permutex2var_epi64(u[j], lo_idx, u[j + 4]), flip));
      _mm512_store_si512(out + j + 4, _mm512_xor_si512(_mm512_permutex2var_epi64(u[j], hi_idx, u[j + 4]), flip));
    }
    // The 16 fp16 scales: one gather of the dwords at each row's block start, low halves kept.
    const __m512i d16 = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, row_offsets, blk, 1);
    wd[b] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d16));
  }
}

struct Panel {
  const __m512i* wq;
  const __m512* wd;
  int64_t nb;
  int64_t r0;
  int n;
};

// y[t + c, r0 .. r0 + n) for C token rows starting at tile row t; bias[t * nb + b] = -128 * sum(q)
// of token row t's block b.
template <int C>
void panel_tokens(const QuantTile& p, const Panel& w, const int32_t* bias, int64_t t) {
  const int64_t nb = w.nb;
  const int8_t* xq[C];
  const float* xd[C];
  const int32_t* xb[C];
  for (int c = 0; c < C; ++c) {
    const int64_t i = (p.t0 + t + c) * nb;
    xq[c] = p.x->q.data() + i * kQ8Block;
    xd[c] = p.x->d.data() + i;
    xb[c] = bias + (t + c) * nb;
  }
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m512i* wb = w.wq + b * kDwords;
    __m512i sum[C];
    for (int c = 0; c < C; ++c) sum[c] = _mm512_set1_epi32(xb[c][b]);
    for (int k = 0; k < kDwords; ++k) {  // k outer: one weight vector live, C independent chains
      const __m512i wk = _mm512_load_si512(wb + k);
      for (int c = 0; c < C; ++c)
        sum[c] = _mm512_dpbusd_epi32(sum[c], wk, _mm512_set1_epi32(load_i32(xq[c] + b * kQ8Block + 4 * k)));
    }
    const __m512 dw = w.wd[b];
    for (int c = 0; c < C; ++c)
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[c]), _mm512_mul_ps(dw, _mm512_set1_ps(xd[c][b])), acc[c]);
  }
  const __mmask16 valid = __mmask16((1u << w.n) - 1);
  for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(p.y + (t + c) * p.ldy + w.r0, valid, acc[c]);
}

// The last rem < kTokens token rows.
template <int C = kTokens - 1>
void panel_tail(const QuantTile& p, const Panel& w, const int32_t* bias, int64_t t, int64_t rem) {
  if constexpr (C > 0) {
    if (rem == C) return panel_tokens<C>(p, w, bias, t);
    panel_tail<C - 1>(p, w, bias, t, rem);
  }
}

// 64-byte aligned scratch of at least `bytes`, reused by the thread.
uint8_t* scratch(std::vector<uint8_t>& buf, size_t bytes) {
  if (buf.size() < bytes + 64) buf.resize(bytes + 64);
  const uintptr_t a = reinterpret_cast<uintptr_t>(buf.data());
  return buf.data() + ((64 - a % 64) % 64);
}

}  // namespace

void quant_gemm_tile_q8_0_avx512(const QuantTile& p) {
  const int64_t nb = p.n_in / kQ8Block;
  thread_local std::vector<uint8_t> panel_buf, bias_buf;
  uint8_t* pb = scratch(panel_buf, size_t(nb) * (kDwords + 1) * 64);
  __m512i* wq = reinterpret_cast<__m512i*>(pb);
  __m512* wd = reinterpret_cast<__m512*>(pb + size_t(nb) * kDwords * 64);
  int32_t* bias = reinterpret_cast<int32_t*>(scratch(bias_buf, size_t(p.T * nb) * 4));
  for (int64_t t = 0; t < p.T; ++t) {  // -128 * sum(q) per block: (sum of q + 128 via vpsadbw) - 32 * 128, times -128
    const int8_t* q = p.x->q.data() + (p.t0 + t) * nb * kQ8Block;
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * kQ8Block)),
                                         _mm256_set1_epi8(char(0x80)));
      const __m256i s4 = _mm256_sad_epu8(v, _mm256_setzero_si256());
      const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
      const int64_t sum = _mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1) - kQ8Block * 128;
      bias[t * nb + b] = int32_t(-128 * sum);
    }
  }
  for (int64_t r0 = 0; r0 < p.rows; r0 += kPanel) {
    const int n = int(std::min<int64_t>(kPanel, p.rows - r0));
    pack_panel(p, r0, n, nb, wq, wd);
    const Panel w{wq, wd, nb, r0, n};
    int64_t t = 0;
    for (; t + kTokens <= p.T; t += kTokens) panel_tokens<kTokens>(p, w, bias, t);
    panel_tail(p, w, bias, t, p.T - t);
  }
}

}  // namespace longctx
#else
namespace longctx {
void quant_gemm_tile_q8_0_avx512(const QuantTile& p) { quant_gemm_tile_scalar(p); }
}  // namespace longctx
#endif

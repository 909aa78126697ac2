// dequant_kquants.cpp: ggml's k-quants (256-element super-blocks): Q2_K ... Q6_K and Q8_K.
//
// Block layouts (bytes, little-endian; d, dmin fp16 unless noted). Element e of a block:
//   Q2_K (84):  scales[16] | qs[64] | d | dmin
//       16 groups of 16; scales[g] = scale (low nibble) | min (high nibble).
//       e = 128 h + 32 j + l (h < 2, j < 4, l < 32): q = (qs[32 h + l] >> 2j) & 3, g = e / 16
//       y = (d * sc) * q - (dmin * mn)
//   Q3_K (110): hmask[32] | qs[64] | scales[12] | d
//       16 6-bit scales: low 4 bits from scales[i] (i < 8) or scales[i-8] >> 4, high 2 bits
//       (scales[8 + i%4] >> 2(i/4)) & 3; stored minus 32.  e as Q2_K; bit 4h+j of hmask[l] set
//       means no offset, clear means q - 4.   y = (d * (sc - 32)) * (q - 4 * !hbit)
//   Q4_K (144): d | dmin | scales[12] | qs[128]
//       8 groups of 32 with 6-bit (scale, min) pairs packed in scales[12] (get_scale_min below).
//       chunk c < 4 of 64: first 32 = low nibbles of qs[32c..], group 2c; next 32 = high, 2c+1.
//       y = (d * sc) * q - (dmin * mn)
//   Q5_K (176): d | dmin | scales[12] | qh[32] | qs[128]
//       as Q4_K plus a 5th bit: bit 2c (first 32) or 2c+1 (next 32) of qh[l] adds 16.
//   Q6_K (210): ql[128] | qh[64] | int8 scales[16] | d
//       half h (128 elems; ql += 64, qh += 32, sc += 8 per half), l < 32, is = l / 16:
//       y[l]    = (d * sc[is])   * ((ql[l] & 15      | ((qh[l] >> 0) & 3) << 4) - 32)
//       y[l+32] = (d * sc[is+2]) * ((ql[l+32] & 15   | ((qh[l] >> 2) & 3) << 4) - 32)
//       y[l+64] = (d * sc[is+4]) * ((ql[l] >> 4      | ((qh[l] >> 4) & 3) << 4) - 32)
//       y[l+96] = (d * sc[is+6]) * ((ql[l+32] >> 4   | ((qh[l] >> 6) & 3) << 4) - 32)
//   Q8_K (292): float d | int8 qs[256] | int16 bsums[16]    y = d * qs   (bsums unused here)
#include "loader/dequant_blocks.h"

namespace longctx::dq {
namespace {

constexpr int kQKK = 256;
constexpr int kScaleBytes = 12;  // K_SCALE_SIZE

// 6-bit scale and min of group j (0..7) packed in the 12 scale bytes of Q4_K / Q5_K.
inline void get_scale_min(int j, const uint8_t* q, uint8_t& sc, uint8_t& mn) {
  if (j < 4) {
    sc = q[j] & 63;
    mn = q[j + 4] & 63;
  } else {
    sc = uint8_t((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    mn = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace

void q2_k(const uint8_t* src, float* dst, int64_t nb) {
  constexpr int kBytes = 16 + 64 + 2 + 2;
  for (int64_t b = 0; b < nb; ++b, src += kBytes, dst += kQKK) {
    const uint8_t* scales = src;
    const uint8_t* qs = src + 16;
    const float d = load_f16(src + 80), dmin = load_f16(src + 82);
    for (int g = 0; g < 16; ++g) {  // group of 16 elements: e = 16 g + i
      const float dl = d * float(scales[g] & 0x0F);
      const float ml = dmin * float(scales[g] >> 4);
      const int h = g / 8, j = (g % 8) / 2, l0 = (g % 2) * 16;
      const uint8_t* q = qs + 32 * h + l0;
      const int shift = 2 * j;
      float* y = dst + 16 * g;
      for (int i = 0; i < 16; ++i) y[i] = dl * float((q[i] >> shift) & 3) - ml;
    }
  }
}

void q3_k(const uint8_t* src, float* dst, int64_t nb) {
  constexpr int kBytes = 32 + 64 + kScaleBytes + 2;
  for (int64_t b = 0; b < nb; ++b, src += kBytes, dst += kQKK) {
    const uint8_t* hmask = src;
    const uint8_t* qs = src + 32;
    const uint8_t* sc = src + 96;
    const float d = load_f16(src + 108);
    for (int g = 0; g < 16; ++g) {
      const int lo = g < 8 ? (sc[g] & 0x0F) : (sc[g - 8] >> 4);
      const int hi = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
      const float dl = d * float((lo | (hi << 4)) - 32);
      const int h = g / 8, j = (g % 8) / 2, l0 = (g % 2) * 16;
      const uint8_t* q = qs + 32 * h + l0;
      const uint8_t* hm = hmask + l0;
      const int shift = 2 * j;
      const uint8_t bit = uint8_t(1u << (4 * h + j));
      float* y = dst + 16 * g;
      for (int i = 0; i < 16; ++i) y[i] = dl * float(int((q[i] >> shift) & 3) - ((hm[i] & bit) ? 0 : 4));
    }
  }
}

void q4_k(const uint8_t* src, float* dst, int64_t nb) {
  constexpr int kBytes = 2 + 2 + kScaleBytes + 128;
  for (int64_t b = 0; b < nb; ++b, src += kBytes, dst += kQKK) {
    const float d = load_f16(src), dmin = load_f16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qs = src + 4 + kScaleBytes;
    for (int c = 0; c < 4; ++c) {
      uint8_t sc, mn;
      get_scale_min(2 * c, scales, sc, mn);
      const float d1 = d * float(sc), m1 = dmin * float(mn);
      get_scale_min(2 * c + 1, scales, sc, mn);
      const float d2 = d * float(sc), m2 = dmin * float(mn);
      const uint8_t* q = qs + 32 * c;
      float* y = dst + 64 * c;
      for (int l = 0; l < 32; ++l) y[l] = d1 * float(q[l] & 0x0F) - m1;
      for (int l = 0; l < 32; ++l) y[32 + l] = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void q5_k(const uint8_t* src, float* dst, int64_t nb) {
  constexpr int kBytes = 2 + 2 + kScaleBytes + 32 + 128;
  for (int64_t b = 0; b < nb; ++b, src += kBytes, dst += kQKK) {
    const float d = load_f16(src), dmin = load_f16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 4 + kScaleBytes;
    const uint8_t* qs = qh + 32;
    for (int c = 0; c < 4; ++c) {
      uint8_t sc, mn;
      get_scale_min(2 * c, scales, sc, mn);
      const float d1 = d * float(sc), m1 = dmin * float(mn);
      get_scale_min(2 * c + 1, scales, sc, mn);
      const float d2 = d * float(sc), m2 = dmin * float(mn);
      const uint8_t u1 = uint8_t(1u << (2 * c)), u2 = uint8_t(2u << (2 * c));
      const uint8_t* q = qs + 32 * c;
      float* y = dst + 64 * c;
      for (int l = 0; l < 32; ++l) y[l] = d1 * float((q[l] & 0x0F) + ((qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) y[32 + l] = d2 * float((q[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
  }
}

void q6_k(const uint8_t* src, float* dst, int64_t nb) {
  constexpr int kBytes = 128 + 64 + 16 + 2;
  for (int64_t b = 0; b < nb; ++b, src += kBytes, dst += kQKK) {
    const float d = load_f16(src + 208);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = src + 64 * h;
      const uint8_t* qh = src + 128 + 32 * h;
      const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192) + 8 * h;
      float* y = dst + 128 * h;
      for (int half = 0; half < 2; ++half) {  // l in [16 half, 16 half + 16): is = half
        const float d0 = d * float(sc[half + 0]), d1 = d * float(sc[half + 2]);
        const float d2 = d * float(sc[half + 4]), d3 = d * float(sc[half + 6]);
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          y[l] = d0 * float(int((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32);
          y[l + 32] = d1 * float(int((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32);
          y[l + 64] = d2 * float(int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
          y[l + 96] = d3 * float(int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
      }
    }
  }
}

void q8_k(const uint8_t* src, float* dst, int64_t nb) {
  constexpr int kBytes = 4 + kQKK + 2 * 16;
  for (int64_t b = 0; b < nb; ++b, src += kBytes, dst += kQKK) {
    const float d = load_f32(src);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 4);
    for (int i = 0; i < kQKK; ++i) dst[i] = d * float(qs[i]);
  }
}

}  // namespace longctx::dq

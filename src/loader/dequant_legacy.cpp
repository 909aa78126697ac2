// dequant_legacy.cpp: ggml's 32-element block quants: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
//
// Block layouts (bytes, little-endian; d, m are fp16; element j of the block is y[j]):
//   Q4_0 (18): d | qs[16]           y[j] = ((qs[j] & 15) - 8) * d,  y[j+16] = ((qs[j] >> 4) - 8) * d
//   Q4_1 (20): d | m | qs[16]       y[j] = (qs[j] & 15) * d + m,    y[j+16] = (qs[j] >> 4) * d + m
//   Q5_0 (22): d | qh[4] | qs[16]   5th bit of y[j] is bit j of the u32 qh, of y[j+16] bit j+16;
//                                   y = (q5 - 16) * d
//   Q5_1 (24): d | m | qh[4] | qs[16]   y = q5 * d + m
//   Q8_0 (34): d | int8 qs[32]      y[j] = qs[j] * d
#include "loader/dequant_blocks.h"

namespace longctx::dq {
namespace {
constexpr int kQK = 32;
constexpr int kHalf = kQK / 2;
}  // namespace

void q4_0(const uint8_t* src, float* dst, int64_t nb) {
  constexpr int kBytes = 2 + kHalf;
  for (int64_t b = 0; b < nb; ++b, src += kBytes, dst += kQK) {
    const float d = load_f16(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < kHalf; ++j) {
      dst[j] = float(int(qs[j] & 0x0F) - 8) * d;
      dst[j + kHalf] = float(int(qs[j] >> 4) - 8) * d;
    }
  }
}

void q4_1(const uint8_t* src, float* dst, int64_t nb) {
  constexpr int kBytes = 4 + kHalf;
  for (int64_t b = 0; b < nb; ++b, src += kBytes, dst += kQK) {
    const float d = load_f16(src), m = load_f16(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < kHalf; ++j) {
      dst[j] = float(qs[j] & 0x0F) * d + m;
      dst[j + kHalf] = float(qs[j] >> 4) * d + m;
    }
  }
}

void q5_0(const uint8_t* src, float* dst, int64_t nb) {
  constexpr int kBytes = 2 + 4 + kHalf;
  for (int64_t b = 0; b < nb; ++b, src += kBytes, dst += kQK) {
    const float d = load_f16(src);
    const uint32_t qh = load_u32(src + 2);
    const uint8_t* qs = src + 6;
    for (int j = 0; j < kHalf; ++j) {
      const int hi0 = int((qh >> j) << 4) & 0x10;
      const int hi1 = int(qh >> (j + 12)) & 0x10;
      dst[j] = float(((qs[j] & 0x0F) | hi0) - 16) * d;
      dst[j + kHalf] = float(((qs[j] >> 4) | hi1) - 16) * d;
    }
  }
}

void q5_1(const uint8_t* src, float* dst, int64_t nb) {
  constexpr int kBytes = 2 + 2 + 4 + kHalf;
  for (int64_t b = 0; b < nb; ++b, src += kBytes, dst += kQK) {
    const float d = load_f16(src), m = load_f16(src + 2);
    const uint32_t qh = load_u32(src + 4);
    const uint8_t* qs = src + 8;
    for (int j = 0; j < kHalf; ++j) {
      const int hi0 = int((qh >> j) << 4) & 0x10;
      const int hi1 = int(qh >> (j + 12)) & 0x10;
      dst[j] = float((qs[j] & 0x0F) | hi0) * d + m;
      dst[j + kHalf] = float((qs[j] >> 4) | hi1) * d + m;
    }
  }
}

void q8_0(const uint8_t* src, float* dst, int64_t nb) {
  constexpr int kBytes = 2 + kQK;
  for (int64_t b = 0; b < nb; ++b, src += kBytes, dst += kQK) {
    const float d = load_f16(src);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < kQK; ++j) dst[j] = float(qs[j]) * d;
  }
}

}  // namespace longctx::dq

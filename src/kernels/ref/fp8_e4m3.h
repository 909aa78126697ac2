// fp8_e4m3.h: fp8 e4m3 <-> fp32 on the CPU, bit-identical to the GPU's conversion
// (cuda_fp8.h __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)): round to nearest even,
// saturating to +-448 (the largest finite e4m3; inf saturates too), NaN -> 0x7f | sign.
//
// e4m3: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; 0x7f / 0xff are NaN.
// Normal values (1 + m/8) * 2^(e-7) for e in 1..15, subnormal m/8 * 2^-6 for e = 0.
// The host KV pool (src/kv) and the CPU references (sparse_decode) store and read fp8 through
// these; they are the GPU kernels' host twin (tests/kv checks the encoder against a brute-force
// nearest search and against cuda_fp8.h; tests/kernels checks every code's decode).
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace longctx {

inline constexpr float kFp8Max = 448.f;  // largest finite e4m3 value

// Scale that maps values of largest magnitude amax onto e4m3's whole range (1 when amax is 0,
// negative or not finite): the fp8 cache's rule (gpu/kv_fp8.h fp8_scale_for).
inline float fp8_scale_for_amax(float amax) { return amax > 0.f && amax < 3.0e38f ? amax / kFp8Max : 1.f; }

inline uint8_t f32_to_e4m3(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7fu;  // NaN
  const float f = std::bit_cast<float>(a);
  if (f >= kFp8Max) return sign | 0x7eu;     // saturate (values in (448, 464] round to 448 anyway)
  if (f < 0x1p-6f) {                         // subnormal: multiples of 2^-9; 8 * 2^-9 is the smallest normal (code 8)
    const float m = std::nearbyint(f * 512.f);  // exact scaling; the default rounding mode is nearest-even
    return sign | uint8_t(m);
  }
  int e = int((a >> 23) & 0xffu) - 127;      // -6..8
  const uint32_t mant = a & 0x7fffffu;       // 23 bits, rounded to 3
  uint32_t r = mant >> 20;
  const uint32_t rem = mant & 0xfffffu, half = 0x80000u;
  if (rem > half || (rem == half && (r & 1u))) ++r;
  if (r == 8) {
    r = 0;
    ++e;
  }
  const uint32_t code = uint32_t(e + 7) << 3 | r;  // <= 0x7e since f < 448
  return sign | uint8_t(code);
}

inline float e4m3_to_f32(uint8_t b) {
  const int e = (b >> 3) & 0xf, m = b & 7;
  float v;
  if (e == 0xf && m == 7)
    v = NAN;
  else if (e == 0)
    v = std::ldexp(float(m), -9);
  else
    v = std::ldexp(float(8 + m), e - 10);
  return (b & 0x80) ? -v : v;
}

}  // namespace longctx

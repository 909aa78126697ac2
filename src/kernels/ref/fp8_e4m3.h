// fp8_e4m3.h: OCP fp8 e4m3 (the "fn" variant: no infinities, 0x7f/0xff are NaN) <-> fp32 on the
// CPU, exact decode and round-to-nearest-even encode with saturation to +-448. The CPU side of the
// fp8 KV cache (KvElem::fp8_e4m3): references decode what the GPU kernels widen in hardware.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

namespace longctx {

inline float e4m3_to_f32(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  const float v = e == 0 ? std::ldexp(float(m) / 8.f, -6) : std::ldexp(1.f + float(m) / 8.f, e - 7);
  return (b & 0x80) ? -v : v;
}

// Saturating (|x| > 448 -> 448), like __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3).
inline uint8_t f32_to_e4m3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return 0x7f;
  const float a = std::fabs(x);
  if (a >= 448.f) return sign | 0x7e;
  // Quantum of a's binade (subnormals share the smallest normal binade's 2^-9).
  int exp = 0;
  (void)std::frexp(a, &exp);  // a = f * 2^exp, f in [0.5, 1)
  const int e = exp - 1 < -6 ? -6 : exp - 1;  // unbiased exponent of the binade
  const float q = std::ldexp(1.f, e - 3);     // 3 mantissa bits
  const float r = std::nearbyint(a / q) * q;  // round half to even (default rounding mode)
  if (r >= 448.f) return sign | 0x7e;
  if (r == 0.f) return sign;
  int re = 0;
  const float f = std::frexp(r, &re);  // r = f * 2^re
  const int ue = re - 1;
  if (ue < -6) return sign | uint8_t(std::lround(r / std::ldexp(1.f, -9)));  // subnormal: m * 2^-9
  const int m = int(std::lround((f * 2.f - 1.f) * 8.f));
  return sign | uint8_t(((ue + 7) << 3) | m);
}

}  // namespace longctx

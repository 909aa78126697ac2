// fast_exp.h: expf for softmax rows, branch-free so the compiler vectorises loops over it.
//
// exp(x) = 2^k * exp(r), k = round(x / ln2), r = x - k*ln2 (ln2 split in two for accuracy),
// exp(r) by a degree-6 polynomial on |r| <= ln2/2. Max relative error ~2e-7 (about 2 ulp),
// tested in tests/model/test_ops.cpp. Inputs below -87 flush to 0 (softmax scores are
// shifted by the row max, so they are <= 0).
#pragma once
#include <bit>
#include <cstdint>

namespace longctx {

inline float fast_exp(float x) {
  constexpr float kMin = -87.3f;  // below this, 2^k underflows the float exponent
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  const float xc = x < kMin ? kMin : (x > 88.f ? 88.f : x);
  // Round to nearest by the 1.5*2^23 trick (plain adds, so the loop vectorises).
  constexpr float kRound = 12582912.f;
  const float kf = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - kf * kLn2Hi) - kf * kLn2Lo;
  // Taylor-like minimax coefficients for exp on [-ln2/2, ln2/2].
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const int32_t k = int32_t(kf);
  const float scale = std::bit_cast<float>(uint32_t(k + 127) << 23);
  return x < kMin ? 0.f : p * scale;
}

}  // namespace longctx

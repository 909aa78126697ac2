// test_kv_fp8.cpp: the host e4m3 conversions (fp8_e4m3.h): decoding of all 256 codes, and the
// encoder against a brute-force oracle (nearest finite e4m3 value, ties to the even code,
// saturation at +-448) on fresh random inputs of every magnitude and on every exact midpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/ref/fp8_e4m3.h"
#include "kv_test_util.h"

namespace longctx::kv {
namespace {

// The oracle: nearest of the 254 finite codes (in double), ties to the code with an even
// mantissa; |x| >= 448 saturates; NaN -> 0x7f | sign.
uint8_t oracle_e4m3(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xff : 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(double(x));
  if (a >= 448.0) return sign | 0x7e;
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c < 0x7f; ++c) {  // non-negative finite codes, in increasing value
    const double d = std::fabs(double(e4m3_to_f32(uint8_t(c))) - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return sign | uint8_t(best);
}

TEST(Fp8E4m3, DecodeKnownCodes) {
  EXPECT_EQ(e4m3_to_f32(0x00), 0.f);
  EXPECT_EQ(e4m3_to_f32(0x38), 1.f);         // e = 7, m = 0
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.f);       // largest finite
  EXPECT_EQ(e4m3_to_f32(0x08), 0x1p-6f);     // smallest normal
  EXPECT_EQ(e4m3_to_f32(0x01), 0x1p-9f);     // smallest subnormal
  EXPECT_EQ(e4m3_to_f32(0x07), 7 * 0x1p-9f); // largest subnormal
  EXPECT_EQ(e4m3_to_f32(0xb8), -1.f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
  for (int c = 0; c < 0x7e; ++c) EXPECT_LT(e4m3_to_f32(uint8_t(c)), e4m3_to_f32(uint8_t(c + 1))) << c;
}

TEST(Fp8E4m3, EncodeDecodeIsIdentityOnCodes) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN
    EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(uint8_t(c))), uint8_t(c)) << c;
  }
}

TEST(Fp8E4m3, EncoderMatchesOracle) {
  // every midpoint between neighbouring codes (the ties), and just either side of it
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = e4m3_to_f32(uint8_t(c)), hi = e4m3_to_f32(uint8_t(c + 1));
    const float mid = 0.5f * (lo + hi);  // exact in fp32
    for (float x : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f)})
      for (float sx : {x, -x}) ASSERT_EQ(f32_to_e4m3(sx), oracle_e4m3(sx)) << sx;
  }
  // random magnitudes from 2^-14 to 2^10 (subnormals, normals, saturation)
  std::uniform_real_distribution<float> ex(-14.f, 10.f);
  for (int i = 0; i < 200000; ++i) {
    const float m = std::exp2(ex(test::rng()));
    const float x = (test::rng()() & 1) ? -m : m;
    ASSERT_EQ(f32_to_e4m3(x), oracle_e4m3(x)) << x;
  }
  for (float x : {0.f, -0.f, 448.f, 464.f, 500.f, 1e30f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 1e-30f})
    EXPECT_EQ(f32_to_e4m3(x), oracle_e4m3(x)) << x;
}

TEST(Fp8E4m3, ScaleForAmax) {
  EXPECT_EQ(fp8_scale_for_amax(448.f), 1.f);
  EXPECT_EQ(fp8_scale_for_amax(896.f), 2.f);
  EXPECT_EQ(fp8_scale_for_amax(0.f), 1.f);
  EXPECT_EQ(fp8_scale_for_amax(-1.f), 1.f);
  EXPECT_EQ(fp8_scale_for_amax(std::numeric_limits<float>::infinity()), 1.f);
  // the largest value maps to 448 exactly, and does not saturate past it
  const float amax = 3.7f, s = fp8_scale_for_amax(amax);
  EXPECT_EQ(f32_to_e4m3(amax * (1.f / s)), 0x7e);
}

}  // namespace
}  // namespace longctx::kv

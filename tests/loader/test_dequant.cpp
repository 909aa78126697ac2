// test_dequant.cpp: every dequantizer against gguf-py's numpy reference, bit for bit, and the
// Q8_0/Q4_0/Q4_1/F16/BF16 encoders against gguf-py's quantizers, byte for byte.
// Golden vectors: tests/data/quant/*.bin, made by tools/make_quant_vectors.py (format there).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "loader/dequant.h"
#include "loader/quantize.h"
#include "test_util.h"

namespace longctx {
namespace {

struct Golden {
  DType type;
  std::vector<uint8_t> encoded;
  std::vector<float> expected, source;  // source empty unless the case has one
};

Golden load_golden(const std::string& name) {
  const std::string path = std::string(LONGCTX_TEST_DATA_DIR) + "/quant/" + name + ".bin";
  const auto b = test::read_bytes(path);
  Golden g;
  if (b.size() < 20 || std::memcmp(b.data(), "LQV1", 4) != 0) {
    ADD_FAILURE() << "missing or bad golden file " << path << " (run tools/make_quant_vectors.py)";
    return g;
  }
  uint32_t h[4];
  std::memcpy(h, b.data() + 4, 16);
  const size_t n = h[1], nbytes = h[2];
  const size_t want = 20 + nbytes + 4 * n * (h[3] ? 2 : 1);
  EXPECT_EQ(b.size(), want) << path;
  if (b.size() != want) return g;
  g.type = DType(h[0]);
  g.encoded.assign(b.begin() + 20, b.begin() + 20 + nbytes);
  g.expected.resize(n);
  std::memcpy(g.expected.data(), b.data() + 20 + nbytes, 4 * n);
  if (h[3]) {
    g.source.resize(n);
    std::memcpy(g.source.data(), b.data() + 20 + nbytes + 4 * n, 4 * n);
  }
  return g;
}

// Same bits, or both NaN.
bool same_float(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

class DequantGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(DequantGolden, MatchesGgufPyBitExactly) {
  const Golden g = load_golden(GetParam());
  ASSERT_FALSE(g.expected.empty());
  const int64_t n = int64_t(g.expected.size());
  ASSERT_EQ(dtype_row_bytes(g.type, n), g.encoded.size()) << GetParam();
  std::vector<float> out(g.expected.size(), -12345.f);
  dequantize(g.type, g.encoded.data(), out.data(), n);
  int bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (!same_float(out[i], g.expected[i]) && bad++ < 5)
      ADD_FAILURE() << GetParam() << " element " << i << ": got " << out[i] << " want " << g.expected[i];
  EXPECT_EQ(bad, 0) << GetParam();

  // Block by block (a row that starts mid-tensor) gives the same values.
  const DTypeInfo& di = dtype_info(g.type);
  std::vector<float> one(size_t(di.block_size));
  for (int64_t b = 0; b < n / di.block_size; ++b) {
    dequantize(g.type, g.encoded.data() + b * di.block_bytes, one.data(), di.block_size);
    for (int i = 0; i < di.block_size; ++i) ASSERT_TRUE(same_float(one[i], g.expected[b * di.block_size + i]));
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantGolden,
                         ::testing::Values("F32", "F16", "BF16", "F64", "Q4_0", "Q4_0_random", "Q4_1",
                                           "Q4_1_random", "Q5_0", "Q5_0_random", "Q5_1", "Q5_1_random",
                                           "Q8_0", "Q8_0_random", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                                           "Q8_K"),
                         [](const auto& info) { return std::string(info.param); });

class QuantizeGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(QuantizeGolden, MatchesGgufPyByteExactly) {
  const Golden g = load_golden(GetParam());
  ASSERT_FALSE(g.source.empty());
  const auto enc = encode_f32(g.type, g.source.data(), int64_t(g.source.size()));
  ASSERT_EQ(enc.size(), g.encoded.size());
  size_t first_bad = enc.size();
  for (size_t i = 0; i < enc.size(); ++i)
    if (enc[i] != g.encoded[i]) {
      first_bad = i;
      break;
    }
  EXPECT_EQ(first_bad, enc.size()) << GetParam() << ": first differing byte";
}

INSTANTIATE_TEST_SUITE_P(Writable, QuantizeGolden, ::testing::Values("F16", "BF16", "Q4_0", "Q4_1", "Q8_0"),
                         [](const auto& info) { return std::string(info.param); });

TEST(Dequant, RejectsPartialBlocksAndIntegerTypes) {
  std::vector<uint8_t> buf(64);
  std::vector<float> out(64);
  test::expect_error([&] { dequantize(DType::Q4_0, buf.data(), out.data(), 31); }, {"Q4_0", "31", "block size 32"});
  test::expect_error([&] { dequantize(DType::I32, buf.data(), out.data(), 4); }, {"I32"});
  test::expect_error([&] { dequantize(DType::Q8_1, buf.data(), out.data(), 32); }, {"Q8_1"});
  test::expect_error([&] { dtype_info(DType(99)); }, {"99"});
}

TEST(Dequant, ParallelMatchesSerial) {
  // 2^20 elements of Q4_K: enough to be split across the pool.
  const int64_t n = int64_t(1) << 20;
  const auto& di = dtype_info(DType::Q4_K);
  std::vector<uint8_t> blocks(size_t(n / di.block_size) * di.block_bytes);
  std::mt19937 rng(7);
  for (auto& b : blocks) b = uint8_t(rng());
  for (size_t i = 0; i < blocks.size(); i += di.block_bytes) {  // finite fp16 d, dmin (0x2c00 = 0.0625)
    blocks[i] = 0x00; blocks[i + 1] = 0x2c; blocks[i + 2] = 0x00; blocks[i + 3] = 0x28;
  }
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  dequantize(DType::Q4_K, blocks.data(), a.data(), n);
  dequantize_parallel(DType::Q4_K, blocks.data(), b.data(), n);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

TEST(Quantize, RoundTripErrorIsSmall) {
  const auto x = test::random_floats(4096, 3);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1}) {
    const auto enc = encode_f32(t, x.data(), int64_t(x.size()));
    std::vector<float> y(x.size());
    dequantize(t, enc.data(), y.data(), int64_t(y.size()));
    double err = 0, ref = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += (x[i] - y[i]) * (x[i] - y[i]);
      ref += x[i] * x[i];
    }
    const double rel = std::sqrt(err / ref);
    EXPECT_LT(rel, t == DType::Q8_0 ? 0.01 : 0.15) << dtype_info(t).name;
  }
}

}  // namespace
}  // namespace longctx

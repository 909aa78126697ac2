// test_quant_matmul.cpp (tests/kernels): the fast CPU path's quantized matmul (kernels/cpu/
// quant_dot.h, quant_matmul.h) against an fp64 oracle, for every weight type and every kernel set
// this CPU can run (scalar, AVX2, AVX-512 VNNI), on fresh random inputs with odd sizes and tails.
//
// The oracle: W's exact values from the loader's dequantizer (ggml's arithmetic) and the sum in
// fp64, once with x in fp32 (the bound is the activation rounding, sum_i |w_i| * d_b(i) / 2 with
// d_b = max|x| / 127 over x's block of 32) and once with x as quantized (only fp32 rounding is
// left: a relative 1e-5 covers some 1e3 additions of terms within 2^-24 of their value).
// Run: build/tests/kernels/test_kernels --gtest_filter='Quant*'
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/quant_matmul.h"
#include "loader/model_file.h"
#include "loader/quantize.h"
#include "util/error.h"
#include "util/half.h"
#include "util/thread_pool.h"

namespace longctx {
namespace {

std::mt19937_64& rng() {
  static std::mt19937_64 gen = [] {
    const uint64_t seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    std::printf("[test_quant_matmul] random seed %llu\n", (unsigned long long)seed);
    return std::mt19937_64(seed);
  }();
  return gen;
}

std::vector<float> normal(int64_t n, float sigma) {
  std::normal_distribution<float> d(0.f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng());
  return v;
}

DType dtype_of(QuantType t) {
  switch (t) {
    case QuantType::q4_0: return DType::Q4_0;
    case QuantType::q4_1: return DType::Q4_1;
    case QuantType::q8_0: return DType::Q8_0;
    case QuantType::q4_k: return DType::Q4_K;
  }
  return DType::F32;
}

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// A random [rows, cols] matrix of `type`: the repo's ggml quantizers on Gaussian rows (Q4_0, Q4_1,
// Q8_0); for Q4_K (no quantizer here) random scale, min and nibble bytes with positive fp16 d, dmin.
QuantMatrix random_matrix(QuantType type, int64_t rows, int64_t cols) {
  QuantMatrix m;
  m.type = type;
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = dtype_row_bytes(dtype_of(type), cols);
  m.data.resize(size_t(rows) * m.row_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = m.data.data() + r * m.row_bytes;
    const std::vector<float> w = normal(cols, 0.05f);
    switch (type) {
      case QuantType::q4_0: quantize_row_q4_0(w.data(), row, cols); break;
      case QuantType::q4_1: quantize_row_q4_1(w.data(), row, cols); break;
      case QuantType::q8_0: quantize_row_q8_0(w.data(), row, cols); break;
      case QuantType::q4_k:
        for (int64_t b = 0; b < cols / 256; ++b) {
          uint8_t* blk = row + b * 144;
          for (int i = 4; i < 144; ++i) blk[i] = uint8_t(byte(rng()));
          put_f16(blk, scale(rng()) / 63.f);
          put_f16(blk + 2, scale(rng()) / 63.f);
        }
        break;
    }
  }
  return m;
}

std::vector<float> dequantized(const QuantMatrix& m) {
  std::vector<float> w(size_t(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) dequantize(dtype_of(m.type), m.data.data() + r * m.row_bytes, w.data() + r * m.cols, m.cols);
  return w;
}

// Checks y [T, rows] against two fp64 oracles; returns the largest error / bound of the first.
//   1. W . x (the fp32 activations): the error is the activation rounding, within
//      sum_i |w_i| * d_b(i) / 2, plus fp32 sums (1e-5 of sum_i |w_i x_i|).
//   2. W . x^ (x^ = d q, the activations as quantized, rows t0.. of xq): the same integers and
//      scales in exact arithmetic, so only fp32 rounding remains: within 1e-5 of
//      sum_i (|w_i| + max|w| of its block) |x^_i| (the block maximum covers Q4_1's d q + m, whose
//      parts can be larger than w). This catches an error far smaller than the first bound.
double check_against_oracle(const QuantMatrix& m, const std::vector<float>& x, const float* bias, int64_t T,
                            const std::vector<float>& y, const Q8Rows& xq, int64_t t0) {
  const std::vector<float> w = dequantized(m);
  std::vector<double> wmax(w.size());  // max |w| over each weight's block of 32
  for (size_t b = 0; b < w.size() / 32; ++b) {
    double a = 0;
    for (size_t j = 0; j < 32; ++j) a = std::max(a, double(std::fabs(w[b * 32 + j])));
    for (size_t j = 0; j < 32; ++j) wmax[b * 32 + j] = a;
  }
  double worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x.data() + t * m.cols;
    const int64_t row0 = (t0 + t) * xq.nb;  // this token's first block in xq
    for (int64_t r = 0; r < m.rows; ++r) {
      const float* wr = w.data() + r * m.cols;
      const double b0 = bias ? bias[r] : 0.0;
      double ref = b0, rounding = 0, magnitude = std::fabs(b0), ref_q = b0, magnitude_q = std::fabs(b0);
      for (int64_t i = 0; i < m.cols; ++i) {
        const int64_t blk = row0 + i / 32;
        const double xhat = double(xq.d[size_t(blk)]) * xq.q[size_t(blk * 32 + i % 32)];
        ref += double(wr[i]) * xt[i];
        rounding += std::fabs(double(wr[i])) * xq.d[size_t(blk)] / 2;
        magnitude += std::fabs(double(wr[i]) * xt[i]);
        ref_q += double(wr[i]) * xhat;
        magnitude_q += (std::fabs(double(wr[i])) + wmax[size_t(r * m.cols + i)]) * std::fabs(xhat);
      }
      const double got = y[size_t(t * m.rows + r)];
      const double bound = rounding * 1.0001 + 1e-5 * magnitude + 1e-30;
      EXPECT_LE(std::fabs(got - ref), bound) << "row " << r << " token " << t << ": got " << got << ", oracle " << ref;
      EXPECT_LE(std::fabs(got - ref_q), 1e-5 * magnitude_q + 1e-30)
          << "row " << r << " token " << t << ": got " << got << ", oracle on the quantized x " << ref_q;
      worst = std::max(worst, std::fabs(got - ref) / bound);
    }
  }
  return worst;
}

std::vector<CpuIsa> isas() {
  std::vector<CpuIsa> v;
  for (CpuIsa isa : {CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512vnni})
    if (cpu_isa_supported(isa)) v.push_back(isa);
  return v;
}

struct Shape {
  int64_t rows, cols, T;
};

// One tile call per shape and kernel set: every row and token of the tile against the oracle.
void check_tiles(QuantType type, const std::vector<Shape>& shapes) {
  for (CpuIsa isa : isas()) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(testing::Message() << quant_type_info(type).name << " on " << cpu_isa_name(isa) << ": rows "
                                      << s.rows << ", cols " << s.cols << ", T " << s.T);
      const QuantMatrix m = random_matrix(type, s.rows, s.cols);
      const std::vector<float> x = normal(s.T * s.cols, 1.f);
      Q8Rows xq;
      xq.resize(s.T + 1, s.cols / 32);  // one more row first: the tile starts at row t0 = 1
      quantize_q8_rows(normal(s.cols, 1.f).data(), 0, 1, xq);
      std::vector<float> x1(size_t((s.T + 1) * s.cols));
      std::copy(x.begin(), x.end(), x1.begin() + s.cols);
      quantize_q8_rows(x1.data(), 1, s.T + 1, xq);
      std::vector<float> y(size_t(s.T * s.rows), NAN);
      quant_gemm_tile({type, m.data.data(), m.row_bytes, s.cols, s.rows, &xq, 1, s.T, y.data(), s.rows}, isa);
      const double worst = check_against_oracle(m, x, nullptr, s.T, y, xq, 1);
      EXPECT_GT(worst, 0.0);  // the rounding is there: the comparison is not vacuous
    }
  }
}

// Shapes: one block, odd row counts, token counts around the kernels' group of 4 (1, 3, 5, 9).
// Blocks per row: 1, 3, 5 (single blocks only), 8 (one group), 9 and 17 (groups + a tail), 18
// (the 576-wide rows), 48; Q4_K: 1 to 6 super-blocks.
const std::vector<Shape> kShapes32 = {{1, 32, 1},   {3, 96, 3},   {7, 160, 5},  {5, 256, 4},
                                      {6, 288, 2},  {9, 544, 7},  {33, 576, 1}, {17, 1536, 9}};
const std::vector<Shape> kShapes256 = {{1, 256, 1}, {3, 512, 3}, {7, 768, 5}, {13, 1536, 9}, {5, 256, 4}};

TEST(QuantDot, Q4_0) { check_tiles(QuantType::q4_0, kShapes32); }
TEST(QuantDot, Q4_1) { check_tiles(QuantType::q4_1, kShapes32); }
TEST(QuantDot, Q8_0) { check_tiles(QuantType::q8_0, kShapes32); }
TEST(QuantDot, Q4_K) { check_tiles(QuantType::q4_k, kShapes256); }

// Every type from kPanelMinTokens token rows up (AVX-512 VNNI: 16-row panels, 8 token rows a
// pass; the shapes above with T of 4, 5, 7, 9 reach it too): full and partial panels (rows 16,
// 37, 5, 33, 18), full passes and token tails (T 8, 13, 21, 64, 9), one block to 48 blocks per
// row (Q4_K: 1 to 6 super-blocks).
const std::vector<Shape> kPanelShapes = {{16, 256, 8}, {37, 576, 21}, {5, 96, 13}, {33, 1536, 64}, {18, 32, 9}};
TEST(QuantDot, Q4_0Panels) { check_tiles(QuantType::q4_0, kPanelShapes); }
TEST(QuantDot, Q4_1Panels) { check_tiles(QuantType::q4_1, kPanelShapes); }
TEST(QuantDot, Q8_0Panels) { check_tiles(QuantType::q8_0, kPanelShapes); }
TEST(QuantDot, Q4_KPanels) { check_tiles(QuantType::q4_k, {{16, 256, 8}, {37, 1536, 21}, {5, 512, 13}, {33, 768, 64}}); }

// Q8_0 weights of -128 (not produced by the quantizer, legal in a file) take the |w| = 128 path
// (2 token rows) and the w + 128 = 0 path (10 rows: the AVX-512 panels).
TEST(QuantDot, Q8_0ExtremeWeights) {
  for (CpuIsa isa : isas()) {
    for (int64_t T : {int64_t(2), int64_t(10)}) {
      SCOPED_TRACE(testing::Message() << cpu_isa_name(isa) << ", T " << T);
      QuantMatrix m = random_matrix(QuantType::q8_0, 3, 64);
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t b = 0; b < 2; ++b)
          for (int j = 0; j < 32; j += 3) m.data[size_t(r * m.row_bytes + b * 34 + 2 + j)] = uint8_t(j % 2 ? 0x80 : 0x7f);
      const std::vector<float> x = normal(T * 64, 1.f);
      Q8Rows xq;
      xq.resize(T, 2);
      quantize_q8_rows(x.data(), 0, T, xq);
      std::vector<float> y(size_t(3 * T));
      quant_gemm_tile({QuantType::q8_0, m.data.data(), m.row_bytes, 64, 3, &xq, 0, T, y.data(), 3}, isa);
      check_against_oracle(m, x, nullptr, T, y, xq, 0);
    }
  }
}

// quantize_q8_rows: |x - d q| <= d / 2 with d = max|x| / 127, s = d * sum(q); a zero block gives 0.
TEST(QuantDot, ActivationQuantization) {
  std::vector<float> x = normal(32 * 7 * 2, 3.f);  // 2 rows of 7 blocks
  std::fill(x.begin() + 64, x.begin() + 96, 0.f);  // one zero block
  Q8Rows q;
  q.resize(2, 7);
  quantize_q8_rows(x.data(), 0, 2, q, CpuIsa::scalar);
  for (size_t b = 0; b < 14; ++b) {
    float amax = 0;
    int sum = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    EXPECT_FLOAT_EQ(q.d[b], amax / 127.f);
    for (size_t j = 0; j < 32; ++j) {
      EXPECT_LE(std::fabs(x[b * 32 + j] - q.d[b] * q.q[b * 32 + j]), q.d[b] / 2 * 1.0001f);
      sum += q.q[b * 32 + j];
    }
    EXPECT_FLOAT_EQ(q.s[b], q.d[b] * float(sum));
  }
  EXPECT_EQ(q.d[2], 0.f);
  for (CpuIsa isa : isas()) {  // every kernel set writes the same bytes
    Q8Rows v;
    v.resize(2, 7);
    quantize_q8_rows(x.data(), 0, 2, v, isa);
    EXPECT_EQ(v.q, q.q) << cpu_isa_name(isa);
    EXPECT_EQ(v.d, q.d) << cpu_isa_name(isa);
    EXPECT_EQ(v.s, q.s) << cpu_isa_name(isa);
  }
}

// The threaded matmul (activation quantization, row split, token tiles of 64, bias) on a pool of
// 3 threads: a GEMV and a prefill-sized GEMM with a partial last token tile.
TEST(QuantMatmul, ThreadedWithBias) {
  ThreadPool pool(3);
  for (QuantType type : {QuantType::q4_0, QuantType::q4_1, QuantType::q8_0, QuantType::q4_k}) {
    for (int64_t T : {int64_t(1), int64_t(70)}) {
      SCOPED_TRACE(testing::Message() << quant_type_info(type).name << ", T " << T);
      const int64_t rows = 101, cols = 512;
      const QuantMatrix m = random_matrix(type, rows, cols);
      const std::vector<float> x = normal(T * cols, 1.f), bias = normal(rows, 0.5f);
      Q8Rows xq;
      std::vector<float> y(size_t(T * rows), NAN);
      quant_matmul({.x = x.data(), .w = &m, .bias = bias.data(), .y = y.data(), .T = T, .xq = &xq}, pool);
      check_against_oracle(m, x, bias.data(), T, y, xq, 0);
    }
  }
}

// rows_alone (batched decode): each of T rows gives bit for bit what a T = 1 call on that row
// gives, whichever kernel set this CPU picks for T rows (the panel kernel sums in another order).
TEST(QuantMatmul, RowsAloneEqualOneRowCallsBitForBit) {
  ThreadPool pool(2);
  for (QuantType type : {QuantType::q4_0, QuantType::q4_1, QuantType::q8_0, QuantType::q4_k}) {
    SCOPED_TRACE(quant_type_info(type).name);
    const int64_t T = 9, rows = 67, cols = 512;
    const QuantMatrix m = random_matrix(type, rows, cols);
    const std::vector<float> x = normal(T * cols, 1.f);
    Q8Rows xq;
    std::vector<float> batched(size_t(T * rows), NAN), alone(size_t(rows), NAN);
    quant_matmul({.x = x.data(), .w = &m, .y = batched.data(), .T = T, .xq = &xq, .rows_alone = true}, pool);
    for (int64_t t = 0; t < T; ++t) {
      quant_matmul({.x = x.data() + t * cols, .w = &m, .y = alone.data(), .T = 1, .xq = &xq}, pool);
      EXPECT_EQ(std::memcmp(alone.data(), batched.data() + t * rows, size_t(rows) * sizeof(float)), 0) << "row " << t;
    }
  }
}

TEST(QuantDot, BadBlockMultipleIsAnError) {
  const QuantMatrix m = random_matrix(QuantType::q4_k, 1, 256);
  Q8Rows xq;
  xq.resize(1, 4);
  float y = 0;
  EXPECT_THROW(quant_gemm_tile({QuantType::q4_k, m.data.data(), m.row_bytes, 128, 1, &xq, 0, 1, &y, 1}, CpuIsa::scalar),
               Error);
}

}  // namespace
}  // namespace longctx

// test_quant_matmul.cpp (tests/kernels): the fast CPU path's quantized matmul (kernels/cpu/
// quant_dot.h, quant_matmul.h) against an fp64 oracle, for every weight type and every kernel set
// this CPU can run (scalar, AVX2, AVX-512 VNNI), on fresh random inputs with odd sizes and tails.
//
// The oracle: W's exact values from the loader's dequantizer (ggml's arithmetic), x in fp32, the
// sum in fp64. The kernels differ from it by the activation rounding only, which is bounded per
// output by sum_i |w_i| * d_b(i) / 2 (d_b = max|x| / 127 over x's block of 32), plus fp32
// rounding of the sums (a relative 1e-5 of sum_i |w_i x_i| covers some 1e3 additions of terms
// each within 2^-24 of their value). Run: build/tests/kernels/test_kernels --gtest_filter='Quant*'
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

// Checks y [T, rows] against the oracle and the bound above; returns the largest error / bound.
double check_against_oracle(const QuantMatrix& m, const std::vector<float>& x, const float* bias, int64_t T,
                            const std::vector<float>& y) {
  const std::vector<float> w = dequantized(m);
  double worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x.data() + t * m.cols;
    std::vector<double> d_block(size_t(m.cols / 32));  // the activation step of each block
    for (int64_t b = 0; b < m.cols / 32; ++b) {
      double amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, double(std::fabs(xt[b * 32 + j])));
      d_block[size_t(b)] = amax / 127;
    }
    for (int64_t r = 0; r < m.rows; ++r) {
      const float* wr = w.data() + r * m.cols;
      double ref = bias ? bias[r] : 0.0, rounding = 0, magnitude = bias ? std::fabs(bias[r]) : 0.0;
      for (int64_t i = 0; i < m.cols; ++i) {
        ref += double(wr[i]) * xt[i];
        rounding += std::fabs(double(wr[i])) * d_block[size_t(i / 32)] / 2;
        magnitude += std::fabs(double(wr[i]) * xt[i]);
      }
      const double bound = rounding * 1.0001 + 1e-5 * magnitude + 1e-30;
      const double err = std::fabs(double(y[size_t(t * m.rows + r)]) - ref);
      EXPECT_LE(err, bound) << "row " << r << " token " << t << ": got " << y[size_t(t * m.rows + r)]
                            << ", oracle " << ref;
      worst = std::max(worst, err / bound);
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
      std::vector<BlockQ8> xq(size_t(s.T * s.cols / 32));
      quantize_q8(x.data(), s.T * s.cols, xq.data());
      std::vector<float> y(size_t(s.T * s.rows), NAN);
      quant_gemm_tile({type, m.data.data(), m.row_bytes, s.cols, s.rows, xq.data(), s.T, y.data(), s.rows}, isa);
      const double worst = check_against_oracle(m, x, nullptr, s.T, y);
      EXPECT_GT(worst, 0.0);  // the rounding is there: the comparison is not vacuous
    }
  }
}

// Shapes: one block, odd row counts, token counts around the kernels' group of 4 (1, 3, 5, 9).
const std::vector<Shape> kShapes32 = {{1, 32, 1}, {3, 96, 3}, {7, 160, 5}, {33, 576, 1}, {17, 1536, 9}, {5, 64, 4}};
const std::vector<Shape> kShapes256 = {{1, 256, 1}, {3, 512, 3}, {7, 768, 5}, {13, 1536, 9}, {5, 256, 4}};

TEST(QuantDot, Q4_0) { check_tiles(QuantType::q4_0, kShapes32); }
TEST(QuantDot, Q4_1) { check_tiles(QuantType::q4_1, kShapes32); }
TEST(QuantDot, Q8_0) { check_tiles(QuantType::q8_0, kShapes32); }
TEST(QuantDot, Q4_K) { check_tiles(QuantType::q4_k, kShapes256); }

// Q8_0 weights of -128 (not produced by the quantizer, legal in a file) take the |w| = 128 path.
TEST(QuantDot, Q8_0ExtremeWeights) {
  for (CpuIsa isa : isas()) {
    SCOPED_TRACE(cpu_isa_name(isa));
    QuantMatrix m = random_matrix(QuantType::q8_0, 3, 64);
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t b = 0; b < 2; ++b)
        for (int j = 0; j < 32; j += 3) m.data[size_t(r * m.row_bytes + b * 34 + 2 + j)] = uint8_t(j % 2 ? 0x80 : 0x7f);
    const std::vector<float> x = normal(2 * 64, 1.f);
    std::vector<BlockQ8> xq(4);
    quantize_q8(x.data(), 128, xq.data());
    std::vector<float> y(6);
    quant_gemm_tile({QuantType::q8_0, m.data.data(), m.row_bytes, 64, 3, xq.data(), 2, y.data(), 3}, isa);
    check_against_oracle(m, x, nullptr, 2, y);
  }
}

// quantize_q8: |x - d q| <= d / 2 with d = max|x| / 127, s = d * sum(q); all-zero blocks give 0.
TEST(QuantDot, ActivationQuantization) {
  std::vector<float> x = normal(32 * 7, 3.f);
  std::fill(x.begin() + 64, x.begin() + 96, 0.f);  // one zero block
  std::vector<BlockQ8> q(7);
  quantize_q8(x.data(), int64_t(x.size()), q.data());
  for (int b = 0; b < 7; ++b) {
    float amax = 0;
    int sum = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[size_t(b * 32 + j)]));
    EXPECT_FLOAT_EQ(q[size_t(b)].d, amax / 127.f);
    for (int j = 0; j < 32; ++j) {
      EXPECT_LE(std::fabs(x[size_t(b * 32 + j)] - q[size_t(b)].d * q[size_t(b)].q[j]), q[size_t(b)].d / 2 * 1.0001f);
      sum += q[size_t(b)].q[j];
    }
    EXPECT_FLOAT_EQ(q[size_t(b)].s, q[size_t(b)].d * float(sum));
  }
  EXPECT_EQ(q[2].d, 0.f);
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
      std::vector<BlockQ8> xq(size_t(T * cols / 32));
      std::vector<float> y(size_t(T * rows), NAN);
      quant_matmul({.x = x.data(), .w = &m, .bias = bias.data(), .y = y.data(), .T = T, .xq = xq.data()}, pool);
      check_against_oracle(m, x, bias.data(), T, y);
    }
  }
}

TEST(QuantDot, BadBlockMultipleIsAnError) {
  const QuantMatrix m = random_matrix(QuantType::q4_k, 1, 256);
  std::vector<BlockQ8> xq(4);
  float y = 0;
  EXPECT_THROW(quant_gemm_tile({QuantType::q4_k, m.data.data(), m.row_bytes, 128, 1, xq.data(), 1, &y, 1}, CpuIsa::scalar),
               Error);
}

}  // namespace
}  // namespace longctx

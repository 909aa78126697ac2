// test_sparse_decode_ref.cpp (tests/kernels): the CPU sparse decode reference (kernels/ref/
// sparse_decode.h) against the fp64 "dense attention with the same mask" oracle on fresh random
// cases (tests/common/sparse_decode_cases.h), the row normalisation on hand-written rows, format
// errors, and the fp8 e4m3 host conversions the fp8 pools rely on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "../common/sparse_decode_cases.h"
#include "kernels/ref/fp8_e4m3.h"
#include "kernels/ref/sparse_decode.h"
#include "util/error.h"

namespace longctx {
namespace {

std::mt19937_64& rng() {
  static std::mt19937_64 gen = [] {
    const uint64_t seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    std::printf("[test_kernels] random seed %llu\n", (unsigned long long)seed);
    return std::mt19937_64(seed);
  }();
  return gen;
}

// One row index from explicit ranges and columns.
struct OneRow {
  std::vector<int32_t> range_ptr, ranges, col_ptr, cols;
  OneRow(std::vector<int32_t> rg, std::vector<int32_t> cl) : ranges(std::move(rg)), cols(std::move(cl)) {
    range_ptr = {0, int32_t(ranges.size() / 2)};
    col_ptr = {0, int32_t(cols.size())};
  }
  DecodeIndex view() const {
    DecodeIndex ix;
    ix.n_seq = 1;
    ix.n_index_head = 1;
    ix.range_ptr = range_ptr.data();
    ix.ranges = ranges.data();
    ix.col_ptr = col_ptr.data();
    ix.cols = cols.data();
    ix.range_capacity = int64_t(ranges.size() / 2);
    ix.col_capacity = int64_t(cols.size());
    return ix;
  }
};

TEST(DecodeRowKeys, NormalisesHandWrittenRows) {
  using V = std::vector<int32_t>;
  // Overlapping, touching and nested ranges; columns repeated, inside ranges, past the length.
  EXPECT_EQ(decode_row_keys(OneRow({2, 5, 3, 7, 7, 9, 8, 8}, {0, 0, 4, 9, 12, 12, 20}).view(), 0, 15),
            (V{0, 2, 3, 4, 5, 6, 7, 8, 9, 12}));
  // Clipping: a negative start, an end past the length, a range starting past it.
  EXPECT_EQ(decode_row_keys(OneRow({-4, 2, 5, 100, 200, 300}, {-1, 6}).view(), 0, 8), (V{0, 1, 5, 6, 7}));
  EXPECT_EQ(decode_row_keys(OneRow({}, {}).view(), 0, 8), V{});
  EXPECT_EQ(decode_row_keys(OneRow({8, 9}, {8}).view(), 0, 8), V{});
  EXPECT_EQ(decode_row_keys(OneRow({}, {3}).view(), 0, 8), V{3});
  // A sinks + window pair that overlaps on a short sequence.
  EXPECT_EQ(decode_row_keys(OneRow({0, 4, 1, 6}, {}).view(), 0, 6), (V{0, 1, 2, 3, 4, 5}));
}

TEST(DecodeRowKeys, RejectsBrokenFormat) {
  EXPECT_THROW(decode_row_keys(OneRow({5, 6, 2, 3}, {}).view(), 0, 10), Error);  // ranges unsorted
  EXPECT_THROW(decode_row_keys(OneRow({}, {4, 2}).view(), 0, 10), Error);        // columns unsorted
  OneRow over({0, 1}, {1});
  over.col_ptr[1] = 2;  // past the capacity
  EXPECT_THROW(decode_row_keys(over.view(), 0, 10), Error);
}

TEST(Fp8E4m3, DecodesAndRoundTripsEveryCode) {
  for (int b = 0; b < 256; ++b) {
    const float x = e4m3_to_f32(uint8_t(b));
    if ((b & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(x)) << b;
      continue;
    }
    EXPECT_EQ(int(f32_to_e4m3(x)), b) << "code " << b << " value " << x;
  }
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.f, -9));
  EXPECT_EQ(f32_to_e4m3(1e6f), 0x7e);  // saturates
  // Nearest code, against a brute-force search over the positive codes; an exact tie between two codes
  // (a random float can land on the midpoint) rounds to the even code, as the hardware's cvt does.
  std::uniform_real_distribution<float> u(-500.f, 500.f);
  for (int i = 0; i < 20000; ++i) {
    const float x = i % 2 ? u(rng()) : u(rng()) * 1e-3f;
    const uint8_t code = f32_to_e4m3(x);
    const float got = e4m3_to_f32(code);
    float err_best = std::fabs(x);  // code 0
    int n_best = 1;                  // codes at that error: 2 is a tie
    for (int b = 1; b < 0x7f; ++b) {
      const float err = std::fabs(e4m3_to_f32(uint8_t(b)) - std::fabs(x));
      if (err < err_best) err_best = err, n_best = 1;
      else if (err == err_best) ++n_best;
    }
    EXPECT_EQ(std::fabs(std::fabs(got) - std::fabs(x)), err_best) << x;
    if (n_best > 1) {
      EXPECT_EQ(code & 1, 0) << "tie at " << x << " must round to the even code";
    }
  }
  // The midpoint between codes 0x29 (0.28125) and 0x2a (0.3125) rounds to the even code, both signs.
  EXPECT_EQ(f32_to_e4m3(0.296875f), 0x2a);
  EXPECT_EQ(f32_to_e4m3(-0.296875f), 0xaa);
}

void run_case(const test::DecodeCaseShape& shape) {
  SCOPED_TRACE(::testing::Message() << "n_seq=" << shape.lens.size() << " heads=" << shape.n_head << "/"
                                    << shape.n_kv_head << " index heads=" << shape.n_index_head
                                    << " d=" << shape.head_dim << " page=" << shape.page_size
                                    << " elem=" << int(shape.elem));
  const test::DecodeCase c = test::make_case(shape, rng());
  std::vector<float> o(c.q.size()), lse(size_t(c.n_seq) * shape.n_head);
  SparseDecodeRefParams p;
  p.q = c.q.data();
  p.o = o.data();
  p.lse = lse.data();
  p.n_head = shape.n_head;
  p.kv = c.host_view();
  p.index = c.host_index();
  sparse_decode_ref(p);
  std::vector<double> o_ref, lse_ref;
  test::oracle(c, o_ref, lse_ref);
  // fp32 dot products and sums over up to a few thousand keys: ~1e-5 relative.
  const double atol = 2e-5 * test::max_abs_v(c);
  int64_t bad = 0, empty = 0;
  double worst = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    const double e = std::fabs(o[i] - o_ref[i]);
    worst = std::max(worst, e);
    if (!(e <= atol + 1e-4 * std::fabs(o_ref[i]))) ++bad;
  }
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lse_ref[i])) {
      ++empty;
      EXPECT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << "row " << i << " should be empty, lse " << lse[i];
      continue;
    }
    EXPECT_NEAR(lse[i], lse_ref[i], 1e-4 * std::max(1.0, std::fabs(lse_ref[i]))) << "lse " << i;
  }
  std::printf("  ref sparse decode n_seq=%zu h=%d/%d ih=%d d=%d page=%d elem=%d: max|dO|=%.3g, %lld empty heads\n",
              shape.lens.size(), shape.n_head, shape.n_kv_head, shape.n_index_head, shape.head_dim, shape.page_size,
              int(shape.elem), worst, (long long)empty);
  EXPECT_EQ(bad, 0) << "worst |dO| " << worst << " atol " << atol;
}

TEST(SparseDecodeRef, MatchesFp64OracleBf16Page16SharedIndex) {
  run_case({{300, 1, 77, 1000, 16, 513, 64, 129}, 32, 8, 1, 128, 16, KvElem::bf16});
}
TEST(SparseDecodeRef, MatchesFp64OraclePerKvHeadPage1Fp8) {
  run_case({{200, 64, 5, 333}, 32, 8, 8, 128, 1, KvElem::fp8_e4m3});
}
TEST(SparseDecodeRef, MatchesFp64OraclePerQueryHeadPage64F32) {
  run_case({{700, 65, 128}, 4, 1, 4, 64, 64, KvElem::f32});
}
TEST(SparseDecodeRef, MatchesFp64OracleManySequencesPeaky) {
  std::vector<int32_t> lens;
  std::uniform_int_distribution<int> u(1, 400);
  for (int i = 0; i < 32; ++i) lens.push_back(u(rng()));
  test::DecodeCaseShape s{lens, 8, 2, 2, 64, 16, KvElem::bf16};
  s.q_scale = 4.0;
  run_case(s);
}

TEST(SparseDecodeRef, RejectsBadShapes) {
  const test::DecodeCase c = test::make_case({{10}, 8, 2, 1, 64, 16, KvElem::bf16}, rng());
  std::vector<float> o(c.q.size());
  SparseDecodeRefParams p;
  p.q = c.q.data();
  p.o = o.data();
  p.n_head = 8;
  p.kv = c.host_view();
  p.index = c.host_index();
  p.index.n_index_head = 3;  // does not divide n_head
  EXPECT_THROW(sparse_decode_ref(p), Error);
  p.index.n_index_head = 1;
  p.kv.on_device = true;
  EXPECT_THROW(sparse_decode_ref(p), Error);
}

}  // namespace
}  // namespace longctx

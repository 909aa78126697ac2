// test_structured_qk.cpp (tests/cuda): the synthetic Q/K generator (kernels/cuda/structured_qk.h)
// used by the sparse benchmarks and `bench model --synthetic-qk`.
// Checks: a prompt filled chunk by chunk (pos0 > 0) equals the same prompt filled in one piece,
// bit for bit (the engine fills per chunk, the kernel benchmarks in one piece); values are finite
// and not constant; the planted structure is there: a local-heavy head scores a query's own
// position above distant keys on average, and every query scores the sink keys above average.
// Run: build-gpusparse/tests/cuda/test_cuda --gtest_filter='StructuredQk*' (skips without a GPU).
#include <cmath>
#include <vector>

#include "kernels/cuda/structured_qk.h"
#include "test_util.h"

namespace longctx::cuda::test {
namespace {

constexpr int kD = 128;

TEST(StructuredQk, ChunkedEqualsWholeAndHasStructure) {
  LC_REQUIRE_GPU();
  const int H = 8, HK = 2;
  const int64_t N = 3000, split = 1234;  // a chunk boundary off any multiple of 64
  StructuredQk gen(H, HK, 5);
  DevBuf q1(size_t(N) * H * kD * 2), k1(size_t(N) * HK * kD * 2), q2(q1.bytes), k2(k1.bytes);
  q2.poison();
  k2.poison();
  gen.fill({q1.p, k1.p, N, 0, 3});
  gen.fill({q2.p, k2.p, split, 0, 3});
  gen.fill({static_cast<char*>(q2.p) + size_t(split) * H * kD * 2, static_cast<char*>(k2.p) + size_t(split) * HK * kD * 2,
            N - split, split, 3});
  device_sync();
  const auto qa = q1.download<uint16_t>(size_t(N) * H * kD), qb = q2.download<uint16_t>(size_t(N) * H * kD);
  const auto ka = k1.download<uint16_t>(size_t(N) * HK * kD), kb = k2.download<uint16_t>(size_t(N) * HK * kD);
  EXPECT_EQ(qa, qb);
  EXPECT_EQ(ka, kb);
  double sum = 0, sum2 = 0;
  for (uint16_t x : qa) {
    const double v = bf16_to_f32(x);
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sum2 += v * v;
  }
  const double var = sum2 / double(qa.size()) - (sum / double(qa.size())) * (sum / double(qa.size()));
  EXPECT_GT(var, 0.5);  // noise alone has variance 1
  // Structure on KV head 0: scores of query head h (of group 0) against keys.
  auto score = [&](int h, int64_t i, int64_t j) {
    double s = 0;
    for (int d = 0; d < kD; ++d)
      s += double(bf16_to_f32(qa[(size_t(i) * H + h) * kD + d])) * bf16_to_f32(ka[(size_t(j) * HK + 0) * kD + d]);
    return s / std::sqrt(double(kD));
  };
  double own = 0, far = 0, sink = 0, avg = 0;
  int n = 0;
  for (int64_t i = 1500; i < 2900; i += 50, ++n)
    for (int h = 0; h < H / HK; ++h) {
      own += score(h, i, i);
      far += score(h, i, i - 1000);
      sink += score(h, i, 0);
      avg += score(h, i, i - 700 - h);
    }
  EXPECT_GT(own, far + 2.0 * n) << "local/diagonal structure";
  EXPECT_GT(sink, avg + 2.0 * n) << "attention sinks";
}

}  // namespace
}  // namespace longctx::cuda::test

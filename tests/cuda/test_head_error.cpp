// test_head_error.cpp: kernels/cuda/head_error.h (the GPU pattern search's per-head error sums)
// against an fp64 oracle on fresh random bf16 inputs: several shapes (head_dim 64, 128, 256 (Gemma 3's
// global layers) and an odd one, rows not a multiple of anything, one row, zero rows), the same bits on a second run
// (fixed-order reduction), and clear errors for bad arguments.
//   build-gpu/tests/cuda/test_cuda --gtest_filter='HeadError*'
#include <cmath>
#include <vector>

#include "kernels/cuda/head_error.h"
#include "test_util.h"
#include "util/error.h"

namespace longctx::cuda::test {
namespace {

struct Case {
  int64_t rows;
  int heads, dim;
};

// Oracle: per head {sum (a-b)^2, sum b^2} in fp64 over the bf16-rounded values.
std::vector<double> oracle(const std::vector<double>& a, const std::vector<double>& b, const Case& c) {
  std::vector<double> out(size_t(2 * c.heads), 0.0);
  for (int64_t i = 0; i < c.rows; ++i)
    for (int h = 0; h < c.heads; ++h)
      for (int t = 0; t < c.dim; ++t) {
        const size_t at = size_t((i * c.heads + h) * c.dim + t);
        out[size_t(2 * h)] += (a[at] - b[at]) * (a[at] - b[at]);
        out[size_t(2 * h + 1)] += b[at] * b[at];
      }
  return out;
}

TEST(HeadError, MatchesFp64Oracle) {
  LC_REQUIRE_GPU();
  for (const Case& c : {Case{1000, 4, 128}, Case{777, 3, 64}, Case{1500, 4, 256}, Case{1, 2, 128}, Case{65, 5, 40}, Case{0, 2, 64}}) {
    const size_t n = size_t(c.rows * c.heads * c.dim);
    std::vector<double> av, bv;
    std::vector<uint16_t> ah = random_bf16(n, 1.0, av), bh = random_bf16(n, 2.0, bv);
    DevBuf a(n * 2 + 16), b(n * 2 + 16), out(size_t(2 * c.heads) * sizeof(double));
    DevBuf ws(head_error_workspace_bytes(c.heads));
    if (n) a.upload(ah), b.upload(bh);
    out.poison();
    ws.poison();
    HeadErrorParams p{a.p, b.p, out.as<double>(), c.rows, c.heads, c.dim, ws.p, ws.bytes};
    head_error_sums(p);
    const auto got = out.download<double>(size_t(2 * c.heads));
    const auto ref = oracle(av, bv, c);
    // fp64 sums of the same bf16 values in another order: relative differences ~1e-13.
    const ErrStats st = compare(got, ref, 1e-9, 1e-9);
    EXPECT_EQ(st.n_bad + st.n_nan, 0) << c.rows << "x" << c.heads << "x" << c.dim << ": " << st.str();
    head_error_sums(p);  // again: the same bits (fixed reduction order)
    EXPECT_EQ(out.download<double>(size_t(2 * c.heads)), got);
  }
}

TEST(HeadError, IdenticalOutputsGiveZeroError) {
  LC_REQUIRE_GPU();
  const Case c{300, 4, 64};
  const size_t n = size_t(c.rows * c.heads * c.dim);
  std::vector<double> bv;
  DevBuf b(n * 2), out(size_t(2 * c.heads) * sizeof(double)), ws(head_error_workspace_bytes(c.heads));
  b.upload(random_bf16(n, 1.0, bv));
  head_error_sums({b.p, b.p, out.as<double>(), c.rows, c.heads, c.dim, ws.p, ws.bytes});
  const auto got = out.download<double>(size_t(2 * c.heads));
  const auto ref = oracle(bv, bv, c);
  for (int h = 0; h < c.heads; ++h) {
    EXPECT_EQ(got[size_t(2 * h)], 0.0);
    EXPECT_NEAR(got[size_t(2 * h + 1)], ref[size_t(2 * h + 1)], 1e-9 * ref[size_t(2 * h + 1)]);
  }
}

TEST(HeadError, BadArgumentsAreClearErrors) {
  LC_REQUIRE_GPU();
  DevBuf a(1024), out(64), ws(head_error_workspace_bytes(2));
  auto msg = [](const HeadErrorParams& p) -> std::string {
    try {
      head_error_sums(p);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(msg({a.p, a.p, out.as<double>(), 4, 2, 64, ws.p, ws.bytes - 8}).find("workspace"), std::string::npos);
  EXPECT_NE(msg({a.p, a.p, out.as<double>(), 4, 0, 64, ws.p, ws.bytes}).find("bad shape"), std::string::npos);
  EXPECT_NE(msg({nullptr, a.p, out.as<double>(), 4, 2, 64, ws.p, ws.bytes}).find("missing"), std::string::npos);
}

}  // namespace
}  // namespace longctx::cuda::test

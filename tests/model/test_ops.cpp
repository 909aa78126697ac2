// test_ops.cpp: the CPU reference ops against fp64 oracles on fresh random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "kernels/ref/attention.h"
#include "kernels/ref/fast_exp.h"
#include "kernels/ref/ops.h"
#include "util/thread_pool.h"

namespace longctx {
namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// fp64 oracle: causal (or full) softmax attention, GQA, query i at position q_pos0 + i.
void attention_oracle(const AttnParams& p, std::vector<double>& o, std::vector<double>& lse) {
  const int d = p.head_dim, group = p.n_head / p.n_kv_head;
  o.assign(size_t(p.n_q * p.n_head * d), 0);
  lse.assign(size_t(p.n_head * p.n_q), 0);
  for (int h = 0; h < p.n_head; ++h)
    for (int64_t i = 0; i < p.n_q; ++i) {
      const int64_t nk = p.causal ? p.q_pos0 + i + 1 : p.n_kv;
      std::vector<double> s(static_cast<size_t>(nk));
      double mx = -1e300;
      for (int64_t j = 0; j < nk; ++j) {
        double acc = 0;
        for (int c = 0; c < d; ++c)
          acc += double(p.q[(i * p.n_head + h) * d + c]) * p.k[(j * p.n_kv_head + h / group) * d + c];
        s[size_t(j)] = acc * p.scale;
        mx = std::max(mx, s[size_t(j)]);
      }
      double sum = 0;
      for (auto& x : s) sum += (x = std::exp(x - mx));
      lse[size_t(h * p.n_q + i)] = mx + std::log(sum);
      for (int64_t j = 0; j < nk; ++j)
        for (int c = 0; c < d; ++c)
          o[size_t((i * p.n_head + h) * d + c)] += s[size_t(j)] / sum * p.v[(j * p.n_kv_head + h / group) * d + c];
    }
}

struct AttnCase {
  int64_t n_q, n_kv, q_pos0;
  int n_head, n_kv_head, head_dim;
  bool causal;
};
// Readable test names (the name generator below; gtest's messages print GetParam() this way too).
void PrintTo(const AttnCase& c, std::ostream* os) {
  *os << "q" << c.n_q << "_kv" << c.n_kv << "_pos" << c.q_pos0 << "_h" << c.n_head << "_kvh" << c.n_kv_head << "_d"
      << c.head_dim << (c.causal ? "_causal" : "_full");
}

class AttentionRef : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionRef, MatchesFp64Oracle) {
  const AttnCase c = GetParam();
  ThreadPool pool(2);
  auto q = randn(size_t(c.n_q * c.n_head * c.head_dim), 1, 1.5f);
  auto k = randn(size_t(c.n_kv * c.n_kv_head * c.head_dim), 2, 1.5f);
  auto v = randn(size_t(c.n_kv * c.n_kv_head * c.head_dim), 3);
  std::vector<float> o(q.size()), lse(size_t(c.n_head * c.n_q));
  AttnParams p{q.data(), k.data(), v.data(), o.data(), lse.data(), c.n_q, c.n_kv, c.n_head, c.n_kv_head,
               c.head_dim, c.q_pos0, float(1 / std::sqrt(double(c.head_dim))), c.causal};
  attention_dense_ref(p, pool);
  std::vector<double> oo, ol;
  attention_oracle(p, oo, ol);
  // fp32 accumulation over up to a few hundred keys: errors ~1e-6 relative to |o| <= ~3.
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], oo[i], 2e-5) << "at " << i;
  for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], ol[i], 2e-5) << "lse at " << i;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionRef,
                         ::testing::Values(AttnCase{1, 1, 0, 1, 1, 8, true},          // single token
                                           AttnCase{37, 37, 0, 4, 2, 16, true},       // GQA, odd length
                                           AttnCase{70, 100, 30, 6, 2, 64, true},     // chunk after a prefix
                                           AttnCase{1, 200, 199, 8, 8, 32, true},     // decode step
                                           AttnCase{33, 50, 0, 4, 1, 16, false}),     // non-causal, MQA
                         [](const auto& info) { return ::testing::PrintToString(info.param); });

TEST(Ops, MatmulWithBiasMatchesOracle) {
  ThreadPool pool(2);
  const int64_t T = 5, n_in = 70, n_out = 131;
  auto x = randn(size_t(T * n_in), 4), w = randn(size_t(n_out * n_in), 5), b = randn(size_t(n_out), 6);
  std::vector<float> y(size_t(T * n_out));
  matmul_ref({x.data(), w.data(), b.data(), y.data(), T, n_in, n_out}, pool);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < n_out; ++o) {
      double acc = b[size_t(o)];
      for (int64_t i = 0; i < n_in; ++i) acc += double(x[size_t(t * n_in + i)]) * w[size_t(o * n_in + i)];
      ASSERT_NEAR(y[size_t(t * n_out + o)], acc, 1e-4);
    }
  // Single row (the decode path uses GEMV).
  std::vector<float> y1(static_cast<size_t>(n_out));
  matmul_ref({x.data(), w.data(), nullptr, y1.data(), 1, n_in, n_out}, pool);
  for (int64_t o = 0; o < n_out; ++o) ASSERT_NEAR(y1[size_t(o)], y[size_t(o)] - b[size_t(o)], 1e-4);
}

TEST(Ops, RmsNormMatchesOracle) {
  ThreadPool pool(2);
  auto x = randn(3 * 50, 7, 3.f), w = randn(50, 8);
  std::vector<float> y(x.size());
  rmsnorm_ref(x.data(), w.data(), y.data(), 3, 50, 1e-5f, pool);
  for (int t = 0; t < 3; ++t) {
    double ss = 0;
    for (int i = 0; i < 50; ++i) ss += double(x[t * 50 + i]) * x[t * 50 + i];
    const double inv = 1 / std::sqrt(ss / 50 + 1e-5);
    for (int i = 0; i < 50; ++i) ASSERT_NEAR(y[t * 50 + i], x[t * 50 + i] * inv * w[i], 1e-5);
  }
}

TEST(Ops, RopeRotatesHalvesByPositionAngle) {
  ThreadPool pool(2);
  const int D = 16, H = 3;
  RopeParams rp;
  rp.head_dim = D;
  rp.theta = 500000.f;
  std::vector<float> inv(D / 2);
  rope_inv_freq_ref(rp, nullptr, inv.data());
  auto x = randn(size_t(4 * H * D), 9);
  auto y = x;
  rope_apply_ref(y.data(), 4, H, D, 10, inv.data(), pool);
  for (int t = 0; t < 4; ++t)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < D / 2; ++i) {
        const double a = (10 + t) * std::pow(500000.0, -2.0 * i / D);
        const float* xv = x.data() + (t * H + h) * D;
        const float* yv = y.data() + (t * H + h) * D;
        ASSERT_NEAR(yv[i], xv[i] * std::cos(a) - xv[i + D / 2] * std::sin(a), 1e-4);
        ASSERT_NEAR(yv[i + D / 2], xv[i + D / 2] * std::cos(a) + xv[i] * std::sin(a), 1e-4);
      }
}

TEST(Ops, Llama3RopeScalingBands) {
  // Llama-3.1 parameters: high frequencies unchanged, low ones divided by the factor,
  // the band between interpolated.
  RopeParams rp;
  rp.head_dim = 128;
  rp.theta = 500000.f;
  rp.scaling = "llama3";
  rp.factor = 8.f;
  rp.low_freq_factor = 1.f;
  rp.high_freq_factor = 4.f;
  rp.original_context = 8192;
  std::vector<float> inv(64), plain(64);
  rope_inv_freq_ref(rp, nullptr, inv.data());
  rp.scaling = "none";
  rope_inv_freq_ref(rp, nullptr, plain.data());
  for (int i = 0; i < 64; ++i) {
    const double wavelen = 2 * std::numbers::pi / plain[i];
    if (wavelen < 8192.0 / 4) EXPECT_FLOAT_EQ(inv[i], plain[i]);
    else if (wavelen > 8192.0) EXPECT_FLOAT_EQ(inv[i], plain[i] / 8);
    else {
      EXPECT_LT(inv[i], plain[i]);
      EXPECT_GT(inv[i], plain[i] / 8);
    }
  }
}

TEST(Ops, SiluMul) {
  ThreadPool pool(2);
  auto g = randn(10000, 10), u = randn(10000, 11);
  auto r = g;
  silu_mul_ref(r.data(), u.data(), 10000, pool);
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(r[i], g[i] / (1 + std::exp(-double(g[i]))) * u[i], 1e-5);
}

}  // namespace
}  // namespace longctx

namespace longctx {
namespace {
TEST(Ops, FastExpIsAccurate) {
  double worst = 0;
  for (float x = -87.f; x <= 0.f; x += 0.0137f) {
    const double want = std::exp(double(x));
    worst = std::max(worst, std::abs(fast_exp(x) - want) / want);
  }
  EXPECT_LT(worst, 5e-7);
  EXPECT_EQ(fast_exp(-1000.f), 0.f);
  EXPECT_EQ(fast_exp(0.f), 1.f);
}
}  // namespace
}  // namespace longctx

// test_ops.cpp: the CPU reference ops against fp64 oracles on fresh random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "kernels/ref/attention.h"
#include "kernels/ref/fast_exp.h"
#include "kernels/ref/ops.h"
#include "util/error.h"
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

// fp64 oracle: causal (or full) softmax attention, GQA, query i at position q_pos0 + i; with a
// sliding window w, keys (pos - w, pos] only (scores of the others masked to zero weight).
void attention_oracle(const AttnParams& p, std::vector<double>& o, std::vector<double>& lse) {
  const int d = p.head_dim, group = p.n_head / p.n_kv_head;
  o.assign(size_t(p.n_q * p.n_head * d), 0);
  lse.assign(size_t(p.n_head * p.n_q), 0);
  for (int h = 0; h < p.n_head; ++h)
    for (int64_t i = 0; i < p.n_q; ++i) {
      const int64_t nk = p.causal ? p.q_pos0 + i + 1 : p.n_kv;
      const int64_t j0 = p.window > 0 ? std::max<int64_t>(0, p.q_pos0 + i - p.window + 1) : 0;
      std::vector<double> s(static_cast<size_t>(nk), 0.0);
      double mx = -1e300;
      for (int64_t j = j0; j < nk; ++j) {
        double acc = 0;
        for (int c = 0; c < d; ++c)
          acc += double(p.q[(i * p.n_head + h) * d + c]) * p.k[(j * p.n_kv_head + h / group) * d + c];
        s[size_t(j)] = acc * p.scale;
        mx = std::max(mx, s[size_t(j)]);
      }
      double sum = 0;
      for (int64_t j = j0; j < nk; ++j) sum += (s[size_t(j)] = std::exp(s[size_t(j)] - mx));
      lse[size_t(h * p.n_q + i)] = mx + std::log(sum);
      for (int64_t j = j0; j < nk; ++j)
        for (int c = 0; c < d; ++c)
          o[size_t((i * p.n_head + h) * d + c)] += s[size_t(j)] / sum * p.v[(j * p.n_kv_head + h / group) * d + c];
    }
}

struct AttnCase {
  int64_t n_q, n_kv, q_pos0;
  int n_head, n_kv_head, head_dim;
  bool causal;
  int64_t window = 0;  // sliding window (0: none)
};
// Readable test names (the name generator below; gtest's messages print GetParam() this way too).
void PrintTo(const AttnCase& c, std::ostream* os) {
  *os << "q" << c.n_q << "_kv" << c.n_kv << "_pos" << c.q_pos0 << "_h" << c.n_head << "_kvh" << c.n_kv_head << "_d"
      << c.head_dim << (c.causal ? "_causal" : "_full");
  if (c.window > 0) *os << "_w" << c.window;
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
  p.window = c.window;
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
                                           AttnCase{33, 50, 0, 4, 1, 16, false},      // non-causal, MQA
                                           // Sliding windows: inside one query tile, across tiles
                                           // and a cached prefix, wider than every position, decode.
                                           AttnCase{37, 37, 0, 4, 2, 16, true, 5},
                                           AttnCase{70, 100, 30, 6, 2, 64, true, 40},
                                           AttnCase{20, 20, 0, 2, 1, 32, true, 64},
                                           AttnCase{1, 300, 299, 4, 2, 32, true, 17},
                                           AttnCase{1, 300, 299, 4, 2, 32, true, 1}),
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

TEST(Ops, RmsNormWithUnitOffsetScalesByOnePlusWeight) {
  // Gemma's RMSNorm: weights stored as (scale - 1).
  ThreadPool pool(2);
  auto x = randn(4 * 40, 21, 2.f), w = randn(40, 22, 0.3f);
  std::vector<float> y(x.size());
  rmsnorm_ref(x.data(), w.data(), y.data(), 4, 40, 1e-6f, pool, 1.f);
  for (int t = 0; t < 4; ++t) {
    double ss = 0;
    for (int i = 0; i < 40; ++i) ss += double(x[t * 40 + i]) * x[t * 40 + i];
    const double inv = 1 / std::sqrt(ss / 40 + 1e-6);
    for (int i = 0; i < 40; ++i) ASSERT_NEAR(y[t * 40 + i], x[t * 40 + i] * inv * (1.0 + w[i]), 1e-5);
  }
}

TEST(Ops, GeluTanhMul) {
  ThreadPool pool(2);
  auto g = randn(10000, 23, 2.f), u = randn(10000, 24);
  auto r = g;
  gelu_tanh_mul_ref(r.data(), u.data(), 10000, pool);
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = g[i];
    const double gelu = 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
    ASSERT_NEAR(r[i], gelu * u[i], 1e-5 * (1 + std::abs(gelu * u[i])));
  }
}

// fp64 YaRN frequencies (the paper's ramp between extrapolated and interpolated dims).
std::vector<double> yarn_oracle(int d, double theta, double factor, double orig, double beta_fast, double beta_slow) {
  auto corr = [&](double rot) { return d * std::log(orig / (rot * 2 * std::numbers::pi)) / (2 * std::log(theta)); };
  const double low = std::max(std::floor(corr(beta_fast)), 0.0);
  double high = std::min(std::ceil(corr(beta_slow)), double(d - 1));
  if (high == low) high += 0.001;
  std::vector<double> f(size_t(d / 2));
  for (int i = 0; i < d / 2; ++i) {
    const double extra = std::pow(theta, -2.0 * i / d);
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    f[size_t(i)] = extra / factor * ramp + extra * (1 - ramp);
  }
  return f;
}

TEST(Ops, YarnRopeFrequenciesAndAttentionFactor) {
  // Qwen3 / Qwen2.5-1M style (theta 1e6, factor 4 over 32K) and a short one whose ramp lies
  // in the middle of the dims.
  struct Case { int d; float theta, factor; int64_t orig; };
  for (const Case c : {Case{128, 1e6f, 4.f, 32768}, Case{64, 10000.f, 8.f, 256}}) {
    RopeParams rp;
    rp.head_dim = c.d;
    rp.theta = c.theta;
    rp.scaling = "yarn";
    rp.factor = c.factor;
    rp.original_context = c.orig;
    std::vector<float> inv(size_t(c.d / 2));
    rope_inv_freq_ref(rp, nullptr, inv.data());
    const auto want = yarn_oracle(c.d, c.theta, c.factor, double(c.orig), 32, 1);
    int interpolated = 0, extrapolated = 0;
    for (int i = 0; i < c.d / 2; ++i) {
      ASSERT_NEAR(inv[size_t(i)], want[size_t(i)], 2e-6 * want[size_t(i)]) << "dim " << i;
      const double plain = std::pow(double(c.theta), -2.0 * i / c.d);
      interpolated += std::abs(want[size_t(i)] - plain / c.factor) < 1e-12 * plain;
      extrapolated += std::abs(want[size_t(i)] - plain) < 1e-12 * plain;
    }
    EXPECT_GT(interpolated, 0);  // the test covers both ends of the ramp
    EXPECT_GT(extrapolated, 0);
    EXPECT_NEAR(rope_attention_factor(rp), 0.1 * std::log(double(c.factor)) + 1, 1e-6);
  }
  RopeParams rp;
  rp.scaling = "yarn";
  rp.factor = 40.f;
  rp.mscale = 1.f;
  rp.mscale_all_dim = 0.707f;  // DeepSeek-style ratio
  EXPECT_NEAR(rope_attention_factor(rp), (0.1 * std::log(40.0) + 1) / (0.1 * 0.707 * std::log(40.0) + 1), 1e-6);
  rp.attention_factor = 1.25f;  // given explicitly: used as is
  EXPECT_FLOAT_EQ(rope_attention_factor(rp), 1.25f);
}

TEST(Ops, LongRopeFrequenciesAndAttentionFactor) {
  const int D = 32;
  auto ext = randn(D / 2, 25, 1.f);
  for (auto& e : ext) e = 1.f + std::abs(e) * 3;  // Phi-3's factors are >= 1
  RopeParams rp;
  rp.head_dim = D;
  rp.theta = 10000.f;
  rp.scaling = "longrope";
  rp.factor = 32.f;  // 128K / 4K
  rp.original_context = 4096;
  rp.longrope_ext = ext.data();
  std::vector<float> inv(D / 2);
  rope_inv_freq_ref(rp, nullptr, inv.data());
  for (int i = 0; i < D / 2; ++i) {
    const double want = 1 / (double(ext[size_t(i)]) * std::pow(10000.0, 2.0 * i / D));
    ASSERT_NEAR(inv[size_t(i)], want, 2e-6 * want);
  }
  EXPECT_NEAR(rope_attention_factor(rp), std::sqrt(1 + std::log(32.0) / std::log(4096.0)), 1e-6);
  rp.factor = 1.f;
  EXPECT_FLOAT_EQ(rope_attention_factor(rp), 1.f);
  rp.longrope_ext = nullptr;
  EXPECT_THROW(rope_inv_freq_ref(rp, nullptr, inv.data()), Error);
}

TEST(Ops, RopeAttentionFactorScalesCosAndSin) {
  ThreadPool pool(2);
  const int D = 16, H = 2;
  std::vector<float> inv(D / 2);
  RopeParams rp;
  rp.head_dim = D;
  rope_inv_freq_ref(rp, nullptr, inv.data());
  auto x = randn(size_t(3 * H * D), 26);
  auto y = x;
  const float f = 1.1386f;
  rope_apply_ref(y.data(), 3, H, D, 7, inv.data(), pool, f);
  for (int t = 0; t < 3; ++t)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < D / 2; ++i) {
        const double a = (7 + t) * std::pow(10000.0, -2.0 * i / D);
        const float* xv = x.data() + (t * H + h) * D;
        const float* yv = y.data() + (t * H + h) * D;
        ASSERT_NEAR(yv[i], f * (xv[i] * std::cos(a) - xv[i + D / 2] * std::sin(a)), 1e-4);
        ASSERT_NEAR(yv[i + D / 2], f * (xv[i + D / 2] * std::cos(a) + xv[i] * std::sin(a)), 1e-4);
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

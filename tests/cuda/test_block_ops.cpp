// test_block_ops.cpp (tests/cuda): the op variants the Gemma 3 / Qwen3 / YaRN / LongRoPE blocks
// need, vs fp64 twins of kernels/ref (the CPU forward's ops) on fresh random bf16 inputs:
// embedding scale, RMSNorm over head_dim rows (QK-norm) and with add_to_y (post-norm residual
// add), RoPE with a cos/sin factor (YaRN / LongRoPE attention factor); the GELU-tanh gated MLP is
// tested with SiLU's in test_ops.cpp (OpsSmall.GeluTanhGated).
// Tolerances as test_ops.cpp: one bf16 rounding of the output plus fp32 arithmetic.
// Run: build-gpu/tests/cuda/test_cuda --gtest_filter='BlockOps*'
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cuda/ops.h"
#include "test_util.h"

namespace longctx::cuda::test {
namespace {

TEST(BlockOpsSmall, EmbeddingScale) {
  LC_REQUIRE_GPU();
  const int64_t vocab = 500, dim = 640, n = 33;
  const float scale = std::sqrt(640.f);  // Gemma 3 270m
  std::vector<double> td;
  auto th = random_bf16(size_t(vocab) * dim, 1.0, td);
  std::vector<int32_t> ids(n);
  std::uniform_int_distribution<int32_t> pick(0, int32_t(vocab - 1));
  for (auto& id : ids) id = pick(rng());
  ids[3] = -1;  // out of range: a zero row
  DevBuf t(th.size() * 2), di(ids.size() * 4), o(size_t(n) * dim * 2);
  t.upload(th);
  di.upload(ids);
  o.poison();
  EmbeddingParams p{t.p, di.as<int32_t>(), o.p, n, vocab, dim};
  p.scale = scale;
  embedding(p);
  device_sync();
  std::vector<double> ref(size_t(n) * dim);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t e = 0; e < dim; ++e) ref[i * dim + e] = ids[i] < 0 ? 0.0 : td[size_t(ids[i]) * dim + e] * scale;
  const auto es = compare(to_double(o.download<uint16_t>(ref.size())), ref, 1e-6, 4e-3);
  std::printf("  embedding scale %.3f: %s\n", scale, es.str().c_str());
  EXPECT_EQ(es.n_bad + es.n_nan, 0) << es.str();
}

// y = rmsnorm(x) * w, or with add_to_y y0 + rmsnorm(x) * w (y0: y's contents before).
void run_rmsnorm_variant(int64_t rows, int64_t dim, bool add_to_y) {
  SCOPED_TRACE(::testing::Message() << "rows=" << rows << " dim=" << dim << " add_to_y=" << add_to_y);
  std::vector<double> xd, wd, yd;
  auto xh = random_bf16(size_t(rows) * dim, 2.0, xd);
  auto wh = random_bf16(size_t(dim), 1.5, wd);
  auto yh = random_bf16(size_t(rows) * dim, 4.0, yd);
  DevBuf x(xh.size() * 2), w(wh.size() * 2), y(yh.size() * 2);
  x.upload(xh);
  w.upload(wh);
  if (add_to_y)
    y.upload(yh);
  else
    y.poison();
  RmsNormParams p{x.p, w.p, y.p, nullptr, nullptr, rows, dim, 1e-6f};
  p.add_to_y = add_to_y;
  rmsnorm(p);
  device_sync();
  std::vector<double> ref(xd.size());
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0;
    for (int64_t e = 0; e < dim; ++e) ss += xd[i * dim + e] * xd[i * dim + e];
    const double inv = 1.0 / std::sqrt(ss / double(dim) + 1e-6);
    for (int64_t e = 0; e < dim; ++e)
      ref[i * dim + e] = (add_to_y ? yd[i * dim + e] : 0.0) + xd[i * dim + e] * inv * wd[e];
  }
  const auto es = compare(to_double(y.download<uint16_t>(ref.size())), ref, 1e-3 * max_abs(ref), 8e-3);
  std::printf("  rmsnorm rows=%lld dim=%lld add_to_y=%d: %s\n", (long long)rows, (long long)dim, int(add_to_y),
              es.str().c_str());
  EXPECT_EQ(es.n_bad + es.n_nan, 0) << es.str();
}

TEST(BlockOpsSmall, RmsNormQkNormAndPostNormAdd) {
  LC_REQUIRE_GPU();
  run_rmsnorm_variant(37 * 4, 256, false);  // QK-norm: [tokens * heads, head_dim 256]
  run_rmsnorm_variant(80 * 2, 16, false);   // tiny test model heads
  run_rmsnorm_variant(29, 640, true);       // post-norm residual add
  run_rmsnorm_variant(5, 12288, true);      // wider than the register path
  DevBuf x(64 * 2), w(64 * 2);
  RmsNormParams p{x.p, w.p, x.p, nullptr, nullptr, 1, 64, 1e-6f};
  p.add_to_y = true;
  EXPECT_THROW(rmsnorm(p), std::exception);  // y must be apart from x
}

// RoPE with the YaRN / LongRoPE cos/sin factor and host frequencies (a per-layer table).
TEST(BlockOpsSmall, RopeAttentionFactor) {
  LC_REQUIRE_GPU();
  const int64_t n_tok = 50, pos0 = 30000;
  const int hq = 4, hk = 1, d = 256;
  const float factor = 1.2079f;  // yarn 0.1 ln(8) + 1
  std::vector<double> qd, kd;
  auto qh = random_bf16(size_t(n_tok) * hq * d, 1.0, qd);
  auto kh = random_bf16(size_t(n_tok) * hk * d, 1.0, kd);
  std::vector<float> inv(d / 2);
  for (int i = 0; i < d / 2; ++i) inv[i] = 1.0f / std::pow(1e6f, float(2 * i) / float(d)) / (i < d / 4 ? 1.f : 8.f);
  DevBuf q(qh.size() * 2), k(kh.size() * 2), f(inv.size() * 4);
  q.upload(qh);
  k.upload(kh);
  f.upload(inv);
  RopeParams p;
  p.q = q.p;
  p.k = k.p;
  p.n_q_heads = hq;
  p.n_k_heads = hk;
  p.head_dim = d;
  p.n_tokens = n_tok;
  p.pos0 = pos0;
  p.inv_freq = f.as<float>();
  p.attn_factor = factor;
  rope(p);
  device_sync();
  auto rotate = [&](std::vector<double>& x, int heads) {  // kernels/ref rope_apply_ref in fp64
    for (int64_t t = 0; t < n_tok; ++t)
      for (int i = 0; i < d / 2; ++i) {
        const float ang = float(pos0 + t) * inv[i];
        const double c = std::cos(double(ang)) * factor, s = std::sin(double(ang)) * factor;
        for (int h = 0; h < heads; ++h) {
          double* v = &x[(t * heads + h) * d];
          const double a = v[i], b = v[i + d / 2];
          v[i] = a * c - b * s;
          v[i + d / 2] = b * c + a * s;
        }
      }
  };
  rotate(qd, hq);
  rotate(kd, hk);
  const auto eq = compare(to_double(q.download<uint16_t>(qh.size())), qd, 4e-3 * max_abs(qd), 8e-3);
  const auto ek = compare(to_double(k.download<uint16_t>(kh.size())), kd, 4e-3 * max_abs(kd), 8e-3);
  std::printf("  rope factor %.4f d=%d: q %s | k %s\n", factor, d, eq.str().c_str(), ek.str().c_str());
  EXPECT_EQ(eq.n_bad + eq.n_nan, 0) << eq.str();
  EXPECT_EQ(ek.n_bad + ek.n_nan, 0) << ek.str();
}

}  // namespace
}  // namespace longctx::cuda::test

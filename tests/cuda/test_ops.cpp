// test_ops.cpp (tests/cuda): embedding, RMSNorm, RoPE, SwiGLU, add, random fill, cuBLASLt GEMM (bf16 and fp32 out)
// and the device arena vs fp64 CPU twins on fresh random bf16 inputs.
// Tolerances: one bf16 rounding of the output (relative 2^-9 ~ 2e-3) plus fp32 arithmetic,
// so |err| <= 8e-3 |ref| + a small absolute term scaled to the output's magnitude.
// Run: build-gpu/tests/cuda/test_cuda --gtest_filter='Ops*'
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"
#include "test_util.h"

namespace longctx::cuda::test {
namespace {

TEST(OpsSmall, Embedding) {
  LC_REQUIRE_GPU();
  const int64_t vocab = 1000, dim = 256, n = 50;
  std::vector<double> td;
  auto th = random_bf16(size_t(vocab) * dim, 1.0, td);
  std::vector<int32_t> ids(n);
  std::uniform_int_distribution<int32_t> pick(0, int32_t(vocab - 1));
  for (auto& id : ids) id = pick(rng());
  ids[7] = int32_t(vocab);  // out of range -> zero row
  ids[9] = -1;
  DevBuf t(th.size() * 2), di(ids.size() * 4), o(size_t(n) * dim * 2);
  t.upload(th);
  di.upload(ids);
  o.poison();
  embedding({t.p, di.as<int32_t>(), o.p, n, vocab, dim});
  device_sync();
  const auto got = o.download<uint16_t>(size_t(n) * dim);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t e = 0; e < dim; ++e) {
      const uint16_t want = (ids[i] < 0 || ids[i] >= vocab) ? 0 : th[size_t(ids[i]) * dim + e];
      ASSERT_EQ(got[i * dim + e], want) << "token " << i << " dim " << e;
    }
}

void run_rmsnorm(int64_t rows, int64_t dim, bool fused) {
  SCOPED_TRACE(::testing::Message() << "rmsnorm rows=" << rows << " dim=" << dim << " fused=" << fused);
  std::vector<double> xd, wd, rd;
  auto xh = random_bf16(size_t(rows) * dim, 2.0, xd);
  auto wh = random_bf16(size_t(dim), 1.0, wd);
  auto rh = random_bf16(size_t(rows) * dim, 1.0, rd);
  DevBuf x(xh.size() * 2), w(wh.size() * 2), r(rh.size() * 2), y(xh.size() * 2);
  x.upload(xh);
  w.upload(wh);
  r.upload(rh);
  y.poison();
  RmsNormParams p;
  p.x = x.p;
  p.w = w.p;
  p.y = y.p;
  p.n_rows = rows;
  p.dim = dim;
  p.eps = 1e-5f;
  if (fused) {
    p.residual = r.p;
    p.residual_out = r.p;  // in place, as the engine uses it
  }
  rmsnorm(p);
  device_sync();
  std::vector<double> ref(xd.size()), sum_ref(xd.size());
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0;
    for (int64_t e = 0; e < dim; ++e) {
      double v = xd[i * dim + e];
      if (fused) v = bf16_to_f32(f32_to_bf16(float(v + rd[i * dim + e])));  // the residual stream is bf16
      sum_ref[i * dim + e] = v;
      ss += v * v;
    }
    const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
    for (int64_t e = 0; e < dim; ++e) ref[i * dim + e] = sum_ref[i * dim + e] * inv * wd[e];
  }
  const auto es = compare(to_double(y.download<uint16_t>(xh.size())), ref, 1e-3 * max_abs(ref), 8e-3);
  std::printf("  rmsnorm rows=%lld dim=%lld fused=%d: %s\n", (long long)rows, (long long)dim, int(fused),
              es.str().c_str());
  EXPECT_EQ(es.n_bad + es.n_nan, 0) << es.str();
  if (fused) {
    const auto er = compare(to_double(r.download<uint16_t>(rh.size())), sum_ref, 0, 0);
    EXPECT_EQ(er.n_bad + er.n_nan, 0) << "residual_out " << er.str();
  }
}

TEST(OpsSmall, RmsNorm) {
  LC_REQUIRE_GPU();
  run_rmsnorm(33, 4096, false);
  run_rmsnorm(5, 4096, true);
  run_rmsnorm(3, 12288, true);  // wider than the register path: two passes
  run_rmsnorm(7, 64, false);
}

// fp64 rotation by the same fp32 angle the kernel uses (pos * inv_freq in fp32).
void ref_rope(std::vector<double>& x, int64_t n_tok, int heads, int d, const std::vector<int64_t>& pos,
              const std::vector<float>& inv_freq) {
  const int half = d / 2;
  for (int64_t t = 0; t < n_tok; ++t)
    for (int i = 0; i < half; ++i) {
      const float ang = float(pos[t]) * inv_freq[i];
      const double c = std::cos(double(ang)), s = std::sin(double(ang));
      for (int h = 0; h < heads; ++h) {
        double* v = &x[(t * heads + h) * d];
        const double a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
}

// The CPU twin's formula (kernels/ref rope_inv_freq_ref), llama3 scaling.
std::vector<float> llama3_inv_freq(int d, float theta, float factor, float lo, float hi, int64_t orig) {
  std::vector<float> f(d / 2);
  for (int i = 0; i < d / 2; ++i) {
    float x = 1.0f / std::pow(theta, float(2 * i) / float(d));
    const double low_wavelen = double(orig) / lo, high_wavelen = double(orig) / hi;
    const double wavelen = 2 * std::numbers::pi / x;
    if (wavelen > low_wavelen) {
      x = x / factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (double(orig) / wavelen - lo) / (hi - lo);
      x = float((1 - smooth) * x / factor + smooth * x);
    }
    f[i] = x;
  }
  return f;
}

void run_rope(int64_t n_tok, int hq, int hk, int d, int64_t pos0, bool pass_inv_freq, bool use_positions) {
  SCOPED_TRACE(::testing::Message() << "rope n_tok=" << n_tok << " pos0=" << pos0 << " d=" << d
                                    << " inv_freq=" << pass_inv_freq << " positions=" << use_positions);
  std::vector<double> qd, kd;
  auto qh = random_bf16(size_t(n_tok) * hq * d, 1.0, qd);
  auto kh = random_bf16(size_t(n_tok) * hk * d, 1.0, kd);
  const auto inv = llama3_inv_freq(d, 500000.f, 8.f, 1.f, 4.f, 8192);
  std::vector<int64_t> pos(n_tok);
  std::vector<int32_t> pos32(n_tok);
  std::uniform_int_distribution<int32_t> pick(0, 1 << 20);
  for (int64_t t = 0; t < n_tok; ++t) {
    pos[t] = use_positions ? pick(rng()) : pos0 + t;
    pos32[t] = int32_t(pos[t]);
  }
  DevBuf q(qh.size() * 2), k(kh.size() * 2), f(inv.size() * 4), pd(pos32.size() * 4);
  q.upload(qh);
  k.upload(kh);
  f.upload(inv);
  pd.upload(pos32);
  RopeParams p;
  p.q = q.p;
  p.k = k.p;
  p.n_q_heads = hq;
  p.n_k_heads = hk;
  p.head_dim = d;
  p.n_tokens = n_tok;
  p.pos0 = pos0;
  p.positions = use_positions ? pd.as<int32_t>() : nullptr;
  p.inv_freq = pass_inv_freq ? f.as<float>() : nullptr;
  p.theta = 500000.f;
  p.scaling = RopeScalingType::llama3;
  p.factor = 8.f;
  p.low_freq_factor = 1.f;
  p.high_freq_factor = 4.f;
  p.original_context = 8192;
  rope(p);
  device_sync();
  ref_rope(qd, n_tok, hq, d, pos, inv);
  ref_rope(kd, n_tok, hk, d, pos, inv);
  // In-kernel frequencies may differ from the host's powf by an ulp: at positions < 4096 that
  // moves the angle by < 1e-3 rad, inside the tolerance below.
  const auto eq = compare(to_double(q.download<uint16_t>(qh.size())), qd, 4e-3 * max_abs(qd), 8e-3);
  const auto ek = compare(to_double(k.download<uint16_t>(kh.size())), kd, 4e-3 * max_abs(kd), 8e-3);
  std::printf("  rope n_tok=%lld d=%d pos0=%lld inv_freq=%d positions=%d: q %s | k %s\n", (long long)n_tok, d,
              (long long)pos0, int(pass_inv_freq), int(use_positions), eq.str().c_str(), ek.str().c_str());
  EXPECT_EQ(eq.n_bad + eq.n_nan, 0) << eq.str();
  EXPECT_EQ(ek.n_bad + ek.n_nan, 0) << ek.str();
}

TEST(OpsSmall, RopeLlama3) {
  LC_REQUIRE_GPU();
  run_rope(100, 32, 8, 128, 0, false, false);       // in-kernel llama3 frequencies, small positions
  run_rope(64, 32, 8, 128, 900000, true, false);    // host frequencies, positions near 1M
  run_rope(40, 8, 2, 64, 0, true, true);            // explicit random positions
}

// The gated MLP's activation on the fused [rows][gate | up] layout: SiLU (Llama) or GELU-tanh
// (Gemma 3), vs fp64.
void run_gated_mlp(int64_t rows, int64_t dim, bool gelu_tanh) {
  SCOPED_TRACE(::testing::Message() << "rows=" << rows << " dim=" << dim << " gelu_tanh=" << gelu_tanh);
  std::vector<double> gu;
  auto h = random_bf16(size_t(rows) * 2 * dim, gelu_tanh ? 4.0 : 3.0, gu);  // [rows][gate | up]
  DevBuf buf(h.size() * 2), out(size_t(rows) * dim * 2);
  buf.upload(h);
  out.poison();
  SwiGluParams p;
  p.gate = buf.p;
  p.up = static_cast<uint16_t*>(buf.p) + dim;
  p.out = out.p;
  p.n_rows = rows;
  p.dim = dim;
  p.gate_stride = p.up_stride = 2 * dim;
  p.gelu_tanh = gelu_tanh;
  swiglu(p);
  device_sync();
  std::vector<double> ref(size_t(rows) * dim);
  const double k = std::sqrt(2.0 / std::numbers::pi);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < dim; ++j) {
      const double g = gu[r * 2 * dim + j], u = gu[r * 2 * dim + dim + j];
      const double act = gelu_tanh ? 0.5 * g * (1 + std::tanh(k * (g + 0.044715 * g * g * g))) : g / (1 + std::exp(-g));
      ref[r * dim + j] = act * u;
    }
  const auto es = compare(to_double(out.download<uint16_t>(ref.size())), ref, 1e-3 * max_abs(ref), 8e-3);
  std::printf("  %s gated rows=%lld dim=%lld: %s\n", gelu_tanh ? "gelu_tanh" : "swiglu", (long long)rows,
              (long long)dim, es.str().c_str());
  EXPECT_EQ(es.n_bad + es.n_nan, 0) << es.str();
}

TEST(OpsSmall, SwiGluFusedLayout) {
  LC_REQUIRE_GPU();
  run_gated_mlp(19, 1024, false);
}

TEST(OpsSmall, GeluTanhGated) {
  LC_REQUIRE_GPU();
  run_gated_mlp(17, 2048, true);
}

TEST(OpsSmall, AddWithTail) {
  LC_REQUIRE_GPU();
  const int64_t n = 100003;  // not a multiple of 8
  std::vector<double> ad, bd;
  auto ah = random_bf16(n, 1.0, ad);
  auto bh = random_bf16(n, 1.0, bd);
  DevBuf a(n * 2), b(n * 2);
  a.upload(ah);
  b.upload(bh);
  add(a.p, a.p, b.p, n);  // in place, as the residual stream uses it
  device_sync();
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = ad[i] + bd[i];
  const auto es = compare(to_double(a.download<uint16_t>(n)), ref, 1e-6, 4e-3);
  EXPECT_EQ(es.n_bad + es.n_nan, 0) << es.str();
}

TEST(OpsSmall, FillRandom) {
  LC_REQUIRE_GPU();
  const int64_t n = 1 << 16;
  DevBuf x(n * 2);
  fill_random_bf16(x.p, n, 1234, 0.5f);
  device_sync();
  const auto v = to_double(x.download<uint16_t>(n));
  double mean = 0, mx = 0;
  int64_t zeros = 0;
  for (double e : v) {
    mean += e;
    mx = std::max(mx, std::fabs(e));
    zeros += e == 0;
  }
  mean /= n;
  EXPECT_LT(std::fabs(mean), 0.01);
  EXPECT_LE(mx, 0.5);
  EXPECT_GT(mx, 0.45);
  EXPECT_LT(zeros, n / 100);
}

void run_gemm(int64_t m, int64_t n, int64_t k, float beta, DeviceArena& arena) {
  SCOPED_TRACE(::testing::Message() << "gemm m=" << m << " n=" << n << " k=" << k << " beta=" << beta);
  std::vector<double> xd, wd, yd;
  auto xh = random_bf16(size_t(m) * k, 1.0, xd);
  auto wh = random_bf16(size_t(n) * k, 0.05, wd);
  auto yh = random_bf16(size_t(m) * n, 1.0, yd);
  const size_t mark = arena.mark();
  void* x = arena.alloc(xh.size() * 2);
  void* w = arena.alloc(wh.size() * 2);
  void* y = arena.alloc(yh.size() * 2);
  copy_h2d(x, xh.data(), xh.size() * 2);
  copy_h2d(w, wh.data(), wh.size() * 2);
  copy_h2d(y, yh.data(), yh.size() * 2);
  void* ws = arena.alloc(kGemmWorkspaceBytes);
  Gemm gemm(ws, kGemmWorkspaceBytes);
  gemm.run({x, w, y, m, n, k, 1.f, beta});
  device_sync();
  std::vector<uint16_t> got(yh.size());
  copy_d2h(got.data(), y, got.size() * 2);
  std::vector<double> ref(size_t(m) * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t e = 0; e < k; ++e) acc += xd[i * k + e] * wd[j * k + e];
      ref[i * n + j] = acc + beta * yd[i * n + j];
    }
  const auto es = compare(to_double(got), ref, 2e-3 * max_abs(ref), 8e-3);
  std::printf("  gemm m=%lld n=%lld k=%lld beta=%g: %s\n", (long long)m, (long long)n, (long long)k, beta,
              es.str().c_str());
  EXPECT_EQ(es.n_bad + es.n_nan, 0) << es.str();
  arena.rewind(mark);
}

TEST(OpsSmall, GemmCublasLt) {
  LC_REQUIRE_GPU();
  DeviceArena arena(64u << 20);
  run_gemm(77, 200, 320, 0.f, arena);
  run_gemm(1, 512, 4096, 1.f, arena);  // decode-shaped, fused residual
  run_gemm(130, 96, 64, 1.f, arena);
}

// fp32 output with padded rows (the LM head's use): y [m, ldy] fp32, columns n..ldy untouched.
void run_gemm_fp32(int64_t m, int64_t n, int64_t k, int64_t ldy, DeviceArena& arena) {
  SCOPED_TRACE(::testing::Message() << "gemm fp32 m=" << m << " n=" << n << " k=" << k << " ldy=" << ldy);
  std::vector<double> xd, wd;
  auto xh = random_bf16(size_t(m) * k, 1.0, xd);
  auto wh = random_bf16(size_t(n) * k, 0.05, wd);
  const size_t mark = arena.mark();
  void* x = arena.alloc(xh.size() * 2);
  void* w = arena.alloc(wh.size() * 2);
  void* y = arena.alloc(size_t(m * ldy) * sizeof(float));
  copy_h2d(x, xh.data(), xh.size() * 2);
  copy_h2d(w, wh.data(), wh.size() * 2);
  const float kSentinel = -12345.f;
  std::vector<float> init(size_t(m * ldy), kSentinel);
  copy_h2d(y, init.data(), init.size() * sizeof(float));
  void* ws = arena.alloc(kGemmWorkspaceBytes);
  Gemm gemm(ws, kGemmWorkspaceBytes);
  GemmParams gp{x, w, y, m, n, k};
  gp.y_fp32 = true;
  gp.ldy = ldy;
  gemm.run(gp);
  device_sync();
  std::vector<float> got(init.size());
  copy_d2h(got.data(), y, got.size() * sizeof(float));
  std::vector<double> ref(size_t(m) * n), gotd(size_t(m) * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < ldy; ++j) {
      if (j >= n) {
        EXPECT_EQ(got[size_t(i * ldy + j)], kSentinel) << "padding written at row " << i << " col " << j;
        continue;
      }
      double acc = 0;
      for (int64_t e = 0; e < k; ++e) acc += xd[i * k + e] * wd[j * k + e];
      ref[size_t(i * n + j)] = acc;
      gotd[size_t(i * n + j)] = got[size_t(i * ldy + j)];
    }
  // fp32 output: only fp32 accumulation error (no bf16 rounding of y)
  const auto es = compare(gotd, ref, 1e-4 * max_abs(ref), 1e-4);
  std::printf("  gemm fp32 m=%lld n=%lld k=%lld ldy=%lld: %s\n", (long long)m, (long long)n, (long long)k,
              (long long)ldy, es.str().c_str());
  EXPECT_EQ(es.n_bad + es.n_nan, 0) << es.str();
  arena.rewind(mark);
}

TEST(OpsSmall, GemmFp32OutputPaddedRows) {
  LC_REQUIRE_GPU();
  DeviceArena arena(64u << 20);
  run_gemm_fp32(1, 265, 128, 268, arena);   // tiny-model vocabulary, rows padded to 16 bytes
  run_gemm_fp32(64, 1003, 576, 1004, arena);
  run_gemm_fp32(3, 512, 256, 512, arena);   // no padding
}

TEST(OpsSmall, ArenaBumpAndRewind) {
  LC_REQUIRE_GPU();
  DeviceArena a(1 << 20);
  void* p1 = a.alloc(100);
  void* p2 = a.alloc(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p1) % DeviceArena::kDefaultAlign, 0u);
  EXPECT_EQ(static_cast<char*>(p2) - static_cast<char*>(p1), 256);
  const size_t m = a.mark();
  (void)a.alloc(1000);
  a.rewind(m);
  EXPECT_EQ(a.used(), m);
  EXPECT_THROW(a.alloc(2 << 20), std::exception);
  a.reset();
  EXPECT_EQ(a.used(), 0u);
  EXPECT_GE(a.peak(), m + 1000);
}

TEST(Runtime, NoGpuIsNotAnError) {
  // device_count() never throws: 0 on machines without a driver/device (the CI machine).
  EXPECT_GE(device_count(), 0);
}

}  // namespace
}  // namespace longctx::cuda::test

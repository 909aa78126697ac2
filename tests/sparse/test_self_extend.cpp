// test_self_extend.cpp: Self-Extend (methods/self_extend/) against an fp64 oracle that computes
// the attention from the definition on random inputs: every (query q, key k) pair rotated at its
// own positions when q - k < W, else the query at floor(q/G) + W - floor(W/G) and the key at
// floor(k/G), one softmax per row; dense, and HiP as "dense reference with the same mask".
// Run: build/tests/sparse/test_sparse --gtest_filter='SelfExtend*'
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/ref/attention.h"
#include "kernels/ref/ops.h"
#include "methods/method.h"
#include "methods/run_cpu.h"
#include "methods/self_extend/self_extend.h"
#include "methods/self_extend/self_extend_attention.h"
#include "sparse/sparse_attention.h"
#include "test_util.h"
#include "util/error.h"
#include "util/thread_pool.h"
#include "../common/error_of.h"

namespace longctx {
namespace {

using test_common::error_of;

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

constexpr int kH = 8, kHkv = 2, kD = 32;

MethodContext ctx() {
  return {.n_layer = 4, .n_head = kH, .n_kv_head = kHkv, .head_dim = kD, .model_name = "tiny-test"};
}

// fp64 Self-Extend attention from the definition (positions written out here, not taken from
// self_extend.h), over the pairs mask allows (causal on top).
test::OracleOut self_extend_oracle(const AttnParams& p, int64_t G, int64_t W, const std::vector<float>& inv,
                                   const test::MaskFn& mask) {
  const int D = p.head_dim, half = D / 2, group = p.n_head / p.n_kv_head;
  auto rot = [&](const float* x, int64_t pos, double* out) {
    for (int i = 0; i < half; ++i) {
      const double a = double(pos) * double(inv[size_t(i)]), c = std::cos(a), s = std::sin(a);
      out[i] = x[i] * c - x[i + half] * s;
      out[i + half] = x[i + half] * c + x[i] * s;
    }
  };
  test::OracleOut out;
  out.o.assign(size_t(p.n_q * p.n_head * D), 0.0);
  out.lse.assign(size_t(p.n_q * p.n_head), -std::numeric_limits<double>::infinity());
  std::vector<double> qr(static_cast<size_t>(D)), kr(static_cast<size_t>(D)), s(static_cast<size_t>(p.n_kv));
  for (int h = 0; h < p.n_head; ++h)
    for (int64_t i = 0; i < p.n_q; ++i) {
      const int64_t q = p.q_pos0 + i;
      double mx = -1e300;
      for (int64_t j = 0; j < p.n_kv; ++j) {
        s[size_t(j)] = -std::numeric_limits<double>::infinity();
        if (j > q || !mask(h, i, j)) continue;
        const bool near = q - j < W;
        rot(p.q + (i * p.n_head + h) * D, near ? q : q / G + W - W / G, qr.data());
        rot(p.k + (j * p.n_kv_head + h / group) * D, near ? j : j / G, kr.data());
        double dot = 0;
        for (int e = 0; e < D; ++e) dot += qr[size_t(e)] * kr[size_t(e)];
        s[size_t(j)] = dot * p.scale;
        mx = std::max(mx, s[size_t(j)]);
      }
      double z = 0;
      double* o = out.o.data() + (i * p.n_head + h) * D;
      for (int64_t j = 0; j < p.n_kv; ++j) {
        if (std::isinf(s[size_t(j)])) continue;
        const double w = std::exp(s[size_t(j)] - mx);
        z += w;
        for (int e = 0; e < D; ++e) o[e] += w * p.v[(j * p.n_kv_head + h / group) * D + e];
      }
      for (int e = 0; e < D; ++e) o[e] /= z;
      out.lse[size_t(h * p.n_q + i)] = mx + std::log(z);
    }
  return out;
}

// fp32 rotation of positions up to ~1K: the angle's rounding dominates (compacted tests: 2e-5).
constexpr double kTolSe = 3e-5;

TEST(SelfExtendPositions, PaperFormulasAndTheJoin) {
  const SelfExtendParams se{.group = 4, .neighbor = 8};
  EXPECT_EQ(self_extend_key_pos(se, 13), 3);              // floor(13 / 4)
  EXPECT_EQ(self_extend_query_pos(se, 13), 3 + 8 - 2);    // floor(13 / 4) + W - floor(W / G)
  EXPECT_TRUE(self_extend_is_neighbor(se, 100, 93));      // q - k = 7 < W
  EXPECT_FALSE(self_extend_is_neighbor(se, 100, 92));     // q - k = W: grouped
  // The join: with G | k and G | W a boundary key sits at distance W (the last neighbour: W - 1).
  for (int64_t k = 0; k < 64; k += 4)
    EXPECT_EQ(self_extend_query_pos(se, k + 8) - self_extend_key_pos(se, k), 8) << k;
  // G = 1: shift 0, grouped positions are the positions.
  const SelfExtendParams one{.group = 1, .neighbor = 5};
  for (int64_t p = 0; p < 20; ++p) EXPECT_EQ(self_extend_query_pos(one, p) - self_extend_key_pos(one, p), 0);
  // (SE4): the authors' README example, an 8K model with W = 1024, G = 4.
  EXPECT_EQ(self_extend_reach({.group = 4, .neighbor = 1024}, 8192), 29696);
}

struct Case {
  int64_t n_q, q_pos0, G, W;
};

// Dense + Self-Extend through attend_cpu: prefill chunks that straddle the boundary (rows below W
// have no grouped keys), a chunk far past it, and decode steps.
TEST(SelfExtendDense, MatchesOracle) {
  const auto inv = test::inv_freq_of(kD, 10000.0);
  const LayerRope rope{inv.data(), 1.f};
  const Case cases[] = {{90, 10, 4, 40}, {100, 300, 4, 64}, {64, 900, 3, 50}, {1, 500, 3, 50}, {1, 20, 8, 64},
                        {130, 0, 2, 17}};
  uint64_t seed = 10;
  for (const Case& c : cases) {
    const auto m = make_attention_method(fmt::format("dense=self_extend={}:{}", c.G, c.W), ctx());
    ASSERT_EQ(m->needs().keys, KeyLayout::pre_rope);
    auto st = m->start_sequence();
    auto pr = test::make_problem(c.n_q, c.q_pos0, kH, kHkv, kD, ++seed);
    pr.p.layer = 1;
    const Phase ph = c.n_q == 1 ? Phase::decode : Phase::prefill;
    attend_cpu({.method = *m, .state = *st, .phase = ph, .rope = &rope}, pr.p, pool());
    const auto want = self_extend_oracle(pr.p, c.G, c.W, inv, test::all_keys());
    const test::Errors e = test::compare(pr.o, pr.lse, want);
    EXPECT_LT(e.o, kTolSe) << c.n_q << "@" << c.q_pos0 << " G=" << c.G << " W=" << c.W;
    EXPECT_LT(e.lse, kTolSe) << c.n_q << "@" << c.q_pos0 << " G=" << c.G << " W=" << c.W;
  }
}

// G = 1 (and a window covering every key) is plain attention at the keys' own positions.
TEST(SelfExtendDense, GroupOneAndWideWindowEqualPlainAttention) {
  const auto inv = test::inv_freq_of(kD, 10000.0);
  const LayerRope rope{inv.data(), 1.f};
  for (const char* spec : {"dense=self_extend=1:32", "dense=self_extend=8:4096"}) {
    const auto m = make_attention_method(spec, ctx());
    auto st = m->start_sequence();
    auto pr = test::make_problem(96, 400, kH, kHkv, kD, 77);
    attend_cpu({.method = *m, .state = *st, .phase = Phase::prefill, .rope = &rope}, pr.p, pool());
    std::vector<float> q = pr.q, k = pr.k, o(pr.o.size());
    AttnParams pd = pr.p;
    rope_apply_ref(q.data(), pr.p.n_q, kH, kD, pr.p.q_pos0, inv.data(), pool(), 1.f);
    rope_apply_ref(k.data(), pr.p.n_kv, kHkv, kD, 0, inv.data(), pool(), 1.f);
    pd.q = q.data(), pd.k = k.data(), pd.o = o.data(), pd.lse = nullptr;
    attention_dense_ref(pd, pool());
    double err = 0;
    for (size_t i = 0; i < o.size(); ++i) err = std::max(err, double(std::abs(o[i] - pr.o[i])));
    EXPECT_LT(err, 2e-6) << spec;
  }
}

// HiP + Self-Extend: the pairs attended are exactly HiP's index built from the grouped q/k (the
// oracle takes that index as its mask), each scored near or grouped; prefill and decode.
TEST(SelfExtendHip, MatchesOracleWithTheSameMask) {
  const auto inv = test::inv_freq_of(kD, 10000.0);
  const LayerRope rope{inv.data(), 1.f};
  const int64_t G = 4, W = 48;
  const auto m =
      make_attention_method("hip=k=64,b_k=2,window=32,sinks=4,refresh=4,dense_layers=0,self_extend=4:48", ctx());
  ASSERT_EQ(m->needs().keys, KeyLayout::pre_rope);
  ASSERT_NE(m->self_extend(Phase::decode), nullptr);
  auto st = m->start_sequence();
  for (const Case& c : {Case{150, 600, G, W}, Case{1, 900, G, W}}) {
    auto pr = test::make_problem(c.n_q, c.q_pos0, kH, kHkv, kD, 40 + uint64_t(c.n_q));
    pr.p.layer = 2;
    const Phase ph = c.n_q == 1 ? Phase::decode : Phase::prefill;
    ASSERT_EQ(m->route(step_of(pr.p, ph)), Route::sparse);
    attend_cpu({.method = *m, .state = *st, .phase = ph, .rope = &rope}, pr.p, pool());
    // The same index (prefill: deterministic; decode: the step's cached mask is reused).
    const SelfExtendQK g = self_extend_grouped(pr.p, *m->self_extend(ph), rope, pool());
    const SparseIndex idx = m->build_index(g.p, ph, *st, pool());
    const auto want = self_extend_oracle(pr.p, G, W, inv, test::index_mask(idx, kH));
    const test::Errors e = test::compare(pr.o, pr.lse, want);
    EXPECT_LT(e.o, kTolSe) << c.n_q;
    EXPECT_LT(e.lse, kTolSe) << c.n_q;
    // Pruned: fewer pairs than dense.
    EXPECT_LT(index_kernel_pairs(idx, pr.p.n_q, pr.p.q_pos0, pr.p.n_kv, kH),
              dense_causal_pairs(pr.p.n_q, pr.p.q_pos0, kH));
  }
}

// The sparse mainloop's sliding window (used by the neighbour part) vs the oracle's window mask.
TEST(SelfExtendSparseWindow, SparseAttentionHonoursTheWindow) {
  auto pr = test::make_problem(100, 200, kH, kHkv, kD, 91);
  pr.p.window = 37;
  SparseIndex idx{.n_q = 100, .heads = std::vector<HeadIndex>(1)};
  for (int64_t b = 0; b < n_query_blocks(100); ++b) {
    idx.heads[0].ranges.push_back({0, 300});
    idx.heads[0].end_block();
  }
  sparse_attention_ref(pr.p, idx, pool());
  const auto want = test::oracle_attention(
      pr.p, [&](int, int64_t i, int64_t j) { return j > pr.p.q_pos0 + i - pr.p.window; });
  const test::Errors e = test::compare(pr.o, pr.lse, want);
  EXPECT_LT(e.o, test::kTolO);
  EXPECT_LT(e.lse, test::kTolLse);
  pr.p.causal = false;
  EXPECT_NE(error_of([&] { sparse_attention_ref(pr.p, idx, pool()); }), "");
}

TEST(SelfExtendSpec, NamesErrorsAndComposition) {
  EXPECT_EQ(make_attention_method("dense=self_extend=4:1024", ctx())->name(), "dense=self_extend=4:1024");
  EXPECT_EQ(make_attention_method("dense", ctx())->self_extend(Phase::prefill), nullptr);
  EXPECT_EQ(make_attention_method("dense", ctx())->needs().keys, KeyLayout::rotated);
  const auto h = make_attention_method("hip=self_extend=8:512", ctx());
  EXPECT_EQ(h->name(),
            "hip=k=512,b_q=64,b_sq=2,b_k=2,b_sk=1,window=256,sinks=16,refresh=8,dense_layers=3,self_extend=8:512");
  EXPECT_EQ(make_attention_method(h->name(), ctx())->name(), h->name());
  EXPECT_EQ(make_attention_method("hip", ctx())->needs().keys, KeyLayout::rotated);
  // Per phase: a dense clause with the option is a method, not a plain dense phase.
  const auto ph = make_attention_method("prefill:hip=self_extend=4:64;decode:dense=self_extend=4:64", ctx());
  EXPECT_EQ(ph->name(), "prefill:" + make_attention_method("hip=self_extend=4:64", ctx())->name() +
                            ";decode:dense=self_extend=4:64");
  ASSERT_NE(ph->self_extend(Phase::decode), nullptr);
  EXPECT_EQ(ph->self_extend(Phase::decode)->group, 4);
  EXPECT_EQ(ph->needs().keys, KeyLayout::pre_rope);
  for (const char* bad : {"dense=self_extend=0:64", "dense=self_extend=4:0", "dense=self_extend=4", "dense=foo",
                          "dense=self_extend=a:8", "hip=self_extend=4:x", "hip=self_extend=-1:5",
                          "hip=self_extend=4:64:2"}) {
    const std::string msg = error_of([&] { (void)make_attention_method(bad, ctx()); });
    EXPECT_NE(msg.find("self_extend"), std::string::npos) << bad << ": " << msg;
  }
}

}  // namespace
}  // namespace longctx

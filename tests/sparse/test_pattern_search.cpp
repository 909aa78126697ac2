// test_pattern_search.cpp: the offline pattern search (Algorithm 1) on a fake model whose
// capture feeds synthetic, structured Q/K/V: heads with a local band (+ sinks) must
// get a low-error A-shape/VS pattern, a head with strong far columns must get VS, and the
// output must be a valid config in the published format.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/ref/head_error.h"
#include "methods/minference/minference_config.h"
#include "methods/minference/minference_index.h"
#include "methods/minference/pattern_search.h"
#include "util/error.h"
#include "util/thread_pool.h"
#include "counting_scorer.h"
#include "test_util.h"
#include "../common/error_of.h"

namespace longctx {
namespace {

// Synthetic attention inputs of one layer, built so that (logit = scale * q.k, scale = 1/sqrt(d)):
//   logit(i, j) = j / w            (recency: an exponential local band of width w)
//               + [j < 4]  (i / w + b_sink)   (sinks as strong as the latest key, times e^b)
//               + [j in C] (i / w + b_col)    (strong vertical columns, query head 1 only)
//               + noise on the other dims.
// KV head 0 serves query heads 0 (band + sinks) and 1 (band + sinks + columns); KV head 1 serves
// query heads 2 (wider band + sinks) and 3 (diffuse: noise only).
struct SyntheticLayer {
  static constexpr int kHeads = 4, kKvHeads = 2, kDim = 32;
  int64_t S;
  std::vector<float> q, k, v;
  std::vector<int64_t> columns;

  explicit SyntheticLayer(int64_t s, uint64_t seed) : S(s) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> noise(0.f, 0.3f), gauss(0.f, 1.f);
    const float sd = std::sqrt(float(kDim));
    q.resize(size_t(S * kHeads * kDim));
    k.resize(size_t(S * kKvHeads * kDim));
    v.resize(size_t(S * kKvHeads * kDim));
    for (auto& x : q) x = noise(rng);
    for (auto& x : k) x = noise(rng);
    for (auto& x : v) x = gauss(rng);
    std::uniform_int_distribution<int64_t> pick(S / 6, S * 3 / 4);
    for (int c = 0; c < 5; ++c) columns.push_back(pick(rng));
    enum { kRecency = 0, kSink = 1, kCol = 2 };  // feature dims; the rest is noise
    const float w[kKvHeads] = {20.f, 50.f};
    for (int64_t j = 0; j < S; ++j)
      for (int hk = 0; hk < kKvHeads; ++hk) {
        float* kj = k.data() + (j * kKvHeads + hk) * kDim;
        kj[kRecency] = float(j) / w[hk] * sd;
        kj[kSink] = j < 4 ? sd : 0.f;
        kj[kCol] = std::find(columns.begin(), columns.end(), j) != columns.end() ? sd : 0.f;
      }
    for (int64_t i = 0; i < S; ++i)
      for (int h = 0; h < kHeads; ++h) {
        float* qi = q.data() + (i * kHeads + h) * kDim;
        const float wi = float(i) / w[h / 2];
        qi[kRecency] = h == 3 ? 0.f : 1.f;
        qi[kSink] = h == 3 ? 0.f : wi + 1.f;
        qi[kCol] = h == 1 ? wi + 2.f : 0.f;
      }
  }
};

// A model of n_layer synthetic layers (SyntheticLayer; the first token picks the data, so
// several samples differ) with context max_ctx.
SearchModel fake_model(int n_layer, int64_t max_ctx) {
  return {.n_layer = n_layer,
          .n_head = SyntheticLayer::kHeads,
          .max_context = max_ctx,
          .capture = [n_layer](std::span<const int32_t> tokens, const AttnObserver& observer) {
            for (int l = 0; l < n_layer; ++l) {
              // 7 keeps the original layers' data for the first sample.
              const SyntheticLayer s(int64_t(tokens.size()), 1000 + l + 7919 * (uint64_t(tokens[0]) - 7));
              observer({l, s.S, s.kHeads, s.kKvHeads, s.kDim, s.q.data(), s.k.data(), s.v.data()});
            }
          }};
}

const CandidateResult& result_of(const HeadSearchResult& r, PatternKind k) {
  for (const auto& c : r.candidates)
    if (c.pattern.kind == k) return c;
  throw std::runtime_error("no candidate of that kind");
}

double best_error_of(const HeadSearchResult& r, PatternKind k) {
  double e = 1e9;
  for (const auto& c : r.candidates)
    if (c.pattern.kind == k) e = std::min(e, c.pattern.score);
  return e;
}

TEST(PatternSearch, PicksStructureAwarePatterns) {
  const SearchModel model = fake_model(2, 1 << 20);
  std::vector<int32_t> tokens(2048, 7);
  std::vector<Progress> seen;
  SearchReport report;
  const auto j = search_patterns(model, tokens, {}, [&](const Progress& p) { seen.push_back(p); }, &report);

  // Progress once per layer; the config is in the published format and fits the model.
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].done, 2);
  EXPECT_EQ(seen[1].total, 2);
  const auto cfg = MInferenceConfig::from_json(j, "search output");
  EXPECT_NO_THROW(cfg.validate(2, 4, "fake-structured", "search output"));
  ASSERT_EQ(j[0]["1"].size(), 4u);

  for (int l = 0; l < 2; ++l) {
    const auto& heads = report.layers[size_t(l)];
    ASSERT_EQ(heads.size(), 4u);
    ASSERT_EQ(heads[0].candidates.size(), table4_candidates().size());
    // Band + sinks: A-shape or VS, with a small error.
    for (const int h : {0, 2}) {
      EXPECT_NE(heads[size_t(h)].best.kind, PatternKind::BlockSparse) << "layer " << l << " head " << h;
      EXPECT_LT(heads[size_t(h)].best.score, 0.02) << "layer " << l << " head " << h;
    }
    // Strong far columns: VS wins, A-shape (blind to the columns) is far worse.
    EXPECT_EQ(heads[1].best.kind, PatternKind::VerticalSlash) << "layer " << l;
    EXPECT_LT(heads[1].best.score, 0.05) << "layer " << l;
    EXPECT_GT(best_error_of(heads[1], PatternKind::AShape), 0.3) << "layer " << l;
    // Written pattern = the report's best.
    EXPECT_EQ(cfg.layers[size_t(l)][1].kind, PatternKind::VerticalSlash);
    EXPECT_EQ(cfg.layers[size_t(l)][1].score, heads[1].best.score);
    // Kernel-aware matching: the VS candidates cost about what the A-shape target costs.
    const double target = result_of(heads[1], PatternKind::AShape).work;
    for (const auto& c : heads[1].candidates)
      if (c.pattern.kind != PatternKind::AShape) {
        EXPECT_NEAR(c.work, target, 0.15 * target) << pattern_name(c.pattern.kind) << " " << c.pattern.vertical << ","
                                                   << c.pattern.slash;
      }
  }
}

TEST(PatternSearch, SearchLayerWithoutMatchingUsesScaledTable4) {
  const SyntheticLayer s(1024, 5);
  AttnParams p;
  p.q = s.q.data(), p.k = s.k.data(), p.v = s.v.data();
  p.n_q = p.n_kv = s.S;
  p.n_head = s.kHeads, p.n_kv_head = s.kKvHeads, p.head_dim = s.kDim;
  p.scale = 1.f / std::sqrt(float(s.kDim));
  ThreadPool pool(2);
  SearchOptions opt;
  opt.match_flops = false;
  const auto res = search_layer(p, opt, pool);
  ASSERT_EQ(res.size(), 4u);
  // r = 1024 / 30720: A-shape (1024, 4096) -> (34, 137); VS (30, 2048) -> (1, 68); BS 100 -> 3.
  const auto& c = res[0].candidates;
  EXPECT_EQ(c[0].pattern.vertical, 34);
  EXPECT_EQ(c[0].pattern.slash, 137);
  EXPECT_EQ(c[1].pattern.vertical, 1);
  EXPECT_EQ(c[1].pattern.slash, 68);
  EXPECT_EQ(c[5].pattern.vertical, 3);
  for (const auto& h : res) {
    EXPECT_GE(h.best.score, 0.0);
    for (const auto& cr : h.candidates) EXPECT_GT(cr.work, 0.0);
  }
}

// The search's error of a candidate, recomputed independently: the engine's builder gives the
// index, the fp64 oracle gives the sparse and the dense outputs, and the relative L2 error is
// taken in double.
double oracle_rel_error(const AttnParams& p, int h, const HeadPattern& pat, const test::OracleOut& dense) {
  SparseIndex idx;
  idx.n_q = p.n_q;
  idx.heads.resize(size_t(p.n_head));
  for (int g = 0; g < p.n_head; ++g) build_head_index(p, g, pat, idx.heads[size_t(g)]);
  const auto sparse = test::oracle_attention(p, test::index_mask(idx, p.n_head));
  double e2 = 0, n2 = 0;
  const int d = p.head_dim;
  for (int64_t i = 0; i < p.n_q; ++i)
    for (int t = 0; t < d; ++t) {
      const size_t at = size_t((i * p.n_head + h) * d + t);
      e2 += (sparse.o[at] - dense.o[at]) * (sparse.o[at] - dense.o[at]);
      n2 += dense.o[at] * dense.o[at];
    }
  return std::sqrt(e2 / n2);
}

AttnParams layer_params(const SyntheticLayer& s) {
  AttnParams p;
  p.q = s.q.data(), p.k = s.k.data(), p.v = s.v.data();
  p.n_q = p.n_kv = s.S;
  p.n_head = s.kHeads, p.n_kv_head = s.kKvHeads, p.head_dim = s.kDim;
  p.scale = 1.f / std::sqrt(float(s.kDim));
  p.causal = true;
  return p;
}

TEST(PatternSearch, ScoreLayerErrorsMatchFp64Oracle) {
  // Fresh random Q/K/V (GQA 4 -> 2), not the structured layer: every candidate's error and work.
  auto pr = test::make_problem(384, 0, 4, 2, 16, 77);
  ThreadPool pool(2);
  SearchOptions opt;
  opt.reference_len = 4000;  // r = 384 / 4000: A-shape (98, 393), VS k_v 3..288, BS k_b ~10
  const auto plans = plan_layer(pr.p, opt, pool);
  ASSERT_EQ(plans.size(), 4u);
  const auto scored = score_layer(pr.p, plans, pool);
  ASSERT_EQ(scored.size(), 4u);
  const auto dense = test::oracle_attention(pr.p, [](int, int64_t, int64_t) { return true; });
  for (int h = 0; h < 4; ++h) {
    ASSERT_EQ(scored[size_t(h)].size(), table4_candidates().size());
    for (size_t c = 0; c < plans[size_t(h)].size(); ++c) {
      const auto& r = scored[size_t(h)][c];
      EXPECT_EQ(r.pattern.kind, plans[size_t(h)][c].kind);
      EXPECT_EQ(r.pattern.vertical, plans[size_t(h)][c].vertical);
      EXPECT_EQ(r.pattern.slash, plans[size_t(h)][c].slash);
      const double want = oracle_rel_error(pr.p, h, plans[size_t(h)][c], dense);
      EXPECT_NEAR(r.pattern.score, want, 1e-4 + 1e-4 * want) << "head " << h << " candidate " << c;
      ASSERT_EQ(r.sample_errors.size(), 1u);
      EXPECT_EQ(r.sample_errors[0], r.pattern.score);
      EXPECT_GT(r.work, 0.0);
      // At most every causal key of whole 64-row blocks: 64 * 64 * (1 + ... + 6) / (384 * 385 / 2).
      EXPECT_LE(r.work, 64.0 * 64 * 21 / (384.0 * 385 / 2) + 1e-12);
    }
  }
  // Plans for the wrong head count are rejected.
  auto bad = plans;
  bad.pop_back();
  EXPECT_THROW(score_layer(pr.p, bad, pool), Error);
}

TEST(PatternSearch, ReferenceLenZeroUsesTable4AsPrinted) {
  const SyntheticLayer s(640, 9);
  const AttnParams p = layer_params(s);
  ThreadPool pool(2);
  SearchOptions opt;
  opt.match_flops = false;
  opt.reference_len = 0;
  const auto plans = plan_layer(p, opt, pool);
  const auto t4 = table4_candidates();
  for (const auto& hp : plans) {
    ASSERT_EQ(hp.size(), t4.size());
    for (size_t c = 0; c < t4.size(); ++c) {
      EXPECT_EQ(hp[c].kind, t4[c].kind);
      EXPECT_EQ(hp[c].vertical, t4[c].vertical);
      EXPECT_EQ(hp[c].slash, t4[c].slash);
    }
  }
  // At 640 tokens every printed candidate covers every causal key: all errors ~0 and the same
  // work (whole 64-row blocks, 64 * 64 * 55 / (640 * 641 / 2) of dense per-row causal work).
  for (const auto& h : search_layer(p, opt, pool))
    for (const auto& c : h.candidates) {
      EXPECT_LT(c.pattern.score, 1e-5) << pattern_name(c.pattern.kind);
      EXPECT_NEAR(c.work, 64.0 * 64 * 55 / (640.0 * 641 / 2), 1e-12) << pattern_name(c.pattern.kind);
    }
  opt.reference_len = -1;
  EXPECT_THROW(plan_layer(p, opt, pool), Error);
}

TEST(PatternSearch, DenseFallbackAboveThreshold) {
  std::vector<CandidateResult> cands(3);
  cands[0].pattern = {PatternKind::AShape, 40, 160, 0.30};
  cands[1].pattern = {PatternKind::VerticalSlash, 30, 90, 0.12};
  cands[2].pattern = {PatternKind::BlockSparse, 5, 0, 0.20};
  SearchOptions opt;
  // No threshold, or one above the best error: the best candidate (VS) as it is.
  for (const double thr : {0.0, 0.12, 0.5}) {
    opt.dense_above = thr;
    const auto r = choose_best(cands, opt, 8192);
    EXPECT_FALSE(r.dense_fallback) << thr;
    EXPECT_EQ(r.best.kind, PatternKind::VerticalSlash);
    EXPECT_EQ(r.best.slash, 90);
    EXPECT_EQ(r.best.score, 0.12);
    EXPECT_EQ(r.best_sparse_error, 0.12);
    EXPECT_EQ(r.candidates.size(), 3u);
  }
  // Below the best error: dense, as stream_llm covering the context (sink of the A-shape candidate).
  opt.dense_above = 0.1;
  const auto r = choose_best(cands, opt, 8192);
  EXPECT_TRUE(r.dense_fallback);
  EXPECT_EQ(r.best.kind, PatternKind::AShape);
  EXPECT_EQ(r.best.vertical, 40);
  EXPECT_EQ(r.best.slash, 8192);
  EXPECT_EQ(r.best.score, 0.0);
  EXPECT_EQ(r.best_sparse_error, 0.12);
  // Ties go to the earlier candidate.
  cands[2].pattern.score = 0.12;
  opt.dense_above = 0;
  EXPECT_EQ(choose_best(cands, opt, 8192).best.kind, PatternKind::VerticalSlash);
}

TEST(PatternSearch, DenseFallbackHeadsRunDenseInTheEngine) {
  // Every head falls back (threshold below any error): the written config, loaded like a file
  // and built by the engine's index builder, gives dense attention (fp64 oracle) on fresh data.
  const SearchModel model = fake_model(2, 4096);
  std::vector<int32_t> tokens(512, 7);
  SearchOptions opt;
  opt.dense_above = 1e-12;
  SearchReport report;
  const auto j = search_patterns(model, tokens, opt, {}, &report);
  const auto cfg = MInferenceConfig::from_json(nlohmann::json::parse(j.dump()), "search output");
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 4; ++h) {
      const auto& hp = cfg.layers[size_t(l)][size_t(h)];
      EXPECT_EQ(hp.kind, PatternKind::AShape);
      EXPECT_EQ(hp.slash, 4096);  // the model's context
      EXPECT_TRUE(report.layers[size_t(l)][size_t(h)].dense_fallback);
      EXPECT_GT(report.layers[size_t(l)][size_t(h)].best_sparse_error, 0.0);
    }
  auto pr = test::make_problem(700, 0, 4, 2, 16, 123);
  ThreadPool pool(2);
  const SparseIndex idx = build_minference_index(pr.p, cfg.layers[0], pool);
  const auto got = test::oracle_attention(pr.p, test::index_mask(idx, 4));
  const auto want = test::oracle_attention(pr.p, [](int, int64_t, int64_t) { return true; });
  for (size_t i = 0; i < want.o.size(); ++i) ASSERT_DOUBLE_EQ(got.o[i], want.o[i]) << i;
  const auto rep = report.to_json();
  EXPECT_TRUE(rep["layers"][0][0]["dense_fallback"].get<bool>());
}

TEST(PatternSearch, SeveralSamplesAverageErrorsWithTheFirstSamplesBudgets) {
  const SearchModel model = fake_model(2, 1 << 20);
  const std::vector<std::vector<int32_t>> samples = {std::vector<int32_t>(512, 7), std::vector<int32_t>(768, 9),
                                                     std::vector<int32_t>(384, 11)};
  std::vector<Progress> seen;
  SearchReport report;
  SearchOptions opt;
  const auto j = search_patterns(model, std::span<const std::vector<int32_t>>(samples), opt,
                                 [&](const Progress& p) { seen.push_back(p); }, &report);
  ASSERT_EQ(seen.size(), 6u);  // 2 layers x 3 samples
  EXPECT_EQ(seen.back().total, 6);
  EXPECT_EQ(report.n_tokens, 512);
  EXPECT_EQ(report.sample_tokens, (std::vector<int64_t>{512, 768, 384}));
  const auto cfg = MInferenceConfig::from_json(j, "search output");
  ThreadPool pool(2);
  for (int l = 0; l < 2; ++l) {
    // The same layers the fake engine hands out, recomputed here.
    const SyntheticLayer s0(512, 1000 + l), s1(768, 1000 + l + 7919 * 2), s2(384, 1000 + l + 7919 * 4);
    const auto plans = plan_layer(layer_params(s0), opt, pool);
    const auto e0 = score_layer(layer_params(s0), plans, pool);
    const auto e1 = score_layer(layer_params(s1), plans, pool);
    const auto e2 = score_layer(layer_params(s2), plans, pool);
    for (int h = 0; h < 4; ++h) {
      const auto& rh = report.layers[size_t(l)][size_t(h)];
      size_t best = 0;
      for (size_t c = 0; c < rh.candidates.size(); ++c) {
        const auto& rc = rh.candidates[c];
        EXPECT_EQ(rc.pattern.vertical, plans[size_t(h)][c].vertical);  // budgets of the first sample
        EXPECT_EQ(rc.pattern.slash, plans[size_t(h)][c].slash);
        ASSERT_EQ(rc.sample_errors.size(), 3u);
        EXPECT_DOUBLE_EQ(rc.sample_errors[0], e0[size_t(h)][c].pattern.score);
        EXPECT_DOUBLE_EQ(rc.sample_errors[1], e1[size_t(h)][c].pattern.score);
        EXPECT_DOUBLE_EQ(rc.sample_errors[2], e2[size_t(h)][c].pattern.score);
        const double mean =
            (e0[size_t(h)][c].pattern.score + e1[size_t(h)][c].pattern.score + e2[size_t(h)][c].pattern.score) / 3;
        EXPECT_NEAR(rc.pattern.score, mean, 1e-12);
        if (rc.pattern.score < rh.candidates[best].pattern.score) best = c;
      }
      // The written pattern is the lowest mean error.
      const auto& w = cfg.layers[size_t(l)][size_t(h)];
      EXPECT_EQ(w.kind, rh.candidates[best].pattern.kind);
      EXPECT_EQ(w.vertical, rh.candidates[best].pattern.vertical);
      EXPECT_EQ(w.slash, rh.candidates[best].pattern.slash);
      EXPECT_NEAR(w.score, rh.candidates[best].pattern.score, 1e-12);
    }
  }
  // No samples, or a tiny one among them, is an error.
  EXPECT_THROW(search_patterns(model, std::span<const std::vector<int32_t>>(), opt, {}), Error);
  const std::vector<std::vector<int32_t>> tiny = {std::vector<int32_t>(1024, 7), std::vector<int32_t>(10, 7)};
  EXPECT_THROW(search_patterns(model, std::span<const std::vector<int32_t>>(tiny), opt, {}), Error);
}

TEST(PatternSearch, RejectsTinySamples) {
  const SearchModel model = fake_model(1, 1 << 20);
  std::vector<int32_t> tokens(10, 1);
  EXPECT_THROW(search_patterns(model, tokens, {}, {}), Error);
}

// The scorer hook (SearchOptions::scorer): a scorer that wraps the CPU one and counts its calls
// gets begin_layer once per layer and errors() once per candidate, with one index head per
// query head, and the search's output is the default (CPU) search's, number for number.
using test::CountingScorer;  // counting_scorer.h

TEST(PatternSearch, ScorerHookIsUsedAndCpuScorerIsTheDefault) {
  const SearchModel model = fake_model(2, 1 << 20);
  std::vector<int32_t> tokens(1024, 7);
  SearchReport r_default, r_hook;
  const auto j_default = search_patterns(model, tokens, {}, {}, &r_default);
  CountingScorer scorer(global_pool());
  SearchOptions opt;
  opt.scorer = &scorer;
  const auto j_hook = search_patterns(model, tokens, opt, {}, &r_hook);
  EXPECT_EQ(scorer.layers, 2);
  EXPECT_EQ(scorer.candidates, 2 * int(opt.candidates.size()));
  EXPECT_EQ(scorer.head_mismatches, 0) << "an index without one head per query head";
  EXPECT_EQ(j_hook, j_default);
  EXPECT_EQ(r_hook.to_json(), r_default.to_json());
  // A scorer that returns the wrong number of errors is a clear error, not a crash.
  class Short final : public CandidateScorer {
   public:
    const char* device() const override { return "short"; }
    void begin_layer(const AttnParams&) override {}
    std::vector<double> errors(const SparseIndex&) override { return {0.5}; }
  } short_scorer;
  opt.scorer = &short_scorer;
  try {
    search_patterns(model, tokens, opt, {});
    ADD_FAILURE() << "no error for a scorer with too few errors";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("short scorer gave 1 errors"), std::string::npos) << e.what();
  }
}

// A Gemma 3-like model: sliding-window layers around a global one. Only the global layer is
// scored (the scorer sees one layer, progress counts one), its candidates are those of a direct
// search_layer of its data with the model's score scale (not 1/sqrt(d): the scale must reach the
// dense and sparse outputs), and the window layers are written as stream_llm(0 sinks, window).
TEST(PatternSearch, SearchesGlobalLayersOnlyWithTheModelsScale) {
  SearchModel model = fake_model(3, 1 << 20);
  constexpr int64_t kWindow = 512;
  model.layer_window = {kWindow, 0, kWindow};
  model.scale = 0.7f / std::sqrt(float(SyntheticLayer::kDim));
  std::vector<int32_t> tokens(1024, 7);
  CountingScorer scorer(global_pool());
  SearchOptions opt;
  opt.scorer = &scorer;
  std::vector<Progress> seen;
  SearchReport report;
  const auto j = search_patterns(model, tokens, opt, [&](const Progress& p) { seen.push_back(p); }, &report);
  EXPECT_EQ(scorer.layers, 1);
  EXPECT_EQ(scorer.candidates, int(opt.candidates.size()));
  EXPECT_EQ(scorer.head_mismatches, 0) << "an index without one head per query head";
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].done, 1);
  EXPECT_EQ(seen[0].total, 1);

  const auto cfg = MInferenceConfig::from_json(nlohmann::json::parse(j.dump()), "search output");
  EXPECT_NO_THROW(cfg.validate(3, 4, "fake-gemma", "search output"));
  const auto rep = report.to_json();
  for (const int l : {0, 2})
    for (int h = 0; h < 4; ++h) {
      const HeadPattern& hp = cfg.layers[size_t(l)][size_t(h)];
      EXPECT_EQ(hp.kind, PatternKind::AShape) << "layer " << l;
      EXPECT_EQ(hp.vertical, 0) << "layer " << l;
      EXPECT_EQ(hp.slash, kWindow) << "layer " << l;
      EXPECT_EQ(report.layers[size_t(l)][size_t(h)].local_window, kWindow);
      EXPECT_TRUE(report.layers[size_t(l)][size_t(h)].candidates.empty());
      EXPECT_EQ(rep["layers"][size_t(l)][size_t(h)]["local_window"].get<int64_t>(), kWindow);
    }

  const SyntheticLayer data(1024, 1001);  // fake_model's layer 1 for tokens of 7
  AttnParams p;
  p.q = data.q.data(), p.k = data.k.data(), p.v = data.v.data();
  p.n_q = p.n_kv = data.S;
  p.n_head = data.kHeads, p.n_kv_head = data.kKvHeads, p.head_dim = data.kDim;
  p.causal = true;
  p.scale = model.scale;
  const auto direct = search_layer(p, SearchOptions{}, global_pool());
  p.scale = 1.f / std::sqrt(float(data.kDim));
  const auto unscaled = search_layer(p, SearchOptions{}, global_pool());
  double scale_effect = 0;
  for (int h = 0; h < 4; ++h) {
    const auto& got = report.layers[1][size_t(h)];
    EXPECT_EQ(got.local_window, 0);
    ASSERT_EQ(got.candidates.size(), direct[size_t(h)].candidates.size());
    for (size_t k = 0; k < got.candidates.size(); ++k) {
      const HeadPattern &a = got.candidates[k].pattern, &b = direct[size_t(h)].candidates[k].pattern;
      EXPECT_TRUE(a.kind == b.kind && a.vertical == b.vertical && a.slash == b.slash) << "head " << h << " cand " << k;
      EXPECT_DOUBLE_EQ(a.score, b.score) << "head " << h << " cand " << k;
      scale_effect = std::max(scale_effect, std::fabs(a.score - unscaled[size_t(h)].candidates[k].pattern.score));
    }
    EXPECT_EQ(cfg.layers[1][size_t(h)].kind, direct[size_t(h)].best.kind) << "head " << h;
  }
  EXPECT_GT(scale_effect, 1e-3);  // the test would see a search that ignored the model's scale
}

TEST(PatternSearch, RefusesModelsWithoutAGlobalLayerAndBadWindows) {
  SearchModel model = fake_model(2, 1 << 20);
  std::vector<int32_t> tokens(256, 7);
  const auto error = [&] { return test_common::error_of([&] { search_patterns(model, tokens, {}, {}); }); };
  const auto has = [](const std::string& e, const char* what) { return e.find(what) != std::string::npos; };
  model.layer_window = {512, 512};
  EXPECT_TRUE(has(error(), "every layer of the model has a sliding window")) << error();
  model.layer_window = {0};
  EXPECT_TRUE(has(error(), "1 layer windows for a model of 2 layers")) << error();
  model.layer_window = {0, -1};
  EXPECT_TRUE(has(error(), "layer 1 has a negative window")) << error();
  model.layer_window.clear();
  model.scale = -1.f;
  EXPECT_TRUE(has(error(), "scale must be >= 0")) << error();
  EXPECT_THROW(local_window_pattern(0), Error);
}

// kernels/ref/head_error.h (the CPU scorer's sums) against a direct fp64 sum on fresh random
// data, and rel_l2_error's definition.
TEST(PatternSearch, HeadErrorSumsMatchFp64) {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t n = 37;
  const int H = 3, d = 20;
  std::vector<float> a(size_t(n * H * d)), b(a.size());
  for (auto& x : a) x = nd(rng);
  for (auto& x : b) x = nd(rng);
  const HeadErrorSums s = head_error_sums_ref({a.data(), b.data(), n, H, d});
  for (int h = 0; h < H; ++h) {
    double d2 = 0, n2 = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int t = 0; t < d; ++t) {
        const size_t at = size_t((i * H + h) * d + t);
        d2 += (double(a[at]) - b[at]) * (double(a[at]) - b[at]);
        n2 += double(b[at]) * b[at];
      }
    EXPECT_NEAR(s.diff2[size_t(h)], d2, 1e-12 * d2);
    EXPECT_NEAR(s.norm2[size_t(h)], n2, 1e-12 * n2);
  }
  EXPECT_DOUBLE_EQ(rel_l2_error(4.0, 16.0), 0.5);
  EXPECT_DOUBLE_EQ(rel_l2_error(9.0, 0.0), 3.0);
  EXPECT_THROW(head_error_sums_ref({a.data(), b.data(), n, 0, d}), Error);
}

}  // namespace
}  // namespace longctx

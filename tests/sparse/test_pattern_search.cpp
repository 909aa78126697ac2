// test_pattern_search.cpp: the offline pattern search (Algorithm 1) on a fake Engine whose
// capture_attention feeds synthetic, structured Q/K/V: heads with a local band (+ sinks) must
// get a low-error A-shape/VS pattern, a head with strong far columns must get VS, and the
// output must be a valid config in the published format.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "sparse/minference_config.h"
#include "sparse/pattern_search.h"
#include "util/error.h"
#include "util/thread_pool.h"

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

class FakeEngine final : public Engine {
 public:
  FakeEngine(int n_layer, int64_t max_ctx) : max_ctx_(max_ctx) {
    cfg_.arch = "llama";
    cfg_.name = "fake-structured";
    cfg_.n_layer = n_layer;
    cfg_.n_head = SyntheticLayer::kHeads;
    cfg_.n_kv_head = SyntheticLayer::kKvHeads;
    cfg_.head_dim = SyntheticLayer::kDim;
  }
  const ModelConfig& config() const override { return cfg_; }
  const Tokenizer& tokenizer() const override { fail("fake engine: no tokenizer"); }
  int64_t max_context() const override { return max_ctx_; }
  GenerateResult generate(std::span<const int32_t>, const SamplingParams&, const ProgressFn&, const TokenFn&) override {
    fail("fake engine: no generate");
  }
  std::vector<float> score(std::span<const int32_t>, const ProgressFn&) override { fail("fake engine: no score"); }
  std::vector<float> logits(std::span<const int32_t>, int64_t) override { fail("fake engine: no logits"); }
  void capture_attention(std::span<const int32_t> tokens, const AttnObserver& observer) override {
    for (int l = 0; l < cfg_.n_layer; ++l) {
      const SyntheticLayer s(int64_t(tokens.size()), 1000 + l);
      observer({l, s.S, s.kHeads, s.kKvHeads, s.kDim, s.q.data(), s.k.data(), s.v.data()});
    }
  }

 private:
  ModelConfig cfg_;
  int64_t max_ctx_;
};

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
  FakeEngine eng(2, 1 << 20);
  std::vector<int32_t> tokens(2048, 7);
  std::vector<Progress> seen;
  SearchReport report;
  const auto j = search_patterns(eng, tokens, {}, [&](const Progress& p) { seen.push_back(p); }, &report);

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

TEST(PatternSearch, RejectsTinySamples) {
  FakeEngine eng(1, 1 << 20);
  std::vector<int32_t> tokens(10, 1);
  EXPECT_THROW(search_patterns(eng, tokens, {}, {}), Error);
}

}  // namespace
}  // namespace longctx

// test_search_gemma.cpp: the MInference pattern search (methods/minference/pattern_search.h) on a
// Gemma 3 model through the CPU model: tests/data/arch/gemma3/model.gguf (random weights in
// transformers' layout: 4 layers, layer 2 global, layers 0, 1, 3 sliding window 16, head_dim 32,
// 2 query / 1 KV heads, score scale 1/sqrt(24) from query_pre_attn_scalar, 128-token context).
// The file has no tokenizer, so the CPU model (Transformer, as Engine::capture_attention drives it:
// reset, then one forward with the observer) runs on fresh random token ids filling the context.
// Checks:
//   - only the global layer is scored (a counting scorer sees one layer) and it gets the Table 4
//     candidates; the window layers are written stream_llm(0 sinks, window 16) and reported as
//     local, and the written config validates for the model;
//   - the global layer's candidates equal a direct plan_layer + score_layer of its captured Q/K/V
//     with ModelConfig::score_scale() (1/sqrt(24), not 1/sqrt(32)), number for number;
//   - the written config, loaded as --attn minference=CONFIG is, runs in the model: finite
//     logits of the vocabulary's size.
// Run: build/tests/model/test_model --gtest_filter='SearchGemma*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "loader/model_file.h"
#include "methods/method.h"
#include "methods/minference/minference_config.h"
#include "methods/minference/pattern_search.h"
#include "methods/registry.h"
#include "model/config.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "../sparse/counting_scorer.h"
#include "model_test_util.h"
#include "util/thread_pool.h"

namespace longctx {
namespace {

const std::string kModel = std::string(LONGCTX_TEST_DATA) + "/arch/gemma3/model.gguf";
constexpr int kGlobalLayer = 2;  // config.json layer_types
constexpr int64_t kWindow = 16;  // config.json sliding_window

using test::CountingScorer;  // tests/sparse/counting_scorer.h: counts the layers it is given

std::vector<int32_t> random_tokens(int64_t n, int32_t vocab) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int32_t> id(0, vocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = id(rng);
  return t;
}

TEST(SearchGemma, SearchesTheGlobalLayerOfAGemma3Model) {
  const auto file = open_model_file(kModel);
  const ModelConfig mc = ModelConfig::from_model_file(*file);
  ThreadPool& pool = global_pool();
  Transformer dense(mc, ModelWeights::load(*file, mc), make_dense_method(), pool);
  ASSERT_EQ(mc.n_layer, 4);
  ASSERT_EQ(mc.layer(kGlobalLayer).window, 0);
  const float scale = mc.score_scale();
  ASSERT_GT(std::fabs(scale - 1.f / std::sqrt(float(mc.head_dim))), 1e-3f) << "the model's scale is not 1/sqrt(d)";
  const int64_t n = mc.context_length;
  const auto tokens = random_tokens(n, int32_t(mc.vocab_size));
  const auto capture = [&](std::span<const int32_t> t, const AttnObserver& o) {  // Engine::capture_attention
    dense.reset(int64_t(t.size()));
    dense.forward(t, 0, nullptr, &o);
  };

  SearchModel model{.n_layer = mc.n_layer,
                    .n_head = mc.n_head,
                    .max_context = n,
                    .layer_window = {},
                    .scale = scale,
                    .capture = capture};
  for (int l = 0; l < mc.n_layer; ++l) model.layer_window.push_back(mc.layer(l).window);
  CountingScorer scorer(global_pool());
  SearchOptions opt;
  opt.scorer = &scorer;
  SearchReport report;
  const auto j = search_patterns(model, tokens, opt, {}, &report);
  EXPECT_EQ(scorer.layers, 1);

  const auto dir = test::temp_dir("search-gemma");
  const std::string path = (dir / "gemma3-searched.json").string();
  const MInferenceConfig cfg = MInferenceConfig::from_json(j, "search output");
  cfg.save(path);
  EXPECT_NO_THROW(MInferenceConfig::load(path).validate(mc.n_layer, mc.n_head, mc.name, path));
  for (int l = 0; l < mc.n_layer; ++l)
    for (int h = 0; h < mc.n_head; ++h) {
      const HeadSearchResult& r = report.layers[size_t(l)][size_t(h)];
      const HeadPattern& hp = cfg.layers[size_t(l)][size_t(h)];
      if (l == kGlobalLayer) {
        EXPECT_EQ(r.local_window, 0);
        EXPECT_EQ(r.candidates.size(), table4_candidates().size());
        EXPECT_EQ(hp.kind, r.best.kind);
        continue;
      }
      EXPECT_EQ(r.local_window, kWindow) << "layer " << l;
      EXPECT_TRUE(r.candidates.empty()) << "layer " << l;
      EXPECT_TRUE(hp.kind == PatternKind::AShape && hp.vertical == 0 && hp.slash == kWindow) << "layer " << l;
    }

  // The global layer, scored directly on its capture with the model's scale.
  std::vector<float> q, k, v;
  AttnParams p;
  capture(tokens, [&](const AttnCapture& c) {
    if (c.layer != kGlobalLayer) return;
    q.assign(c.q, c.q + c.n_tokens * c.n_head * c.head_dim);
    k.assign(c.k, c.k + c.n_tokens * c.n_kv_head * c.head_dim);
    v.assign(c.v, c.v + c.n_tokens * c.n_kv_head * c.head_dim);
    p.n_q = p.n_kv = c.n_tokens;
    p.n_head = c.n_head, p.n_kv_head = c.n_kv_head, p.head_dim = c.head_dim;
  });
  p.q = q.data(), p.k = k.data(), p.v = v.data();
  p.causal = true;
  p.scale = scale;
  p.layer = kGlobalLayer;
  const auto direct = score_layer(p, plan_layer(p, SearchOptions{}, pool), pool);
  double largest = 0;
  for (int h = 0; h < mc.n_head; ++h) {
    const auto& got = report.layers[kGlobalLayer][size_t(h)].candidates;
    ASSERT_EQ(got.size(), direct[size_t(h)].size());
    for (size_t c = 0; c < got.size(); ++c) {
      const HeadPattern &a = got[c].pattern, &b = direct[size_t(h)][c].pattern;
      EXPECT_TRUE(a.kind == b.kind && a.vertical == b.vertical && a.slash == b.slash) << "head " << h << " cand " << c;
      EXPECT_DOUBLE_EQ(a.score, b.score) << "head " << h << " cand " << c;
      std::printf("[ head %d %s (%lld, %lld) ] error %.4f, work %.3f of dense\n", h, pattern_name(a.kind),
                  (long long)a.vertical, (long long)a.slash, a.score, got[c].work);
      largest = std::max(largest, a.score);
    }
  }
  // Some candidate drops attention mass, so the equality above would see another scale.
  EXPECT_GT(largest, 1e-3);

  // The written config runs in the model, made as --attn minference=CONFIG makes it.
  const MethodContext ctx{mc.n_layer, mc.n_head, mc.n_kv_head, mc.head_dim, mc.name};
  Transformer sparse(mc, ModelWeights::load(*file, mc), make_attention_method("minference=" + path, ctx), pool);
  std::vector<float> logits;
  sparse.reset(n);
  sparse.forward(tokens, 1, &logits);
  ASSERT_EQ(int64_t(logits.size()), int64_t(mc.vocab_size));
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
}

}  // namespace
}  // namespace longctx

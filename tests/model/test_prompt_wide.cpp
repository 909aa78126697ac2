// test_prompt_wide.cpp: the CPU layer-major prefill (Transformer::forward_prompt) through which
// MInference makes one vertical-slash estimate per prompt, as the paper's reference and the GPU
// engine do, instead of one per prefill chunk.
// Checks, on a tiny 3-layer random model (head_dim 32) with a config of every pattern:
//   - dense attention: forward_prompt in chunks == forward() chunk by chunk, bit for bit (the
//     same per-chunk work in another order), and prompt_wide() is false (no estimate to share);
//   - MInference, chunks of 256 (block-aligned, so block-sparse and A-shape indices do not move):
//     the layer-major prefill equals one chunk of the whole prompt (both estimate from its last
//     64 queries) to fp32 rounding, while forward() chunk by chunk (an estimate per chunk) is
//     measurably further away: the test would see a prefill that ignored the prompt-wide lines;
//   - the Engine takes this path on the CPU, for generate's prefill, logits() and score();
//   - estimates_per_prompt respects dense_layers / dense_below and configs without VS heads.
// Run: build/tests/model/test_model --gtest_filter='PromptWide*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include "../common/minference_test_configs.h"
#include "loader/model_file.h"
#include "longctx/engine.h"
#include "model/config.h"
#include "model/tiny_model.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "model_test_util.h"
#include "methods/minference/minference_config.h"
#include "methods/minference/minference_method.h"
#include "util/thread_pool.h"

namespace longctx {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kPrompt = 1100, kChunk = 256, kRows = 4;

using test::ash;
using test::bs;
using test::mixed_config;  // 3 layers x 4 heads, every pattern, budgets well below the prompt

struct Fixture {
  fs::path dir;
  std::string model, config;
  std::unique_ptr<ModelFile> file;
  ModelConfig cfg;
  std::vector<int32_t> ids;
};

Fixture& fixture() {
  static Fixture* f = [] {
    auto* x = new Fixture;
    x->dir = test::temp_dir("prompt-wide");
    TinyModelSpec spec;
    spec.n_layer = 3;
    spec.n_embd = 128;
    spec.n_ff = 256;
    spec.context_length = 2048;
    spec.seed = 7;
    write_tiny_model(x->dir.string(), spec);
    x->model = (x->dir / "tiny.gguf").string();
    x->config = (x->dir / "mixed.json").string();
    mixed_config().save(x->config);
    x->file = open_model_file(x->model);
    x->cfg = ModelConfig::from_model_file(*x->file);
    std::mt19937 g(3);
    std::uniform_int_distribution<int32_t> tok(0, int32_t(x->cfg.vocab_size) - 1);
    for (int64_t i = 0; i < kPrompt; ++i) x->ids.push_back(tok(g));
    return x;
  }();
  return *f;
}

std::unique_ptr<Transformer> transformer(const std::string& attn) {
  const Fixture& f = fixture();
  MethodContext mc{f.cfg.n_layer, f.cfg.n_head, f.cfg.n_kv_head, f.cfg.head_dim, f.cfg.name};
  auto t = std::make_unique<Transformer>(f.cfg, ModelWeights::load(*f.file, f.cfg), make_attention_method(attn, mc),
                                         global_pool());
  t->reset(kPrompt);
  return t;
}

// The last kRows logit rows of a prefill of the fixture's prompt in chunks of `chunk`.
std::vector<float> chunk_by_chunk(Transformer& t, int64_t chunk) {
  const auto& ids = fixture().ids;
  std::vector<float> lg;
  for (int64_t c0 = 0; c0 < kPrompt; c0 += chunk) {
    const int64_t c1 = std::min(kPrompt, c0 + chunk);
    t.forward(std::span(ids).subspan(size_t(c0), size_t(c1 - c0)), c1 == kPrompt ? kRows : 0, &lg);
  }
  return lg;
}

std::vector<float> layer_major(Transformer& t, int64_t chunk, int* layers_done = nullptr) {
  std::vector<float> lg;
  t.forward_prompt(fixture().ids, chunk, kRows, &lg, [&](int done, int) {
    if (layers_done) *layers_done = done;
  });
  return lg;
}

using test::max_abs_diff;

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, double(std::abs(x)));
  return m;
}

std::string minference_spec() { return "minference=" + fixture().config; }

TEST(PromptWide, DenseLayerMajorEqualsChunkByChunk) {
  auto a = transformer("dense"), b = transformer("dense");
  EXPECT_FALSE(a->prompt_wide(kPrompt, kChunk));
  int done = 0;
  const auto lm = layer_major(*a, kChunk, &done), cm = chunk_by_chunk(*b, kChunk);
  EXPECT_EQ(done, fixture().cfg.n_layer);
  ASSERT_EQ(lm.size(), size_t(kRows * fixture().cfg.vocab_size));
  EXPECT_EQ(lm, cm) << "max |diff| " << max_abs_diff(lm, cm);
  EXPECT_EQ(a->cache().size(), kPrompt);
}

TEST(PromptWide, MInferenceChunkedEqualsOneChunk) {
  auto lmt = transformer(minference_spec()), one = transformer(minference_spec()), per = transformer(minference_spec());
  auto dense = transformer("dense");
  EXPECT_TRUE(lmt->prompt_wide(kPrompt, kChunk));
  EXPECT_FALSE(lmt->prompt_wide(kChunk, kChunk)) << "one chunk needs no layer-major pass";
  const auto lm = layer_major(*lmt, kChunk);
  const auto whole = chunk_by_chunk(*one, kPrompt);     // one estimate from the prompt's last 64 queries
  const auto per_chunk = chunk_by_chunk(*per, kChunk);  // one estimate per chunk
  const auto dn = chunk_by_chunk(*dense, kPrompt);
  const double scale = max_abs(whole), d_lm = max_abs_diff(lm, whole), d_per = max_abs_diff(per_chunk, whole),
               d_dense = max_abs_diff(dn, whole);
  std::printf("[ prompt-wide ] max|logit| %.3f; layer-major chunks of %lld vs one chunk %.2e; chunk-by-chunk "
              "estimates vs one chunk %.2e; dense vs MInference %.2e\n",
              scale, (long long)kChunk, d_lm, d_per, d_dense);
  EXPECT_LE(d_lm, 1e-6 * scale) << "layer-major MInference should equal the one-chunk run to fp32 rounding";
  EXPECT_GE(d_per, 100 * std::max(d_lm, 1e-7 * scale)) << "per-chunk estimates should differ from the prompt-wide ones";
  EXPECT_GE(d_dense, d_per) << "the method should matter at this length";
}

TEST(PromptWide, EngineUsesItOnTheCpu) {
  const Fixture& f = fixture();
  auto lmt = transformer(minference_spec());
  const auto ref = layer_major(*lmt, kChunk);
  auto eng = Engine::load({.model_path = f.model, .n_threads = 2, .attn = minference_spec(), .prefill_chunk = kChunk});
  const auto lg = eng->logits(f.ids, kRows);
  EXPECT_LE(max_abs_diff(lg, ref), 1e-6 * max_abs(ref));
  // generate's prefill: progress comes per layer (fractions of the prompt), ends at the whole prompt.
  std::vector<int64_t> seen;
  SamplingParams sp;
  sp.max_tokens = 1;
  eng->generate(f.ids, sp, [&](const Progress& p) { seen.push_back(p.done); });
  ASSERT_GE(int64_t(seen.size()), int64_t(f.cfg.n_layer));
  for (int l = 0; l < f.cfg.n_layer; ++l) EXPECT_EQ(seen[size_t(l)], kPrompt * (l + 1) / f.cfg.n_layer) << l;
}

// Log-probs of the fixture's prompt from logits [kPrompt, vocab] (row t predicts token t + 1).
std::vector<double> log_probs(const std::vector<float>& lg) {
  const auto& ids = fixture().ids;
  const int64_t V = fixture().cfg.vocab_size;
  std::vector<double> out;
  for (int64_t t = 0; t + 1 < kPrompt; ++t) {
    const float* row = lg.data() + t * V;
    double mx = row[0], sum = 0;
    for (int64_t j = 1; j < V; ++j) mx = std::max(mx, double(row[j]));
    for (int64_t j = 0; j < V; ++j) sum += std::exp(double(row[j]) - mx);
    out.push_back(double(row[ids[size_t(t + 1)]]) - mx - std::log(sum));
  }
  return out;
}

// Perplexity scoring (Engine::score) prefills the text as one prompt: in chunks of 256 it matches
// one chunk of the whole text (one estimate each) and not the estimate-per-chunk scheme it used
// before; progress comes per layer.
TEST(PromptWide, ScoreUsesOneEstimatePerText) {
  const Fixture& f = fixture();
  auto chunked =
      Engine::load({.model_path = f.model, .n_threads = 2, .attn = minference_spec(), .prefill_chunk = kChunk});
  auto one = Engine::load({.model_path = f.model, .n_threads = 2, .attn = minference_spec(), .prefill_chunk = 2048});
  std::vector<int64_t> seen;
  const auto sc = chunked->score(f.ids, [&](const Progress& p) { seen.push_back(p.done); });
  const auto so = one->score(f.ids);
  ASSERT_EQ(sc.size(), size_t(kPrompt - 1));
  ASSERT_EQ(so.size(), sc.size());
  // The per-chunk scheme: every chunk's logits from forward() with its own estimate.
  auto per = transformer(minference_spec());
  std::vector<float> all, lg;
  for (int64_t c0 = 0; c0 < kPrompt; c0 += kChunk) {
    const int64_t c1 = std::min(kPrompt, c0 + kChunk);
    per->forward(std::span(f.ids).subspan(size_t(c0), size_t(c1 - c0)), c1 - c0, &lg);
    all.insert(all.end(), lg.begin(), lg.end());
  }
  const auto sp = log_probs(all);
  double d_one = 0, d_per = 0;
  for (size_t i = 0; i < sc.size(); ++i) {
    d_one = std::max(d_one, std::abs(double(sc[i]) - so[i]));
    d_per = std::max(d_per, std::abs(sp[i] - so[i]));
  }
  std::printf("[ prompt-wide ] score in chunks of %lld vs one chunk: max |log-prob diff| %.2e; per-chunk "
              "estimates %.2e\n", (long long)kChunk, d_one, d_per);
  EXPECT_LE(d_one, 1e-4) << "scoring should make one estimate per text";
  EXPECT_GE(d_per, 20 * std::max(d_one, 1e-5)) << "the per-chunk scheme should be measurably different";
  ASSERT_GE(int64_t(seen.size()), int64_t(f.cfg.n_layer));
  for (int l = 0; l < f.cfg.n_layer; ++l) EXPECT_EQ(seen[size_t(l)], kPrompt * (l + 1) / f.cfg.n_layer) << l;
  // Dense scoring keeps its chunk-by-chunk path and equals the logits of one prefill.
  auto dense = Engine::load({.model_path = f.model, .n_threads = 2, .prefill_chunk = kChunk});
  const auto sd = dense->score(f.ids);
  const auto ld = log_probs(dense->logits(f.ids, kPrompt));
  double d_dense = 0;
  for (size_t i = 0; i < sd.size(); ++i) d_dense = std::max(d_dense, std::abs(double(sd[i]) - ld[i]));
  EXPECT_LE(d_dense, 1e-4);
}

TEST(PromptWide, WhichLayersEstimatePerPrompt) {
  const Fixture& f = fixture();
  MethodContext mc{f.cfg.n_layer, f.cfg.n_head, f.cfg.n_kv_head, f.cfg.head_dim, f.cfg.name};
  auto m = make_minference_method(mixed_config(), {}, mc);
  for (int l = 0; l < 3; ++l) EXPECT_TRUE(m->estimates_per_prompt(l, 1000)) << l;
  auto d = make_minference_method(mixed_config(), {.config_path = {}, .dense_below = 2000, .dense_layers = 1}, mc);
  EXPECT_FALSE(d->estimates_per_prompt(0, 4000)) << "dense layer";
  EXPECT_FALSE(d->estimates_per_prompt(1, 1000)) << "prompt below dense_below";
  EXPECT_TRUE(d->estimates_per_prompt(1, 4000));
  MInferenceConfig no_vs;
  no_vs.layers = {{bs(3), bs(3), ash(64, 256), ash(64, 256)},
                  {bs(4), bs(4), bs(4), bs(4)},
                  {ash(1, 2), ash(1, 2), ash(1, 2), ash(1, 2)}};
  auto n = make_minference_method(no_vs, {}, mc);
  for (int l = 0; l < 3; ++l) EXPECT_FALSE(n->estimates_per_prompt(l, 4000)) << l;
}

}  // namespace
}  // namespace longctx

// test_gpu_model.cpp: the GPU forward (gpu/GpuTransformer) against the CPU forward
// (model/Transformer, fp32) on the same weights: tiny models written by the test (head dim 64
// and 128, Llama and Qwen2 with bias, llama3 RoPE, tied and untied, F32 and Q8_0 files) and
// random-weight geometries of real models (SmolLM2-135M, Llama-3.1-8B and Qwen2.5-7B with
// fewer layers). Each run prefills in several chunks (chunked-prefill attention, q_pos0 > 0)
// and then decodes teacher-forced steps (split-KV decode), comparing every logit row with the
// bf16 tolerance of test_util.h and the argmax wherever the CPU's top-2 margin exceeds twice
// that tolerance (so a bf16 rounding cannot flip it). Skipped without a Hopper GPU.
//   build-gpumodel/tests/gpu/test_gpu --gtest_filter='GpuModel*'
#ifdef LONGCTX_WITH_GPU
#include <cstdio>
#include <random>

#include "gpu/device_weights.h"
#include "gpu/geometry.h"
#include "gpu/gpu_transformer.h"
#include "longctx/engine.h"
#include "model/tiny_model.h"
#include "model/transformer.h"
#include "methods/method.h"
#include "test_util.h"
#include "util/thread_pool.h"

namespace longctx {
namespace {

using test::random_ids;

using test::compare_row;
using test::LogitDiff;

struct Tally {
  double worst = 0;  // max over rows of max_abs / tol
  double worst_rel_l2 = 0;
  int checked = 0, equal = 0, rows = 0;
  void add(const LogitDiff& d) {
    ++rows;
    worst = std::max(worst, d.max_abs / d.tol());
    worst_rel_l2 = std::max(worst_rel_l2, d.rel_l2);
    EXPECT_LE(d.max_abs, d.tol()) << "row " << rows << ": scale " << d.scale << " rel_l2 " << d.rel_l2;
    if (d.margin_a > 2 * d.tol()) {
      ++checked;
      equal += d.argmax_a == d.argmax_b;
      EXPECT_EQ(d.argmax_a, d.argmax_b) << "row " << rows << " margin " << d.margin_a;
    }
  }
};

// Prefill n_prompt random ids in chunks of `chunk` on the GPU (one CPU forward), compare the
// last rows, then n_decode teacher-forced decode steps (the CPU's greedy tokens).
void compare_models(const std::string& label, const ModelConfig& cfg, gpu::DeviceWeights dw, int64_t n_prompt,
                    int64_t chunk, int n_decode) {
  gpu::GpuTransformer g(cfg, std::move(dw), {chunk});
  MethodContext mc{cfg.n_layer, cfg.n_head, cfg.n_kv_head, cfg.head_dim, cfg.name};
  Transformer cpu(cfg, g.weights().download(g.stream()), make_attention_method("dense", mc), global_pool());
  const auto ids = random_ids(n_prompt, cfg.vocab_size, 7);
  constexpr int64_t kRows = 4;  // logit rows compared after the prefill (crossing no chunk boundary is fine)
  cpu.reset(n_prompt + n_decode);
  g.reset(n_prompt + n_decode);
  std::vector<float> lc, lg;
  cpu.forward(ids, kRows, &lc);
  g.forward(ids, kRows, &lg);
  const int64_t V = cfg.vocab_size;
  ASSERT_EQ(lc.size(), size_t(kRows * V));
  ASSERT_EQ(lg.size(), lc.size());
  Tally t;
  for (int64_t r = 0; r < kRows; ++r) t.add(compare_row(lc.data() + r * V, lg.data() + r * V, V));
  int32_t tok = compare_row(lc.data() + (kRows - 1) * V, lg.data() + (kRows - 1) * V, V).argmax_a;
  for (int s = 0; s < n_decode; ++s) {
    cpu.forward(std::span(&tok, 1), 1, &lc);
    g.forward(std::span(&tok, 1), 1, &lg);
    const LogitDiff d = compare_row(lc.data(), lg.data(), V);
    t.add(d);
    tok = d.argmax_a;
  }
  EXPECT_EQ(g.size(), n_prompt + n_decode);
  std::printf("[ gpu vs cpu ] %-28s prompt %lld (chunk %lld) + %d decode: max|diff|/tol %.3f, rel_l2 <= %.2e, "
              "argmax equal %d/%d checked (of %d rows)\n",
              label.c_str(), (long long)n_prompt, (long long)chunk, n_decode, t.worst, t.worst_rel_l2, t.equal,
              t.checked, t.rows);
  EXPECT_GT(t.checked, 0) << "no row had a clear argmax: the comparison proved nothing";
}

struct TinyCase {
  const char* name;
  TinyModelSpec spec;
  int64_t n_prompt, chunk;
};

class GpuModelTiny : public ::testing::TestWithParam<TinyCase> {};

TEST_P(GpuModelTiny, MatchesCpuForward) {
  REQUIRE_GPU();
  const TinyCase& c = GetParam();
  const auto dir = test::temp_dir(c.name);
  write_tiny_model(dir.string(), c.spec);
  auto file = open_model_file((dir / "tiny.gguf").string());
  const ModelConfig cfg = ModelConfig::from_model_file(*file);
  compare_models(c.name, cfg, gpu::DeviceWeights::upload(cfg, ModelWeights::load(*file, cfg), nullptr), c.n_prompt,
                 c.chunk, 16);
  std::filesystem::remove_all(dir);
}

TinyModelSpec tiny_d64() {
  TinyModelSpec s;
  s.n_layer = 2;
  s.n_embd = 256;
  s.n_head = 4;  // head dim 64
  s.n_kv_head = 2;
  s.n_ff = 512;
  s.seed = 11;
  return s;
}

TinyModelSpec tiny_d128_qwen() {
  TinyModelSpec s;
  s.arch = "qwen2";  // Q/K/V bias
  s.rope_scaling = "llama3";
  s.gguf_dtype = DType::Q8_0;
  s.tied_embeddings = false;
  s.n_layer = 3;
  s.n_embd = 512;
  s.n_head = 4;  // head dim 128, GQA 4:1
  s.n_kv_head = 1;
  s.n_ff = 1024;
  s.seed = 12;
  return s;
}

INSTANTIATE_TEST_SUITE_P(Models, GpuModelTiny,
                         ::testing::Values(TinyCase{"llama_d64", tiny_d64(), 300, 64},
                                           TinyCase{"qwen2_llama3rope_d128", tiny_d128_qwen(), 300, 100}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(GpuModelRandom, SmolLM2Geometry) {
  REQUIRE_GPU();
  const ModelConfig cfg = gpu::geometry_config("smollm2-135m");
  compare_models("random smollm2-135m", cfg, gpu::DeviceWeights::random(cfg, 3, nullptr), 600, 256, 8);
}

// Gemma 3 270m's geometry (head_dim 256, one KV head, 15 sliding-window layers of 512 and 3
// global ones, QK-norm, post-norms, GELU-tanh, embedding and score scales): a prompt of 1300
// tokens in chunks of 256 (windows crossing chunk borders), then decode steps past the window.
TEST(GpuModelRandom, Gemma3Geometry) {
  REQUIRE_GPU();
  const ModelConfig cfg = gpu::geometry_config("gemma3-270m");
  compare_models("random gemma3-270m", cfg, gpu::DeviceWeights::random(cfg, 6, nullptr), 1300, 256, 8);
}

TEST(GpuModelRandom, Llama31Geometry2Layers) {
  REQUIRE_GPU();
  const ModelConfig cfg = gpu::geometry_config("llama3.1-8b:2");
  compare_models("random llama3.1-8b:2", cfg, gpu::DeviceWeights::random(cfg, 4, nullptr), 300, 128, 4);
}

TEST(GpuModelRandom, Qwen25Geometry1Layer) {
  REQUIRE_GPU();
  const ModelConfig cfg = gpu::geometry_config("qwen2.5-7b:1");
  compare_models("random qwen2.5-7b:1", cfg, gpu::DeviceWeights::random(cfg, 5, nullptr), 200, 128, 4);
}

// The Engine on --device cuda vs --device cpu on the same file: logits, scores and greedy
// tokens (the GPU rounds the weights to bf16, the CPU does not: same tolerance, it is smaller
// than the activation rounding).
TEST(GpuModelEngine, GreedyLogitsAndScoresMatchCpu) {
  REQUIRE_GPU();
  const auto dir = test::temp_dir("engine");
  write_tiny_model(dir.string(), tiny_d64());
  const std::string path = (dir / "tiny.gguf").string();
  auto cpu = Engine::load({.model_path = path, .n_threads = 4});
  auto gpu = Engine::load({.model_path = path, .device = "cuda"});
  const int64_t V = cpu->config().vocab_size;
  const auto ids = random_ids(200, int32_t(V), 9);
  const auto lc = cpu->logits(ids, 3), lg = gpu->logits(ids, 3);
  ASSERT_EQ(lc.size(), lg.size());
  double tol = 0;
  for (int r = 0; r < 3; ++r) {
    const LogitDiff d = compare_row(lc.data() + r * V, lg.data() + r * V, V);
    EXPECT_LE(d.max_abs, d.tol());
    tol = std::max(tol, d.tol());
  }
  // Teacher-forced log-probs of every position: a log-softmax moves by at most twice the
  // largest logit difference, so 2 * tol bounds each; the mean shows they are in step (a
  // misplaced row would differ by whole units). Measured worst on an H200: 0.51 (tol ~0.3).
  const auto sc = cpu->score(ids), sg = gpu->score(ids);
  ASSERT_EQ(sc.size(), sg.size());
  double worst = 0, mean = 0;
  for (size_t i = 0; i < sc.size(); ++i) {
    worst = std::max(worst, double(std::abs(sc[i] - sg[i])));
    mean += std::abs(sc[i] - sg[i]) / double(sc.size());
  }
  EXPECT_LT(worst, 2 * tol) << "log-prob difference";

  // Greedy: equal tokens up to the first step whose CPU top-2 margin is within the tolerance.
  SamplingParams sp;
  sp.max_tokens = 12;
  sp.stop_at_eos = false;
  const auto rc = cpu->generate(ids, sp), rg = gpu->generate(ids, sp);
  std::vector<int32_t> seq = ids;
  int compared = 0;
  for (size_t i = 0; i < rc.tokens.size(); ++i) {
    const auto row = cpu->logits(seq, 1);
    const LogitDiff d = compare_row(row.data(), row.data(), V);
    if (d.margin_a <= 2 * d.tol()) break;
    ASSERT_LT(i, rg.tokens.size());
    EXPECT_EQ(rc.tokens[i], rg.tokens[i]) << "greedy token " << i;
    ++compared;
    seq.push_back(rc.tokens[i]);
  }
  std::printf("[ engine gpu vs cpu ] log-prob max|diff| %.3e (bound %.3e), mean %.3e; greedy tokens equal %d/%zu "
              "(compared while margin clear)\n",
              worst, 2 * tol, mean, compared, rc.tokens.size());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace longctx
#endif  // LONGCTX_WITH_GPU

// test_gpu_arch.cpp: every architecture and RoPE-scaling variant of tests/data/arch on the GPU
// (gpu/GpuTransformer) against the CPU forward on the same bf16-rounded weights and against
// transformers' fp32 logits (golden.json): Llama, Qwen2, Qwen3 (QK-norm), Qwen3 + YaRN,
// Mistral-Nemo, Gemma 3 (sliding-window and global layers, local RoPE base, post-norms,
// GELU-tanh, (1 + w) norms, embedding and score scales) and Phi-3 LongRoPE (short and long
// factors: the 80-token sequence passes the original 32), safetensors and GGUF.
// Each golden sequence runs three ways on the GPU: one forward (prefill in chunks of 32, so the
// window of 16 crosses chunk borders), forwards of 13 tokens (chunked prefill over a cached
// prefix) and token by token (graph-replayed decode steps); every logit row is compared.
// Tolerances: vs the CPU on the same weights, test_util.h's bf16 activation tolerance; vs
// transformers (fp32 weights), twice that (the weights are bf16 on the GPU, too). Skipped without
// a Hopper GPU.
//   build-gpu/tests/gpu/test_gpu --gtest_filter='GpuArch*'
#ifdef LONGCTX_WITH_GPU
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "gpu/device_weights.h"
#include "gpu/geometry.h"
#include "gpu/gpu_transformer.h"
#include "loader/model_cache.h"
#include "methods/method.h"
#include "methods/registry.h"
#include "model/config.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "test_util.h"
#include "util/thread_pool.h"

namespace longctx {
namespace {

using test::compare_row;
using test::LogitDiff;

constexpr int64_t kGpuChunk = 32;       // prefill chunk of the GPU model (< the sequences' 80 tokens)
constexpr double kGoldenTolFactor = 2;  // vs transformers: bf16 weights on top of bf16 activations

std::string arch_dir(const std::string& name) { return std::string(LONGCTX_TEST_DATA) + "/arch/" + name; }

// Logits [T, vocab] of the GPU model over ids, forwarded `step` tokens at a time from a reset.
std::vector<float> gpu_logits(gpu::GpuTransformer& g, const std::vector<int32_t>& ids, int64_t step) {
  const int64_t T = int64_t(ids.size());
  g.reset(T);
  std::vector<float> all, lg;
  for (int64_t c0 = 0; c0 < T; c0 += step) {
    const int64_t n = std::min(step, T - c0);
    g.forward(std::span(ids).subspan(size_t(c0), size_t(n)), n, &lg);
    all.insert(all.end(), lg.begin(), lg.end());
  }
  return all;
}

class GpuArch : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuArch, MatchesCpuAndTransformers) {
  REQUIRE_GPU();
  const std::string name = GetParam();
  const size_t colon = name.find(':');
  const std::string variant = name.substr(0, colon);
  auto mf = open_model_file(colon == std::string::npos ? arch_dir(variant) : arch_dir(variant) + "/model.gguf");
  const ModelConfig cfg = ModelConfig::from_model_file(*mf);
  ASSERT_EQ(gpu::gpu_model_problem(cfg), "");
  gpu::GpuTransformer g(cfg, gpu::DeviceWeights::upload(cfg, ModelWeights::load(*mf, cfg), nullptr),
                        {.chunk = kGpuChunk});
  ThreadPool pool(2);
  Transformer cpu(cfg, g.weights().download(g.stream()), make_dense_method(), pool);
  std::ifstream f(arch_dir(variant) + "/golden.json");
  const auto golden = nlohmann::json::parse(f);
  const int64_t V = cfg.vocab_size;
  double worst_cpu = 0, worst_golden = 0;
  int rows = 0, argmax_checked = 0;
  for (const auto& seq : golden["sequences"]) {
    const auto ids = seq["ids"].get<std::vector<int32_t>>();
    const auto positions = seq["positions"].get<std::vector<int64_t>>();
    const int64_t T = int64_t(ids.size());
    std::vector<float> ref;  // CPU [T, V]
    cpu.reset(T);
    cpu.forward(ids, T, &ref);
    ASSERT_EQ(ref.size(), size_t(T * V));
    for (int64_t step : {T, int64_t(13), int64_t(1)}) {
      const std::vector<float> lg = gpu_logits(g, ids, step);
      ASSERT_EQ(lg.size(), ref.size());
      for (int64_t t = 0; t < T; ++t) {
        const LogitDiff d = compare_row(ref.data() + t * V, lg.data() + t * V, V);
        worst_cpu = std::max(worst_cpu, d.max_abs / d.tol());
        ++rows;
        EXPECT_LE(d.max_abs, d.tol()) << name << " vs CPU: T " << T << ", step " << step << ", row " << t;
      }
      for (size_t k = 0; k < positions.size(); ++k) {
        const auto gold_d = seq["logits"][k].get<std::vector<double>>();
        const std::vector<float> gold(gold_d.begin(), gold_d.end());
        ASSERT_EQ(int64_t(gold.size()), V);
        const LogitDiff d = compare_row(gold.data(), lg.data() + positions[k] * V, V);
        const double tol = kGoldenTolFactor * d.tol();
        worst_golden = std::max(worst_golden, d.max_abs / tol);
        EXPECT_LE(d.max_abs, tol) << name << " vs transformers: T " << T << ", step " << step << ", position "
                                  << positions[k];
        if (d.margin_a > 2 * tol) {
          ++argmax_checked;
          EXPECT_EQ(d.argmax_a, d.argmax_b) << name << " position " << positions[k];
        }
      }
    }
  }
  std::printf("[ gpu arch ] %-20s %d rows: max|diff|/tol vs CPU %.3f, vs transformers %.3f (%d argmax checked)\n",
              name.c_str(), rows, worst_cpu, worst_golden, argmax_checked);
}

INSTANTIATE_TEST_SUITE_P(Variants, GpuArch,
                         ::testing::Values("llama", "qwen2", "qwen3", "qwen3_yarn", "qwen3_yarn:gguf", "mistral_nemo",
                                           "gemma3", "gemma3:gguf", "phi3_longrope", "phi3_longrope:gguf"));

// The block features are on by config: a model the GPU refuses names what it lacks.
TEST(GpuArchProblem, NamesTheUnsupportedShape) {
  ModelConfig c = ModelConfig{};
  c.name = "odd";
  c.arch = "llama";
  c.n_layer = 1;
  c.n_embd = 64;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.head_dim = 96;
  c.n_ff = 128;
  c.vocab_size = 32;
  EXPECT_TRUE(test::contains(gpu::gpu_model_problem(c), "head dim")) << gpu::gpu_model_problem(c);
  c.head_dim = 256;
  EXPECT_EQ(gpu::gpu_model_problem(c), "");
}

// The real model file where it is installed (scripts/fetch-model.sh gemma3-270m), else nullopt.
std::optional<std::string> gemma_path() {
  try {
    return cached_model_path("gemma3-270m");
  } catch (const Error&) {
    return std::nullopt;
  }
}

// The gemma3-270m geometry (random-weight runs on the device, where the 253 MB file is not) is
// the real model's config, checked against the GGUF where it is installed (no GPU needed).
TEST(GpuArchGeometry, Gemma3MatchesTheRealModel) {
  const auto path = gemma_path();
  if (!path) GTEST_SKIP() << "gemma-3-270m not installed (scripts/fetch-model.sh gemma3-270m)";
  auto mf = open_model_file(*path);
  const ModelConfig real = ModelConfig::from_model_file(*mf);
  const ModelConfig geo = gpu::geometry_config("gemma3-270m");
  EXPECT_EQ(geo.arch, real.arch);
  EXPECT_EQ(geo.n_layer, real.n_layer);
  EXPECT_EQ(geo.n_embd, real.n_embd);
  EXPECT_EQ(geo.n_head, real.n_head);
  EXPECT_EQ(geo.n_kv_head, real.n_kv_head);
  EXPECT_EQ(geo.head_dim, real.head_dim);
  EXPECT_EQ(geo.n_ff, real.n_ff);
  EXPECT_EQ(geo.vocab_size, real.vocab_size);
  EXPECT_EQ(geo.context_length, real.context_length);
  EXPECT_FLOAT_EQ(geo.rms_eps, real.rms_eps);
  EXPECT_FLOAT_EQ(geo.rope_theta, real.rope_theta);
  EXPECT_EQ(geo.rope_scaling.type, real.rope_scaling.type);
  EXPECT_EQ(geo.tied_embeddings, real.tied_embeddings);
  EXPECT_EQ(geo.qk_norm, real.qk_norm);
  EXPECT_EQ(geo.post_norms, real.post_norms);
  EXPECT_FLOAT_EQ(geo.norm_offset, real.norm_offset);
  EXPECT_EQ(geo.activation, real.activation);
  EXPECT_FLOAT_EQ(geo.embed_scale, real.embed_scale);
  EXPECT_FLOAT_EQ(geo.score_scale(), real.score_scale());
  for (int l = 0; l < real.n_layer; ++l) {
    EXPECT_EQ(geo.layer(l).window, real.layer(l).window) << "layer " << l;
    EXPECT_FLOAT_EQ(geo.layer(l).rope_theta, real.layer(l).rope_theta) << "layer " << l;
    EXPECT_EQ(geo.layer(l).rope_scaled, real.layer(l).rope_scaled) << "layer " << l;
  }
}

// The real gemma-3-270m on the GPU against transformers' greedy continuation of each golden
// prompt (tests/data/golden/gemma-3-270m-q4_k_m.json, up to 8.7K tokens), teacher-forced: the GPU's
// argmax must be the reference token wherever its own top-2 margin exceeds twice the bf16
// tolerance (a smaller margin is a tie bf16 rounding may break either way; counted and printed).
TEST(GpuArchGemmaReal, GreedyMatchesTransformers) {
  REQUIRE_GPU();
  const auto path = gemma_path();
  if (!path) GTEST_SKIP() << "gemma-3-270m not installed (scripts/fetch-model.sh gemma3-270m)";
  auto mf = open_model_file(*path);
  const ModelConfig cfg = ModelConfig::from_model_file(*mf);
  gpu::GpuTransformer g(cfg, gpu::DeviceWeights::upload(cfg, ModelWeights::load(*mf, cfg), nullptr), {.chunk = 512});
  std::ifstream f(std::string(LONGCTX_TEST_DATA) + "/golden/gemma-3-270m-q4_k_m.json");
  const auto golden = nlohmann::json::parse(f);
  const int64_t V = cfg.vocab_size;
  int checked = 0, ties = 0;
  for (const auto& p : golden["prompts"]) {
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    const auto want = p["greedy"].get<std::vector<int32_t>>();
    g.reset(int64_t(ids.size() + want.size()));
    std::vector<float> lg;
    g.forward(ids, 1, &lg);
    for (size_t i = 0; i < want.size(); ++i) {
      const LogitDiff d = compare_row(lg.data(), lg.data(), V);  // the GPU row's argmax and margin
      if (d.margin_a > 2 * d.tol()) {
        ++checked;
        EXPECT_EQ(d.argmax_a, want[i]) << p["name"] << " (" << ids.size() << " tokens) step " << i;
      } else {
        ++ties;
      }
      if (i + 1 < want.size()) g.forward(std::span(&want[i], 1), 1, &lg);
    }
  }
  std::printf("[ gpu arch ] gemma-3-270m greedy: %d tokens checked, %d near-ties skipped\n", checked, ties);
}

}  // namespace
}  // namespace longctx
#endif  // LONGCTX_WITH_GPU

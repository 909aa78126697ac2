// test_arch_golden.cpp: every architecture and RoPE-scaling variant vs transformers (fp32), on
// tiny random-weight models: Llama (control), Qwen2, Qwen3 (QK-norm), Qwen3 + YaRN, Mistral-Nemo
// (head_dim apart from hidden / heads), Gemma 3
// (sliding-window and global layers, local RoPE base, sandwich norms, GELU-tanh, (1 + w) norms,
// embedding and attention scales) and Phi-3 LongRoPE (fused projections, short and long factors).
//
// Data: tests/data/arch/<variant>/{config.json, model.safetensors, golden.json}, written by
// tools/make_arch_golden.py with transformers' own model classes; no torch needed here. Gemma 3,
// Qwen3 + YaRN and Phi-3 LongRoPE also as GGUF (gguf-py's writer, llama.cpp's names and keys,
// Gemma's folded (1 + w) norms, Phi-3's rope_factors tensors).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "methods/registry.h"
#include "util/thread_pool.h"

namespace longctx {
namespace {

// Both sides compute in fp32 from the same (bf16-exact) weights; differences are summation
// order only. Measured worst case is ~2e-5 on logits up to ~50 (Gemma 3's scaled embeddings);
// the tolerance is relative to the row's largest logit, with margin for other BLAS kernels.
constexpr double kRelTol = 2e-5;
constexpr double kAbsTol = 1e-4;

std::string arch_dir(const std::string& name) { return std::string(LONGCTX_TEST_DATA) + "/arch/" + name; }

nlohmann::json load_golden(const std::string& name) {
  std::ifstream f(arch_dir(name) + "/golden.json");
  return nlohmann::json::parse(f);
}

struct Loaded {
  std::unique_ptr<ModelFile> mf;
  ModelConfig cfg;
  std::unique_ptr<Transformer> model;
};

// "<variant>" opens the safetensors directory, "<variant>:gguf" its model.gguf.
Loaded load(const std::string& name, ThreadPool& pool) {
  Loaded m;
  const size_t colon = name.find(':');
  m.mf = open_model_file(colon == std::string::npos ? arch_dir(name) : arch_dir(name.substr(0, colon)) + "/model.gguf");
  m.cfg = ModelConfig::from_model_file(*m.mf);
  m.model = std::make_unique<Transformer>(m.cfg, ModelWeights::load(*m.mf, m.cfg), make_dense_method(), pool);
  return m;
}

// Largest |ours - reference| / tolerance over the golden positions of one sequence (< 1 passes),
// the tolerance scaled by the row's largest logit; forward in chunks of `chunk` tokens (the cache
// carries the prefix). max_abs: the largest absolute difference, for the log.
double worst_error(Transformer& model, const nlohmann::json& seq, int64_t chunk, double& max_abs) {
  const auto ids = seq["ids"].get<std::vector<int32_t>>();
  const auto positions = seq["positions"].get<std::vector<int64_t>>();
  const int64_t T = int64_t(ids.size());
  model.reset(T);
  std::vector<float> all, lg;  // all: [T, vocab]
  for (int64_t c0 = 0; c0 < T; c0 += chunk) {
    const int64_t n = std::min(chunk, T - c0);
    model.forward(std::span(ids).subspan(size_t(c0), size_t(n)), n, &lg);
    all.insert(all.end(), lg.begin(), lg.end());
  }
  const int64_t V = model.config().vocab_size;
  double worst = 0;
  for (size_t k = 0; k < positions.size(); ++k) {
    const auto ref = seq["logits"][k].get<std::vector<double>>();
    EXPECT_EQ(int64_t(ref.size()), V);
    double scale = 0;
    for (double v : ref) scale = std::max(scale, std::abs(v));
    for (int64_t v = 0; v < V; ++v) {
      const double err = std::abs(double(all[size_t(positions[k] * V + v)]) - ref[size_t(v)]);
      worst = std::max(worst, err / (kAbsTol + kRelTol * scale));
      max_abs = std::max(max_abs, err);
    }
  }
  return worst;
}

class ArchGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(ArchGolden, LogitsMatchTransformers) {
  ThreadPool pool(2);
  Loaded m = load(GetParam(), pool);
  const std::string name = GetParam();
  const auto golden = load_golden(name.substr(0, name.find(':')));
  double max_abs = 0;
  for (const auto& seq : golden["sequences"]) {
    const int64_t T = int64_t(seq["ids"].size());
    // One prefill, chunked prefill (cache across chunks, windows crossing chunk borders), and
    // token-by-token decode: the same logits each way.
    for (int64_t chunk : {T, int64_t(13), int64_t(1)}) {
      const double err = worst_error(*m.model, seq, chunk, max_abs);
      EXPECT_LT(err, 1.0) << GetParam() << ": T " << T << ", chunk " << chunk;
    }
  }
  std::cout << GetParam() << ": max |logit - transformers| = " << max_abs << "\n";
}

INSTANTIATE_TEST_SUITE_P(Variants, ArchGolden,
                         ::testing::Values("llama", "qwen2", "qwen3", "qwen3_yarn", "qwen3_yarn:gguf", "mistral_nemo",
                                           "gemma3", "gemma3:gguf", "phi3_longrope", "phi3_longrope:gguf"));

}  // namespace
}  // namespace longctx

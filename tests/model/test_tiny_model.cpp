// test_tiny_model.cpp: tiny random-weight models written by the project in both formats:
// GGUF and safetensors give the same logits (every architecture/scaling/quantization variant),
// chunked prefill equals one-shot prefill, and bad models fail with clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "longctx/engine.h"
#include "model/tiny_model.h"
#include "model_test_util.h"
#include "util/error.h"

namespace longctx {
namespace {

namespace fs = std::filesystem;

using test::max_abs_diff;
using test::temp_dir;

struct Variant {
  const char* name;
  TinyModelSpec spec;
};

class TinyFormats : public ::testing::TestWithParam<Variant> {};

TEST_P(TinyFormats, GgufAndSafetensorsGiveTheSameLogits) {
  const auto& v = GetParam();
  const fs::path dir = temp_dir(v.name);
  write_tiny_model(dir.string(), v.spec);
  auto g = Engine::load({.model_path = (dir / "tiny.gguf").string(), .n_threads = 2});
  auto h = Engine::load({.model_path = (dir / "hf").string(), .n_threads = 2});
  EXPECT_EQ(g->config().summary().substr(g->config().summary().find(':')),
            h->config().summary().substr(h->config().summary().find(':')));

  const std::string text = "the theater in the area: <|im_start|>x";
  const auto ids_g = g->tokenizer().encode(text, false, true);
  const auto ids_h = h->tokenizer().encode(text, false, true);
  ASSERT_EQ(ids_g, ids_h);
  ASSERT_GT(ids_g.size(), 10u);
  EXPECT_EQ(g->tokenizer().decode(ids_g), text);

  // Positions past original_context/4 exercise the scaled RoPE frequencies.
  std::vector<int32_t> ids;
  while (ids.size() < 300) ids.insert(ids.end(), ids_g.begin(), ids_g.end());
  ids.resize(300);
  const auto lg = g->logits(ids, 300), lh = h->logits(ids, 300);
  // Same fp32 weights, same code: differences come only from the data layout.
  EXPECT_LT(max_abs_diff(lg, lh), 1e-4) << v.name;

  // Chunked prefill (chunk 64 vs 300 at once) and decode steps give the same numbers.
  auto g2 = Engine::load({.model_path = (dir / "tiny.gguf").string(), .n_threads = 2, .prefill_chunk = 64});
  EXPECT_LT(max_abs_diff(g2->logits(ids, 300), lg), 1e-4);
  SamplingParams sp;
  sp.max_tokens = 20;
  sp.stop_at_eos = false;
  EXPECT_EQ(g->generate(ids, sp).tokens, h->generate(ids, sp).tokens);
  fs::remove_all(dir);
}

TinyModelSpec spec(std::string arch, std::string scaling, DType dt, bool tied) {
  TinyModelSpec s;
  s.arch = std::move(arch);
  s.rope_scaling = std::move(scaling);
  s.gguf_dtype = dt;
  s.tied_embeddings = tied;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Variants, TinyFormats,
    ::testing::Values(Variant{"llama_f32", spec("llama", "none", DType::F32, true)},
                      Variant{"llama_q8_0_untied", spec("llama", "none", DType::Q8_0, false)},
                      Variant{"llama3_scaling_q4_1", spec("llama", "llama3", DType::Q4_1, true)},
                      Variant{"linear_scaling_f16", spec("llama", "linear", DType::F16, true)},
                      Variant{"qwen2_bias_q4_0", spec("qwen2", "none", DType::Q4_0, false)}),
    [](const auto& info) { return std::string(info.param.name); });

// Expects Engine::load to throw an Error whose message contains `needle`.
void expect_load_error(const std::string& path, const std::string& needle) {
  try {
    Engine::load({.model_path = path, .n_threads = 1});
    FAIL() << "expected an error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TinyModelErrors, UnknownArchitectureMissingAndMisshapedTensors) {
  const fs::path dir = temp_dir("errors");
  write_tiny_model(dir.string(), {});
  const fs::path hf = dir / "hf";
  auto cfg = nlohmann::json::parse(std::ifstream(hf / "config.json"));

  auto rewrite = [&](const nlohmann::json& j) { std::ofstream(hf / "config.json") << j.dump(); };
  auto bad = cfg;
  bad["model_type"] = "gpt_neox";
  rewrite(bad);
  expect_load_error(hf.string(), "gpt_neox");

  bad = cfg;
  bad["num_hidden_layers"] = 3;  // the files have 2 layers
  rewrite(bad);
  expect_load_error(hf.string(), "model.layers.2.");

  bad = cfg;
  bad["intermediate_size"] = 100;  // tensors are [128, 64]
  rewrite(bad);
  expect_load_error(hf.string(), "mlp.gate_proj.weight");

  bad = cfg;
  bad["num_attention_heads"] = 3;  // 3 heads is not a multiple of 2 KV heads
  rewrite(bad);
  expect_load_error(hf.string(), "multiple");

  bad = cfg;
  bad.erase("hidden_size");
  rewrite(bad);
  expect_load_error(hf.string(), "hidden_size");

  // A truncated GGUF.
  const fs::path g = dir / "tiny.gguf";
  fs::resize_file(g, fs::file_size(g) / 2);
  expect_load_error(g.string(), "tiny.gguf");

  expect_load_error((dir / "nope.gguf").string(), "nope.gguf");
  expect_load_error("--attn", "--attn");
  fs::remove_all(dir);
}

TEST(TinyModelErrors, PromptAndBudgetChecks) {
  const fs::path dir = temp_dir("budget");
  write_tiny_model(dir.string(), {});
  auto e = Engine::load({.model_path = (dir / "tiny.gguf").string(), .n_threads = 1});
  EXPECT_THROW(e->generate(std::vector<int32_t>{}, {}), Error);
  std::vector<int32_t> ids(500, 65);
  SamplingParams sp;
  sp.max_tokens = 20;  // 500 + 20 > 512
  try {
    e->generate(ids, sp);
    FAIL();
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("512"), std::string::npos) << err.what();
  }
  std::vector<int32_t> bad_id{65, 100000};
  EXPECT_THROW(e->logits(bad_id, 1), Error);
  EXPECT_THROW(Engine::load({.model_path = (dir / "tiny.gguf").string(), .attn = "bogus"}), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace longctx

// test_quant_weights.cpp (tests/model): the fast CPU path (--cpu-weights quantized) against the
// exact fp32 path.
//   - Loading: every quantized matrix, dequantized, equals the fp32 loader's matrix bit for bit
//     (same rows in the same order: llama Q/K un-permuted, Phi-3 splits), on tiny models of each
//     writable type and on the default model; the fp32 copies of quantized matrices are freed.
//   - End to end on the default model: the demo's question (a 4K-token report, greedy) gets the
//     same tokens, and the perplexity of a text moves by less than kPplBound; on gemma-3-270m
//     (mixed Q4_K / Q5_0 / Q6_K / Q8_0), the same perplexity bound and the same greedy tokens.
// Run: build/tests/model/test_model --gtest_filter='QuantWeights*'
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "longctx/engine.h"
#include "loader/model_cache.h"
#include "loader/model_file.h"
#include "model/config.h"
#include "model/tiny_model.h"
#include "model/weights.h"
#include "model_test_util.h"
#include "../common/error_of.h"

namespace longctx {
namespace {

DType dtype_of(QuantType t) {
  switch (t) {
    case QuantType::q4_0: return DType::Q4_0;
    case QuantType::q4_1: return DType::Q4_1;
    case QuantType::q8_0: return DType::Q8_0;
    case QuantType::q4_k: return DType::Q4_K;
  }
  return DType::F32;
}

// m dequantized equals fp32 [rows, cols] exactly; or, for a Q8_0 copy re-quantized from another
// block type (requantized_ok), within half a Q8_0 step d = max|w| / 127 (over each block of 32)
// plus the fp16 rounding of d itself (|q| <= 127 times 2^-11 d): 0.562 d.
void expect_same(const QuantMatrix& m, const std::vector<float>& fp32, const std::string& what,
                 bool requantized_ok = false) {
  ASSERT_FALSE(m.empty()) << what;
  ASSERT_EQ(size_t(m.rows * m.cols), fp32.size()) << what;
  std::vector<float> row(size_t(m.cols));
  for (int64_t r = 0; r < m.rows; ++r) {
    dequantize(dtype_of(m.type), m.data.data() + r * m.row_bytes, row.data(), m.cols);
    const float* want = fp32.data() + r * m.cols;
    if (std::equal(row.begin(), row.end(), want)) continue;
    ASSERT_TRUE(requantized_ok && m.type == QuantType::q8_0) << what << " row " << r << " differs";
    for (int64_t b = 0; b < m.cols / 32; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(want[b * 32 + j]));
      for (int j = 0; j < 32; ++j)
        ASSERT_LE(std::fabs(row[size_t(b * 32 + j)] - want[b * 32 + j]), amax / 127 * (0.5f + 127.f / 2048) * 1.001f + 1e-9f)
            << what << " row " << r << " col " << b * 32 + j;
    }
  }
}

// Loads `path` both ways and compares every matrix.
void check_file(const std::string& path, bool requantized_ok = false) {
  auto mf = open_model_file(path);
  const ModelConfig cfg = ModelConfig::from_model_file(*mf);
  const ModelWeights exact = ModelWeights::load(*mf, cfg, CpuWeights::fp32);
  const ModelWeights fast = ModelWeights::load(*mf, cfg, CpuWeights::quantized);
  ASSERT_TRUE(fast.quant);
  EXPECT_FALSE(exact.quant);
  expect_same(fast.quant->output, exact.output(), "output", requantized_ok);
  EXPECT_EQ(fast.tok_embd, exact.tok_embd);  // the token lookup stays fp32
  for (int l = 0; l < cfg.n_layer; ++l) {
    const LayerWeights& E = exact.layers[size_t(l)];
    const LayerWeights& F = fast.layers[size_t(l)];
    const QuantLayerWeights& Q = fast.quant->layers[size_t(l)];
    const std::string at = " of layer " + std::to_string(l);
    expect_same(Q.wq, E.wq, "wq" + at, requantized_ok);
    expect_same(Q.wk, E.wk, "wk" + at, requantized_ok);
    expect_same(Q.wv, E.wv, "wv" + at, requantized_ok);
    expect_same(Q.wo, E.wo, "wo" + at, requantized_ok);
    expect_same(Q.w_gate, E.w_gate, "w_gate" + at, requantized_ok);
    expect_same(Q.w_up, E.w_up, "w_up" + at, requantized_ok);
    expect_same(Q.w_down, E.w_down, "w_down" + at, requantized_ok);
    EXPECT_TRUE(F.wq.empty() && F.wo.empty() && F.w_down.empty()) << "fp32 copies kept" << at;
    EXPECT_EQ(F.bq, E.bq);  // biases and norms are not matrices: fp32 in both
    EXPECT_EQ(F.attn_norm, E.attn_norm);
  }
}

TEST(QuantWeights, TinyModelsLoadTheSameMatrices) {
  for (const char* arch : {"llama", "qwen2"}) {
    for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1}) {
      SCOPED_TRACE(std::string(arch) + " " + dtype_info(t).name);
      const auto dir = test::temp_dir("quant-weights");
      write_tiny_model(dir.string(), {.arch = arch, .gguf_dtype = t, .tied_embeddings = t != DType::Q4_1});
      check_file((dir / "tiny.gguf").string());
    }
  }
}

// A float file keeps every matrix on the fp32 path (quantizing would change the model).
TEST(QuantWeights, FloatFileStaysFp32) {
  const auto dir = test::temp_dir("quant-weights-f32");
  write_tiny_model(dir.string(), {.gguf_dtype = DType::F32});
  auto mf = open_model_file((dir / "tiny.gguf").string());
  const ModelConfig cfg = ModelConfig::from_model_file(*mf);
  const ModelWeights w = ModelWeights::load(*mf, cfg, CpuWeights::quantized);
  ASSERT_TRUE(w.quant);
  EXPECT_TRUE(w.quant->output.empty());
  EXPECT_TRUE(w.quant->layers[0].wq.empty());
  EXPECT_FALSE(w.layers[0].wq.empty());
}

TEST(QuantWeights, UnknownModeIsAnError) {
  EXPECT_EQ(test_common::error_of([] { parse_cpu_weights("int4"); }), "unknown CPU weights 'int4' (known: fp32, quantized)");
  // Checked before the model file is opened (this path does not exist).
  EXPECT_EQ(test_common::error_of([] { Engine::load({.model_path = "/nonexistent.gguf", .cpu_weights = "int4"}); }),
            "unknown CPU weights 'int4' (known: fp32, quantized)");
}

std::string default_path() {
  try {
    const std::string p = default_model_path();
    return std::filesystem::exists(p) ? p : "";
  } catch (const Error&) {
    return "";
  }
}

TEST(QuantWeights, DefaultModelLoadsTheSameMatrices) {
  const std::string path = default_path();
  if (path.empty()) GTEST_SKIP() << "default model not in the cache";
  check_file(path);
}

// gemma-3-270m Q4_K_M: Q4_K and Q8_0 kept, Q5_0 and Q6_K re-quantized to Q8_0; the same greedy
// answer as the fp32 path and a perplexity within kPplBound (below).
std::string gemma_path() {
  try {
    return cached_model_path("gemma3-270m").value_or("");
  } catch (const Error&) {
    return "";
  }
}

// scripts/demo.sh's document and question.
std::string demo_document() {
  std::string doc = "Annual report of the northern harbour authority.\n";
  for (int i = 1; i <= 90; ++i) {
    doc += "Section " + std::to_string(i) +
           ". The harbour handled cargo ships, fishing boats and ferries this month. The weather was mild, the "
           "cranes were serviced on schedule, and the pilots reported no incidents in the outer channel.\n";
    if (i == 45) doc += "Important: the access code for the east warehouse is 7 4 1 9 3.\n";
  }
  return doc;
}

std::unique_ptr<Engine> load(const std::string& path, const char* cpu_weights) {
  return Engine::load({.model_path = path, .n_threads = 2, .cpu_weights = cpu_weights});
}

constexpr int kDemoTokens = 24;  // the demo's -n

TEST(QuantWeights, DefaultModelDemoAnswerIsTheSame) {
  const std::string path = default_path();
  if (path.empty()) GTEST_SKIP() << "default model not in the cache";
  auto exact = load(path, "fp32");
  auto fast = load(path, "quantized");
  const Tokenizer& tok = exact->tokenizer();
  const std::string msg = demo_document() + "\n\nWhat is the access code for the east warehouse? Answer with the code only.";
  const std::vector<ChatMessage> chat{{"user", msg}};
  const std::vector<int32_t> prompt = tok.encode(tok.apply_chat_template(chat, true), false, true);
  SamplingParams sp;
  sp.max_tokens = kDemoTokens;
  const GenerateResult a = exact->generate(prompt, sp), b = fast->generate(prompt, sp);
  EXPECT_EQ(a.tokens, b.tokens) << "fp32: '" << a.text << "', quantized: '" << b.text << "'";
  EXPECT_NE(a.text.find("7"), std::string::npos) << a.text;  // the fp32 path answers the question
}

// Perplexity of ordinary prose: 8-bit activations on the file's own weight blocks move it by
// well under 1% on this model (measured 0.1-0.3%: fp32 summation order alone moves it that much, since it flips
// some activation roundings); the bound leaves room for other texts and CPUs.
constexpr double kPplBound = 0.02;

constexpr const char* kProse =
      "The history of the lighthouse begins with fires lit on hilltops to guide ships home. Later, towers of stone "
      "carried lamps fuelled by oil, and lenses invented in the nineteenth century focused their light into beams "
      "that could be seen many miles out at sea. Keepers lived in small cottages beside the towers, trimming wicks, "
      "polishing glass and winding the clockwork that turned the lens through the night. Storms were the hardest "
      "times: spray reached the lantern room, supply boats could not land for weeks, and the keepers kept logs of "
      "every ship that passed. Today most lights are automatic, watched from a distant control room, and many old "
      "cottages have become museums where visitors climb the spiral stairs to look out over the water.";

// ppl(quantized) / ppl(fp32) on kProse.
double perplexity_ratio(const std::string& path) {
  const std::string text = kProse;
  double nll[2];
  int i = 0;
  for (const char* mode : {"fp32", "quantized"}) {
    auto e = load(path, mode);
    const std::vector<int32_t> ids = e->tokenizer().encode(text, e->tokenizer().adds_bos(), false);
    const std::vector<float> lp = e->score(ids);
    EXPECT_GT(lp.size(), size_t(100));
    double s = 0;
    for (float v : lp) s -= v;
    nll[i++] = s / double(lp.size());
  }
  std::printf("[quant weights] %s: perplexity fp32 %.4f, quantized %.4f\n", path.c_str(), std::exp(nll[0]),
              std::exp(nll[1]));
  return std::exp(nll[1] - nll[0]);
}

TEST(QuantWeights, DefaultModelPerplexityWithinBound) {
  const std::string path = default_path();
  if (path.empty()) GTEST_SKIP() << "default model not in the cache";
  EXPECT_LT(std::fabs(perplexity_ratio(path) - 1), kPplBound);
}

TEST(QuantWeights, GemmaMixedTypes) {
  const std::string path = gemma_path();
  if (path.empty()) GTEST_SKIP() << "gemma-3-270m not installed (scripts/fetch-model.sh gemma3-270m)";
  check_file(path, true);
  EXPECT_LT(std::fabs(perplexity_ratio(path) - 1), kPplBound);
  auto exact = load(path, "fp32");
  auto fast = load(path, "quantized");
  const Tokenizer& tok = exact->tokenizer();
  const std::vector<ChatMessage> chat{{"user", "Write one sentence about the sea."}};
  const std::vector<int32_t> prompt = tok.encode(tok.apply_chat_template(chat, true), false, true);
  // The answer's sentence (8 tokens); after it this small model repeats itself from a near-tie,
  // where the two paths part at token 10.
  SamplingParams sp;
  sp.max_tokens = 8;
  EXPECT_EQ(exact->generate(prompt, sp).tokens, fast->generate(prompt, sp).tokens);
}

}  // namespace
}  // namespace longctx

// test_gpu_golden.cpp: the default model (SmolLM2-135M-Instruct Q4_1) on the GPU against the
// golden file of HF transformers (fp32): logits within a bf16 tolerance relative to the logits'
// scale, the argmax at every checked position, and the 32-token greedy continuation of every
// prompt, token for token.
// Tolerance: 8e-2 of the largest |logit| (+0.05). Measured on an H200 (2026-11-22): 0.54-1.28
// absolute on logits of ~15-25, the largest at position 0 of the chat prompt, where the
// residual stream carries very large values (the attention-sink token) and its bf16 rounding
// (8 significant bits) moves the logits most; 3e-2 (test_util.h, enough for random models)
// is exceeded there (1.71x). Greedy output was equal on all six prompts (32/32 tokens).
// Skipped without a usable GPU, without the model (scripts/gpu-model.sh sends it to the device
// in two parts) or without the golden file: tests/data of the source tree the binary was built
// from, or of $LONGCTX_TEST_DATA when set (a binary carried to another machine).
#ifdef LONGCTX_WITH_GPU
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "longctx/engine.h"
#include "test_util.h"
#include "util/error.h"

namespace longctx {
namespace {

constexpr double kGoldenRelTol = 8e-2;  // see the header comment: measured 5.1e-2 worst

std::unique_ptr<Engine> load_default_on_gpu() {
  std::string path;
  try {
    path = default_model_path();
  } catch (const Error&) {
    return nullptr;
  }
  return Engine::load({.model_path = path, .device = "cuda"});
}

// The golden file: under $LONGCTX_TEST_DATA when set, else under the build's tests/data.
std::string golden_path() {
  const char* env = std::getenv("LONGCTX_TEST_DATA");
  return std::string(env && *env ? env : LONGCTX_TEST_DATA) + "/golden/smollm2-135m-q4_1.json";
}

TEST(GpuGolden, DefaultModelLogitsAndGreedyMatchReference) {
  REQUIRE_GPU();
  const std::string path = golden_path();
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << "golden file " << path << " not found (set LONGCTX_TEST_DATA to the tests/data folder)";
  auto eng = load_default_on_gpu();
  if (!eng) GTEST_SKIP() << "default model not installed";
  std::ifstream f(path);
  const auto golden = nlohmann::json::parse(f);
  const auto sample_ids = golden["sample_ids"].get<std::vector<int>>();
  const int V = eng->config().vocab_size;
  for (const auto& p : golden["prompts"]) {
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    const auto logits = eng->logits(ids, int64_t(ids.size()));
    double worst = 0, worst_ratio = 0;
    int argmax_equal = 0, n_pos = 0;
    for (const auto& chk : p["logits"]) {
      const int pos = chk["position"];
      const float* row = logits.data() + int64_t(pos) * V;
      const auto top_ids = chk["top_ids"].get<std::vector<int>>();
      const auto top = chk["top_logits"].get<std::vector<double>>();
      const auto sample = chk["sample_logits"].get<std::vector<double>>();
      double scale = 0;
      for (double v : top) scale = std::max(scale, std::abs(v));
      const double tol = kGoldenRelTol * scale + test::kLogitAbsFloor;
      double d = 0;
      for (size_t i = 0; i < top_ids.size(); ++i) d = std::max(d, std::abs(row[top_ids[i]] - top[i]));
      for (size_t i = 0; i < sample_ids.size(); ++i) d = std::max(d, std::abs(row[sample_ids[i]] - sample[i]));
      EXPECT_LE(d, tol) << p["name"] << " position " << pos;
      worst = std::max(worst, d);
      worst_ratio = std::max(worst_ratio, d / tol);
      const int argmax = int(std::max_element(row, row + V) - row);
      argmax_equal += argmax == top_ids[0];
      ++n_pos;
      if (top.size() > 1 && top[0] - top[1] > 2 * tol) {
        EXPECT_EQ(argmax, top_ids[0]) << p["name"] << " position " << pos;
      }
    }
    const auto want = p["greedy"].get<std::vector<int32_t>>();
    SamplingParams sp;
    sp.max_tokens = int(want.size());
    sp.stop_at_eos = false;
    const auto got = eng->generate(ids, sp).tokens;
    size_t same = 0;
    while (same < got.size() && same < want.size() && got[same] == want[same]) ++same;
    EXPECT_EQ(got, want) << "prompt " << p["name"];
    std::printf("[ gpu golden ] %-8s max|logit diff| %.3f (%.2f of tol), argmax %d/%d, greedy %zu/%zu tokens equal\n",
                p["name"].get<std::string>().c_str(), worst, worst_ratio, argmax_equal, n_pos, same, want.size());
  }
}

}  // namespace
}  // namespace longctx
#endif  // LONGCTX_WITH_GPU

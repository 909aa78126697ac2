// test_infinitehip_engine.cpp: --attn infinitehip through the CPU engine on the default model.
// A prompt short enough that every step is dense under the 3K preset (candidates <= k) gives
// exactly the dense greedy tokens, with pre-RoPE keys (rotated at attention time at their own
// positions) and with rotated keys; a ~980-token prompt with small budgets runs the three pruning
// stages in chunked prefill and the per-stage decode caches end to end, in both key layouts and
// with dense decode ("prefill:" only).
// Run: build/tests/model/test_model --gtest_filter='InfiniteHipEngine*'
#include <gtest/gtest.h>

#include "longctx/engine.h"
#include "model_test_util.h"

namespace longctx {
namespace {

std::unique_ptr<Engine> engine(const std::string& attn) { return test::default_engine(attn, 256); }

std::vector<int32_t> prompt_of(const Engine& eng, int repeats) {
  std::string text = "Notes from the harbour: ";
  for (int r = 0; r < repeats; ++r)
    text += "Ship " + std::to_string(r) + " brought " + std::to_string(r * 7 % 13) + " crates of tea and left at dawn. ";
  text += "Which ship brought the most crates?";
  return eng.tokenizer().encode(text, true, false);
}

TEST(InfiniteHipEngine, ShortPromptGivesTheDenseGreedyTokens) {
  auto dense = engine("dense");
  if (!dense) GTEST_SKIP() << "default model not installed (scripts/bootstrap.sh)";
  const auto prompt = prompt_of(*dense, 20);
  ASSERT_LT(prompt.size() + 24, 256u + 1024 + 2048);
  SamplingParams sp;
  sp.max_tokens = 24;
  const auto want = dense->generate(prompt, sp).tokens;
  EXPECT_EQ(engine("infinitehip")->generate(prompt, sp).tokens, want);
  EXPECT_EQ(engine("infinitehip=rope=off")->generate(prompt, sp).tokens, want);
}

TEST(InfiniteHipEngine, LongPromptRunsThePruningStagesAndDecodeCaches) {
  auto dense = engine("dense");
  if (!dense) GTEST_SKIP() << "default model not installed (scripts/bootstrap.sh)";
  const std::string small = "infinitehip=l_c=64/16/4,k=512/256/128,refresh=8/4/2,n_sink=16,n_stream=128,k_early=256";
  const auto prompt = prompt_of(*dense, 60);
  ASSERT_GT(prompt.size(), 900u);  // candidates past every k: all three stages prune
  SamplingParams sp;
  sp.max_tokens = 12;
  sp.stop_at_eos = false;
  const auto want = dense->generate(prompt, sp).tokens;
  for (const std::string& spec : {small, small + ",rope=off", "prefill:" + small}) {
    const auto got = engine(spec)->generate(prompt, sp).tokens;
    EXPECT_EQ(got.size(), want.size()) << spec;
    int same = 0;
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) same += got[i] == want[i];
    std::printf("%s: %d of %zu greedy tokens equal dense's\n", spec.c_str(), same, want.size());
  }
}

}  // namespace
}  // namespace longctx

// test_infinitehip_engine.cpp: --attn infinitehip through the CPU engine on the default model.
// A prompt short enough that every step is dense under the 3K preset (candidates <= k) gives
// exactly the dense greedy tokens, with pre-RoPE keys (rotated at attention time at their own
// positions) and with rotated keys; on a ~980-token prompt the three pruning stages run in chunked
// prefill and the per-stage decode caches in decode: a mild budget with rotated keys keeps the
// dense greedy tokens (sparse or dense decode), pre-RoPE keys and a small budget run end to end.
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
  const auto prompt = prompt_of(*dense, 60);
  ASSERT_GT(prompt.size(), 950u);  // ~830 candidates in the last blocks: every stage prunes
  SamplingParams sp;
  sp.max_tokens = 8;
  sp.stop_at_eos = false;
  const auto want = dense->generate(prompt, sp).tokens;
  // Each stage drops about 8% of its candidates (13 -> 12 chunks of 64, 48 -> 44 of 16, 176 ->
  // 168 of 4). With rotated keys (true distances) this keeps the dense greedy tokens, sparse decode
  // with its stage caches or dense decode (measured).
  const std::string mild_pre_rope = "infinitehip=l_c=64/16/4,k=768/704/672,refresh=8/4/2,n_sink=16,n_stream=128,k_early=672";
  const std::string mild = mild_pre_rope + ",rope=off";
  for (const std::string& spec : {mild, "prefill:" + mild})
    EXPECT_EQ(engine(spec)->generate(prompt, sp).tokens, want) << spec;
  // Pre-RoPE keys re-number every pruned block's keys (StreamingLLM-style), which moves this
  // model's first token (measured: "\n\n" then the dense answer's words); a small budget (16 + 128
  // + 128 keys per step) runs end to end in both layouts.
  const std::string small = "infinitehip=l_c=64/16/4,k=512/256/128,refresh=8/4/2,n_sink=16,n_stream=128,k_early=256";
  for (const std::string& spec : {mild_pre_rope, small, small + ",rope=off"})
    EXPECT_EQ(engine(spec)->generate(prompt, sp).tokens.size(), want.size()) << spec;
}

}  // namespace
}  // namespace longctx

// test_tokenselect_engine.cpp: TokenSelect through the CPU engine on the default model: a prompt
// that fits the token budget generates exactly dense's greedy tokens (pre-RoPE and rotated keys),
// and a small budget over a longer prompt runs the sparse path end to end (chunked prefill with
// selection, decode with the selection cache) with either key layout.
#include <gtest/gtest.h>

#include "longctx/engine.h"

namespace longctx {
namespace {

std::vector<int32_t> prompt_ids(Engine& e, int repeats) {
  std::string text = "Here is a list of facts about the sea and the sky.";
  for (int i = 0; i < repeats; ++i)
    text += " Fact " + std::to_string(i) + ": the number of the day is " + std::to_string(i * 37 % 101) + ".";
  text += " Question: what is fact 3? Answer:";
  return e.tokenizer().encode(text, true, false);
}

std::vector<int32_t> greedy(const std::string& attn, const std::vector<int32_t>& ids, int64_t chunk = 512) {
  LoadOptions o;  // the default model
  o.attn = attn;
  o.prefill_chunk = chunk;
  auto e = Engine::load(o);
  SamplingParams sp;
  sp.max_tokens = 24;
  sp.stop_at_eos = false;
  return e->generate(ids, sp).tokens;
}

TEST(TokenSelectEngine, FitsBudgetGreedyEqualsDense) {
  auto e = Engine::load({});
  const auto ids = prompt_ids(*e, 40);  // well under the default 2688-token budget
  ASSERT_LT(ids.size() + 24, 2688u);
  const auto dense = greedy("dense", ids);
  EXPECT_EQ(greedy("tokenselect", ids), dense);
  EXPECT_EQ(greedy("tokenselect=keys=rotated", ids), dense);
}

TEST(TokenSelectEngine, SmallBudgetRunsSparseBothLayouts) {
  auto e = Engine::load({});
  const auto ids = prompt_ids(*e, 60);
  const std::string budget = "tokenselect=n_init=16,k=64,n_local=128,chunk=128";
  ASSERT_GT(ids.size(), 16u + 64 + 128 + 200);
  const auto dense = greedy("dense", ids);
  for (const std::string& spec : std::vector<std::string>{budget, budget + ",keys=rotated"}) {
    const auto got = greedy(spec, ids, 300);  // engine chunks of 300 split into method sub-chunks of 128
    EXPECT_EQ(got.size(), dense.size()) << spec;
  }
  // Any theta > 1 never reuses a selection: the same tokens.
  EXPECT_EQ(greedy(budget + ",theta=2", ids, 300), greedy(budget + ",theta=1.5", ids, 300));
}

}  // namespace
}  // namespace longctx

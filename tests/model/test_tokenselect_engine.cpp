// test_tokenselect_engine.cpp: TokenSelect through the CPU engine on the default model: a prompt
// that fits the token budget generates exactly dense's greedy tokens (pre-RoPE and rotated keys),
// and a small budget over a longer prompt runs the sparse path end to end (chunked prefill with
// selection, decode with the selection cache) with either key layout.
#include <gtest/gtest.h>

#include "longctx/engine.h"
#include "model_test_util.h"

namespace longctx {
namespace {

std::vector<int32_t> greedy(const std::string& attn, const std::vector<int32_t>& ids, int64_t chunk = 512) {
  return test::greedy_tokens(attn, ids, chunk, 24);
}

TEST(TokenSelectEngine, FitsBudgetGreedyEqualsDense) {
  auto e = Engine::load({});
  const auto ids = test::facts_prompt(*e, 40);  // well under the default 2688-token budget
  ASSERT_LT(ids.size() + 24, 2688u);
  const auto dense = greedy("dense", ids);
  EXPECT_EQ(greedy("tokenselect", ids), dense);
  EXPECT_EQ(greedy("tokenselect=keys=rotated", ids), dense);
}

TEST(TokenSelectEngine, SmallBudgetRunsSparseBothLayouts) {
  auto e = Engine::load({});
  const auto ids = test::facts_prompt(*e, 60);
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

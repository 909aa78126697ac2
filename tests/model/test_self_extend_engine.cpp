// test_self_extend_engine.cpp: Self-Extend through the CPU engine on the default model (pre-RoPE
// KV cache, chunked prefill, decode): G = 1 and a neighbour window covering the whole prompt are
// plain attention, so greedy tokens equal dense's; a real grouping (G = 4, W = 64 over a prompt
// of several hundred tokens) runs the grouped path for dense and for HiP end to end.
#include <gtest/gtest.h>

#include "longctx/engine.h"
#include "model_test_util.h"

namespace longctx {
namespace {

std::vector<int32_t> greedy(const std::string& attn, const std::vector<int32_t>& ids) {
  return test::greedy_tokens(attn, ids, 200, 16);  // several chunks: the grouped keys of earlier chunks are re-read
}

TEST(SelfExtendEngine, PlainPositionsGreedyEqualsDense) {
  auto e = Engine::load({});
  const auto ids = test::facts_prompt(*e, 40);
  ASSERT_GT(ids.size(), 400u);
  const auto dense = greedy("dense", ids);
  EXPECT_EQ(greedy("dense=self_extend=1:64", ids), dense);
  EXPECT_EQ(greedy("dense=self_extend=4:4096", ids), dense);
}

TEST(SelfExtendEngine, GroupedDenseAndHipRun) {
  auto e = Engine::load({});
  const auto ids = test::facts_prompt(*e, 40);
  for (const char* spec : {"dense=self_extend=4:64", "hip=k=64,window=32,sinks=4,self_extend=4:64"}) {
    const auto got = greedy(spec, ids);
    EXPECT_EQ(got.size(), 16u) << spec;
  }
}

}  // namespace
}  // namespace longctx

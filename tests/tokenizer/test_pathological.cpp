// test_pathological.cpp: very long runs of one character class through every pre-tokenizer
// (regex backtracking, JIT stack and BPE merge loops must stay linear-ish and never fail).
#include <gtest/gtest.h>

#include <chrono>

#include "tokenizer/pretokenizer.h"

namespace longctx {
namespace {

TEST(Pathological, LongRunsSplitQuickly) {
  constexpr size_t kRun = 1 << 20;
  const std::vector<std::string> inputs = {
      std::string(kRun, ' ') + "x", std::string(kRun, '\n') + "x", std::string(kRun, '!'),
      std::string(kRun, '7'),       std::string(kRun, 'a'),       std::string(kRun / 2, '\r') + std::string(kRun / 2, '\n'),
      std::string(kRun, '\xFF'),
  };
  for (const char* name : {"gpt2", "llama3", "qwen2", "smollm"}) {
    auto pre = tok::Pretokenizer::preset(name);
    for (const auto& in : inputs) {
      const auto t0 = std::chrono::steady_clock::now();
      size_t total = 0;
      for (const auto& p : pre->split(in)) total += p.size();
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_EQ(total, in.size()) << name;
      EXPECT_LT(secs, 2.0) << name << " on a run of '" << in[0] << "'";
    }
  }
}

}  // namespace
}  // namespace longctx

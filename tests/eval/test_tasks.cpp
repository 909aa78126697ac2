// test_tasks.cpp: task generation with the fake byte tokenizer: determinism, length budgets,
// answers present in the prompt, needle depth, RNG stability, and the task registry.
#include <gtest/gtest.h>

#include <set>

#include "eval/rng.h"
#include "eval/task.h"
#include "fakes.h"
#include "util/error.h"

using namespace longctx;
using namespace longctx::eval;

namespace {

constexpr int64_t kLength = 4096;

Sample make(const std::string& task, uint64_t seed, int64_t length = kLength, double depth = -1, int index = 0,
            bool chat = true) {
  static evaltest::FakeTokenizer chat_tok(true), plain_tok(false);
  PromptRenderer r(chat ? chat_tok : plain_tok, true);
  TaskContext ctx{r, FitParams{}, nullptr};
  auto t = make_task(task);
  if (t->depth_grid() && depth < 0) depth = 0.5;
  SampleSpec s;
  s.length = length;
  s.budget = length - t->default_max_new_tokens();
  s.depth = depth;
  s.index = index;
  s.seed = sample_seed(seed, task, length, depth, index);
  return t->make(ctx, s);
}

}  // namespace

TEST(Rng, SplitMix64MatchesReferenceValues) {
  // SplitMix64 from seed 0 (the reference sequence): the same on every platform.
  Rng r(0);
  EXPECT_EQ(r.next(), 0xe220a8397b1dcdafull);
  EXPECT_EQ(r.next(), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(r.next(), 0x06c45d188009454full);
  EXPECT_EQ(fnv1a("passkey"), fnv1a("passkey"));
  EXPECT_NE(fnv1a("passkey"), fnv1a("niah"));
  Rng a(7);
  for (int i = 0; i < 1000; ++i) EXPECT_LT(a.below(10), 10u);
  EXPECT_EQ(Rng(3).digits(7).size(), 7u);
}

TEST(Tasks, SameSeedGivesIdenticalPrompts) {
  for (const auto& task : retrieval_task_names()) {
    SCOPED_TRACE(task);
    const Sample a = make(task, 42), b = make(task, 42);
    EXPECT_EQ(a.prompt, b.prompt);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.expected, b.expected);
    EXPECT_EQ(a.id, b.id);
    const Sample c = make(task, 43);
    EXPECT_NE(a.prompt, c.prompt) << "a different seed should change the prompt";
  }
}

TEST(Tasks, PromptsLandWithinToleranceBelowTheBudget) {
  for (const auto& task : retrieval_task_names())
    for (int64_t length : {int64_t(2048), int64_t(8192)}) {
      SCOPED_TRACE(task + " " + std::to_string(length));
      const Sample s = make(task, 1, length);
      const int64_t budget = length - make_task(task)->default_max_new_tokens();
      EXPECT_LE(s.prompt_tokens, budget);
      EXPECT_GE(s.prompt_tokens, budget - length_tolerance(budget, FitParams{}));
      EXPECT_EQ(s.prompt_tokens, int64_t(s.tokens.size()));
    }
}

TEST(Tasks, ExpectedAnswersAreInThePrompt) {
  for (const auto& task : retrieval_task_names()) {
    SCOPED_TRACE(task);
    const Sample s = make(task, 5);
    ASSERT_FALSE(s.expected.empty());
    for (const auto& e : s.expected) EXPECT_NE(s.prompt.find(e), std::string::npos) << e;
  }
}

TEST(Tasks, ChatTemplateIsUsedAndPlainPromptIsTheFallback) {
  const Sample chat = make("passkey", 9, kLength, 0.5, 0, true);
  EXPECT_EQ(chat.prompt.rfind("<|user|>\n", 0), 0u);
  EXPECT_NE(chat.prompt.find("<|assistant|>\nThe pass key is"), std::string::npos);
  const Sample plain = make("passkey", 9, kLength, 0.5, 0, false);
  EXPECT_EQ(plain.prompt.rfind("There is an important info", 0), 0u);
  EXPECT_TRUE(plain.prompt.ends_with("What is the pass key? The pass key is"));
}

TEST(Tasks, PasskeyNeedleSitsAtItsDepth) {
  for (double depth : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    const Sample s = make("passkey", 11, 8192, depth);
    const size_t at = s.prompt.find("The pass key is " + s.expected[0]);
    ASSERT_NE(at, std::string::npos);
    const size_t start = s.prompt.find("\n\n") + 2, end = s.prompt.rfind("\n\nWhat is the pass key?");
    const double rel = double(at - start) / double(end - start);
    EXPECT_NEAR(rel, depth, 0.03) << "depth " << depth;
    EXPECT_GE(s.expected[0].size(), 5u);
    EXPECT_LE(s.expected[0].size(), 7u);
  }
}

TEST(Tasks, RulerVariantsHaveTheirNeedleCounts) {
  auto count = [](const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
    return n;
  };
  const std::string needle = "One of the special magic numbers for ";
  EXPECT_EQ(count(make("niah_single", 3).prompt, needle), 1u);
  EXPECT_EQ(count(make("niah_multikey", 3).prompt, needle), 4u);
  EXPECT_EQ(make("niah_multikey", 3).expected.size(), 1u);
  EXPECT_EQ(count(make("niah_multivalue", 3).prompt, needle), 4u);
  EXPECT_EQ(make("niah_multivalue", 3).expected.size(), 4u);
  EXPECT_EQ(make("niah_multiquery", 3).expected.size(), 4u);
  const Sample vt = make("vt", 3);
  EXPECT_EQ(vt.expected.size(), 5u);
  EXPECT_EQ(count(vt.prompt, "VAR "), 9u);  // 1 value + 4 hops ("VAR X = VAR Y" counts twice)
  EXPECT_EQ(make("cwe", 3).expected.size(), 10u);
  EXPECT_EQ(make("fwe", 3).expected.size(), 3u);
}

TEST(Tasks, CommonAndFrequentWordsAreReallyTheMostFrequent) {
  auto count = [](const std::string& s, const std::string& w) {
    size_t n = 0;
    for (size_t p = s.find(" " + w + " "); p != std::string::npos; p = s.find(" " + w + " ", p + 1)) ++n;
    return n;
  };
  const Sample cwe = make("cwe", 8, 8192);
  for (const auto& w : cwe.expected) EXPECT_GE(count(cwe.prompt + " ", w), 5u) << w;
  const Sample fwe = make("fwe", 8, 8192);
  const size_t c1 = count(fwe.prompt, fwe.expected[0]), c2 = count(fwe.prompt, fwe.expected[1]),
               c3 = count(fwe.prompt, fwe.expected[2]);
  EXPECT_GT(c1, c2);
  EXPECT_GT(c2, c3);
  EXPECT_GT(c3, 2u);
}

TEST(Tasks, SampleSeedsAreIndependentOfTheOtherCells) {
  EXPECT_EQ(sample_seed(1, "passkey", 4096, 0.5, 2), sample_seed(1, "passkey", 4096, 0.5, 2));
  std::set<uint64_t> seeds;
  for (int64_t L : {2048, 4096})
    for (double d : {-1.0, 0.0, 0.5})
      for (int i = 0; i < 3; ++i) seeds.insert(sample_seed(1, "passkey", L, d, i));
  EXPECT_EQ(seeds.size(), 18u);
  EXPECT_EQ(sample_id("passkey", 4096, 0.25, 3), "passkey/L4096/d25/s3");
  EXPECT_EQ(sample_id("vt", 2048, -1, 0), "vt/L2048/s0");
}

TEST(Tasks, BudgetTooSmallSaysSo) {
  try {
    make("passkey", 1, 128);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than the budget"), std::string::npos) << e.what();
  }
}

TEST(Tasks, RegistryNamesAndErrors) {
  EXPECT_EQ(expand_task("ruler").size(), 7u);
  EXPECT_EQ(expand_task("vt"), std::vector<std::string>{"vt"});
  try {
    expand_task("xyz");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("unknown task \"xyz\""), std::string::npos) << m;
    for (const char* n : {"passkey", "niah", "ruler", "niah_multikey", "cwe", "fwe", "vt", "ppl", "attention"})
      EXPECT_NE(m.find(n), std::string::npos) << n;
  }
}

TEST(Tasks, BookHaystackUsesTheTextLines) {
  auto book = BookText::from_string("First line of the book.\nSecond line here.\n\nThird, after a blank.\n", "book");
  ASSERT_EQ(book->units.size(), 3u);
  EXPECT_EQ(book->units[1], "Second line here.\n\n");
  evaltest::FakeTokenizer tok;
  PromptRenderer r(tok, true);
  TaskContext ctx{r, FitParams{}, book};
  SampleSpec s;
  s.length = s.budget = 2048;
  s.depth = 0.5;
  s.seed = 3;
  const Sample smp = make_task("niah")->make(ctx, s);
  EXPECT_NE(smp.prompt.find("Second line here."), std::string::npos);
  EXPECT_EQ(smp.prompt.find("Nobody expected"), std::string::npos);  // no essay sentences
}

// test_real_tokenizer.cpp: prompts fit their budgets in tokens of the default model's own
// tokenizer (SmolLM2, chat template). Skipped when the model file or the tokenizer library is
// not available.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "eval/task.h"

#ifdef LONGCTX_EVAL_HAVE_TOKENIZER
#include "loader/model_file.h"
#include "tokenizer/tokenizer.h"
#endif

using namespace longctx;
using namespace longctx::eval;

TEST(RealTokenizer, PromptsFitWithinToleranceBelowTheBudget) {
#ifndef LONGCTX_EVAL_HAVE_TOKENIZER
  GTEST_SKIP() << "tokenizer/loader libraries not built";
#else
  const char* home = std::getenv("HOME");
  const std::string path = std::string(home ? home : "") + "/.cache/longctx/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no default model at " << path;
  std::unique_ptr<ModelFile> mf;
  std::unique_ptr<Tokenizer> tok;
  try {
    mf = open_model_file(path);
    tok = Tokenizer::from_model_file(*mf);
  } catch (const std::exception& e) {
    GTEST_SKIP() << "tokenizer not usable yet: " << e.what();
  }
  PromptRenderer r(*tok, true);
  EXPECT_TRUE(r.has_chat_template());
  TaskContext ctx{r, FitParams{}, nullptr};
  for (const auto& name : retrieval_task_names()) {
    auto task = make_task(name);
    SampleSpec s;
    s.length = 4096;
    s.budget = s.length - task->default_max_new_tokens();
    s.depth = task->depth_grid() ? 0.5 : -1;
    s.seed = sample_seed(42, name, s.length, s.depth, 0);
    const Sample a = task->make(ctx, s), b = task->make(ctx, s);
    SCOPED_TRACE(name);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_LE(a.prompt_tokens, s.budget);
    EXPECT_GE(a.prompt_tokens, s.budget - length_tolerance(s.budget, FitParams{}));
    EXPECT_EQ(int64_t(tok->encode(a.prompt, tok->adds_bos(), true).size()), a.prompt_tokens);
    for (const auto& e : a.expected) EXPECT_NE(a.prompt.find(e), std::string::npos);
  }
#endif
}

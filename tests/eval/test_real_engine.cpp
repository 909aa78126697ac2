// test_real_engine.cpp: `longctx eval passkey` end to end on the real engine and the default
// model (CPU, one 1K-token sample, a few seconds): the plumbing and the engine together must find
// the pass key. Skipped when the runtime is not built or the default model is not in the cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "eval/eval_cli.h"

using namespace longctx;

TEST(RealEngine, PasskeyAt1KFindsTheKey) {
#ifndef LONGCTX_EVAL_HAVE_RUNTIME
  GTEST_SKIP() << "runtime not built";
#else
  if (!std::filesystem::exists(default_model_path())) GTEST_SKIP() << "no default model at " << default_model_path();
  const auto json = (std::filesystem::temp_directory_path() / "longctx_eval_real_engine.json").string();
  CLI::App app{"test"};
  register_eval_command(app);
  // Plain prompt: SmolLM2-135M answers the chat-templated passkey prompt poorly (see docs/evaluation.md).
  const char* argv[] = {"longctx", "eval", "passkey", "--lengths", "1k", "--samples", "1", "--depths", "0.5",
                        "--no-chat", "--quiet", "--json", json.c_str()};
  testing::internal::CaptureStdout();
  app.parse(int(std::size(argv)), argv);
  testing::internal::GetCapturedStdout();
  std::ifstream f(json);
  const auto doc = nlohmann::json::parse(f);
  ASSERT_EQ(doc["samples"].size(), 1u);
  EXPECT_EQ(doc["samples"][0]["correct"], true) << doc["samples"][0].dump();
  EXPECT_LE(doc["samples"][0]["prompt_tokens"].get<int64_t>(), 1024);
#endif
}

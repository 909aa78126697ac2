// test_default_model.cpp: opens the default model (SmolLM2-135M-Instruct Q4_1) if it is in the
// model cache (scripts/fetch-model.sh puts it there); skipped otherwise.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "loader/dequant.h"
#include "loader/gguf_reader.h"
#include "loader/model_file.h"

namespace longctx {
namespace {

std::string default_model_path() {
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/longctx/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

TEST(DefaultModel, OpensAndHasLlamaShapes) {
  const std::string path = default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "default model not found at " << path;
  auto mf = open_model_file(path);
  EXPECT_EQ(mf->format(), "gguf");
  const auto& meta = mf->metadata();
  EXPECT_EQ(meta.at("general.architecture").get<std::string>(), "llama");
  EXPECT_EQ(meta.at("llama.block_count").get<int64_t>(), 30);
  EXPECT_EQ(meta.at("tokenizer.ggml.tokens").size(), 49152u);
  const TensorView& emb = mf->get("token_embd.weight");
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{49152, 576}));
  int blocks = 0;
  for (int i = 0; i < 64; ++i)
    if (mf->find("blk." + std::to_string(i) + ".attn_q.weight")) ++blocks;
  EXPECT_EQ(blocks, 30);

  // Every tensor dequantizes to finite values, fast.
  const auto t0 = std::chrono::steady_clock::now();
  size_t total = 0;
  for (const auto& t : mf->tensors()) {
    const auto v = dequantize_tensor(t);
    total += v.size();
    for (size_t i = 0; i < v.size(); i += 97) ASSERT_TRUE(std::isfinite(v[i])) << t.name;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(total, 100'000'000u);
  RecordProperty("dequant_seconds", std::to_string(s));
  std::printf("dequantized %zu elements of %s in %.3f s\n", total, path.c_str(), s);
}

}  // namespace
}  // namespace longctx

// test_hf_spm.cpp: SentencePiece-style tokenizer.json (Llama-2 normalizer style and Metaspace
// style) against HF tokenizers' ids (golden: tests/data/tokenizer/hf_spm_tiny.json, made from the
// spm_tiny SentencePiece model).
#include <gtest/gtest.h>

#include <chrono>

#include "model_paths.h"
#include "util/error.h"

namespace longctx {
namespace {

using nlohmann::json;

TEST(HfSpm, MatchesTokenizersLibrary) {
  const json g = testing::load_json(testing::golden_path("hf_spm_tiny.json"));
  for (const char* style : {"llama2", "metaspace"}) {
    const json& e = g[style];
    auto t = Tokenizer::from_hf_json(e["tokenizer"], e["tokenizer_config"]);
    EXPECT_EQ(t->kind(), "spm");
    EXPECT_TRUE(t->adds_bos());
    EXPECT_EQ(t->token_bytes(t->bos_id()), "<s>");
    for (const auto& c : e["cases"]) {
      const std::string text = c["text"].get<std::string>();
      const auto ids = c["ids_special"].get<std::vector<int32_t>>();
      EXPECT_EQ(t->encode(text, false, true), ids) << style << ": " << text;
      EXPECT_EQ(t->encode(text, false, false), c["ids_plain"].get<std::vector<int32_t>>()) << style << ": " << text;
      EXPECT_EQ(t->decode(ids), c["decoded"].get<std::string>()) << style << ": " << text;
    }
  }
}

TEST(HfSpm, Llama2StyleAgreesWithSentencePiece) {
  // The Llama-2-style conversion encodes plain text exactly like sentencepiece itself.
  const json g = testing::load_json(testing::golden_path("hf_spm_tiny.json"));
  auto t = Tokenizer::from_hf_json(g["llama2"]["tokenizer"], g["llama2"]["tokenizer_config"]);
  for (const auto& c : g["llama2"]["cases"]) {
    EXPECT_EQ(t->encode(c["text"].get<std::string>(), false, false), c["sentencepiece"].get<std::vector<int32_t>>());
  }
}

TEST(HfSpm, LongTextIsFast) {
  // Without a pre-tokenizer the whole text is one BPE word: the merge loop must stay O(n log n).
  const json g = testing::load_json(testing::golden_path("hf_spm_tiny.json"));
  auto t = Tokenizer::from_hf_json(g["llama2"]["tokenizer"], g["llama2"]["tokenizer_config"]);
  std::string text;
  while (text.size() < 400000) text += "the quick brown fox jumps over the lazy dog, hello world 2024. ";
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = t->encode(text, false, false);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 2.0) << ids.size() << " tokens";
  EXPECT_EQ(t->decode(ids), text);
}

TEST(HfSpm, BadNormalizerIsAnError) {
  const json g = testing::load_json(testing::golden_path("hf_spm_tiny.json"));
  json tj = g["llama2"]["tokenizer"];
  tj["normalizer"]["normalizers"].push_back(json::parse(R"({"type": "Lowercase"})"));
  EXPECT_THROW(Tokenizer::from_hf_json(tj, json::object()), Error);
}

}  // namespace
}  // namespace longctx

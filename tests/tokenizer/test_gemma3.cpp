// test_gemma3.cpp: the Gemma 3 tokenizer (SentencePiece BPE with byte fallback, no dummy prefix,
// user-defined whitespace-run tokens) from the gemma-3-270m GGUF gives the same ids as
// transformers' tokenizer built from that GGUF, on tricky strings; decode round-trips.
// Golden: tests/data/tokenizer/gemma3_golden.json (tools/make_gemma_golden.py --tokenizer-only).
// Skipped when the model is not installed (scripts/fetch-model.sh gemma3-270m).
#include <gtest/gtest.h>

#include "model_paths.h"

namespace longctx {
namespace {

TEST(Gemma3Tokenizer, MatchesTransformers) {
  std::string why;
  auto tok = testing::load_smollm2(&why, testing::kGemma3File);
  if (!tok) GTEST_SKIP() << why;
  EXPECT_TRUE(tok->adds_bos());
  const auto g = testing::load_json(testing::golden_path("gemma3_golden.json"));
  int checked = 0;
  for (const auto& c : g["cases"]) {
    const std::string text = c["text"].get<std::string>();
    // transformers splits special tokens out of any text, so parse_special is on here.
    EXPECT_EQ(tok->encode(text, false, true), c["ids"].get<std::vector<int32_t>>()) << text;
    EXPECT_EQ(tok->encode(text, true, true), c["ids_bos"].get<std::vector<int32_t>>()) << text;
    const auto plain = tok->encode(text, false, false);
    EXPECT_EQ(tok->decode(plain), text) << "round trip";
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

}  // namespace
}  // namespace longctx

// test_spm.cpp: SentencePiece-style BPE (tokenizer.ggml.model "llama"): a hand-built vocabulary
// with a known answer, and a small model trained with the `sentencepiece` library
// (golden: tests/data/tokenizer/spm_tiny.json).
#include <gtest/gtest.h>

#include <cstdio>

#include "model_paths.h"
#include "util/error.h"

namespace longctx {
namespace {

using nlohmann::json;

// <unk> <s> </s>, 256 byte tokens, then scored pieces.
struct HandVocab {
  json meta;
  std::map<std::string, int32_t> id;
  HandVocab() {
    json tokens = json::array(), scores = json::array(), types = json::array();
    auto add = [&](const std::string& t, float score, int type) {
      id[t] = int32_t(tokens.size());
      tokens.push_back(t);
      scores.push_back(score);
      types.push_back(type);
    };
    add("<unk>", 0, 2);
    add("<s>", 0, 3);
    add("</s>", 0, 3);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      add(name, 0, 6);
    }
    const std::string sp = "\xE2\x96\x81";  // ▁
    for (const char* c : {"h", "e", "l", "o", "w", "r", "d"}) add(c, -10, 1);
    add(sp, -10, 1);
    add("he", -1, 1);
    add("ll", -2, 1);
    add("llo", -2.5, 1);
    add("hell", -3, 1);
    add("hello", -4, 1);
    add("or", -6, 1);
    add("wor", -7, 1);
    meta = {{"tokenizer.ggml.model", "llama"},   {"tokenizer.ggml.tokens", tokens},
            {"tokenizer.ggml.scores", scores},   {"tokenizer.ggml.token_type", types},
            {"tokenizer.ggml.bos_token_id", 1},  {"tokenizer.ggml.eos_token_id", 2},
            {"tokenizer.ggml.unknown_token_id", 0}};
  }
};

TEST(Spm, HandBuiltVocab) {
  HandVocab v;
  auto t = Tokenizer::from_gguf_metadata(v.meta);
  EXPECT_EQ(t->kind(), "spm");
  EXPECT_TRUE(t->adds_bos());
  const std::string sp = "\xE2\x96\x81";
  // "▁hello▁world": he(-1), ll(-2), then llo(-2.5) beats hell(-3), then hello; or, wor.
  const std::vector<int32_t> want = {v.id[sp], v.id["hello"], v.id[sp], v.id["wor"], v.id["l"], v.id["d"]};
  EXPECT_EQ(t->encode("hello world", false, false), want);
  EXPECT_EQ(t->decode(want), "hello world");
  // Unknown characters fall back to bytes: "é" = C3 A9 -> <0xC3> <0xA9> (ids 3 + byte).
  const std::vector<int32_t> e = {v.id[sp], 3 + 0xC3, 3 + 0xA9};
  EXPECT_EQ(t->encode("\xC3\xA9", false, false), e);
  EXPECT_EQ(t->decode(e), "\xC3\xA9");
  EXPECT_EQ(t->token_bytes(3 + 0x41), "A");
  // BOS, and a special token in the text (the dummy prefix comes back after it, as llama.cpp).
  const std::vector<int32_t> s = {1, v.id[sp], v.id["he"], 2, v.id[sp], v.id["he"]};
  EXPECT_EQ(t->encode("he</s>he", true, true), s);
  EXPECT_EQ(t->decode(s, true), "he he");
  EXPECT_TRUE(t->is_end_of_generation(2));
}

TEST(Spm, NoSpacePrefixOption) {
  HandVocab v;
  v.meta["tokenizer.ggml.add_space_prefix"] = false;
  auto t = Tokenizer::from_gguf_metadata(v.meta);
  EXPECT_EQ(t->encode("hello", false, false), (std::vector<int32_t>{v.id["hello"]}));
  EXPECT_EQ(t->decode(t->encode(" hello", false, false)), " hello");
}

TEST(Spm, MissingScoresIsAnError) {
  HandVocab v;
  v.meta.erase("tokenizer.ggml.scores");
  EXPECT_THROW(Tokenizer::from_gguf_metadata(v.meta), Error);
}

TEST(Spm, MatchesSentencePieceLibrary) {
  const json g = testing::load_json(testing::golden_path("spm_tiny.json"));
  auto t = Tokenizer::from_gguf_metadata(g["metadata"]);
  EXPECT_EQ(t->kind(), "spm");
  for (const auto& c : g["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(t->encode(text, false, false), ids) << text;
    EXPECT_EQ(t->decode(ids), c["decoded"].get<std::string>()) << text;
  }
  // Byte fallback makes any input round-trip, invalid UTF-8 included.
  std::string all;
  for (int b = 1; b < 256; ++b) all += char(b);
  EXPECT_EQ(t->decode(t->encode("x" + all, false, false)), "x" + all);
  EXPECT_EQ(t->apply_chat_template(std::vector<ChatMessage>{{"user", "hi"}}, true), "<s>[INST] hi [/INST]");
}

}  // namespace
}  // namespace longctx

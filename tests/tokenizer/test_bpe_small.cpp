// test_bpe_small.cpp: byte-level BPE on a tiny hand-built vocabulary where the answer is known.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/byte_unicode.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace longctx {
namespace {

using nlohmann::json;

// 256 single-byte tokens (mapped text) + a few merges + two control tokens.
json tiny_gguf(const std::string& pre = "gpt2") {
  json tokens = json::array(), types = json::array();
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(tok::bytes_to_mapped(std::string(1, char(b))));
    types.push_back(1);
  }
  for (const char* t : {"he", "ll", "hell", "hello", "\xC4\xA0w", "\xC4\xA0wo"}) {  // Ġw, Ġwo
    tokens.push_back(t);
    types.push_back(1);
  }
  tokens.push_back("<|im_start|>");
  types.push_back(3);
  tokens.push_back("<|im_end|>");
  types.push_back(3);
  return {
      {"tokenizer.ggml.model", "gpt2"},
      {"tokenizer.ggml.pre", pre},
      {"tokenizer.ggml.tokens", tokens},
      {"tokenizer.ggml.token_type", types},
      {"tokenizer.ggml.merges", {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "\xC4\xA0w o"}},
      {"tokenizer.ggml.bos_token_id", 262},
      {"tokenizer.ggml.eos_token_id", 263},
  };
}

TEST(BpeSmall, MergesByRank) {
  auto t = Tokenizer::from_gguf_metadata(tiny_gguf());
  EXPECT_EQ(t->kind(), "bpe:gpt2");
  EXPECT_EQ(t->vocab_size(), 264);
  // "hello" -> he, ll -> hell -> hello; " world" -> Ġwo + r l d.
  std::vector<int32_t> want = {259, 261, 'r', 'l', 'd'};
  EXPECT_EQ(t->encode("hello world", false, false), want);
  EXPECT_EQ(t->decode(want), "hello world");
}

TEST(BpeSmall, SpecialTokens) {
  auto t = Tokenizer::from_gguf_metadata(tiny_gguf());
  auto with = t->encode("<|im_start|>hello<|im_end|>", false, true);
  EXPECT_EQ(with, (std::vector<int32_t>{262, 259, 263}));
  auto without = t->encode("<|im_start|>", false, false);
  EXPECT_EQ(without.size(), 12u);  // one token per byte ("<", "|", ... merge nothing)
  EXPECT_EQ(t->decode(with), "<|im_start|>hello<|im_end|>");
  EXPECT_EQ(t->decode(with, true), "hello");
  EXPECT_TRUE(t->is_end_of_generation(263));
  EXPECT_FALSE(t->is_end_of_generation(259));
  auto bos = t->encode("hello", true, false);
  EXPECT_EQ(bos, (std::vector<int32_t>{262, 259}));
}

TEST(BpeSmall, AnyBytesRoundTrip) {
  auto t = Tokenizer::from_gguf_metadata(tiny_gguf());
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  all += "\xFF\xFE\xC3 \xE2\x82 hello \xF0\x9F\x98";
  EXPECT_EQ(t->decode(t->encode(all, false, false)), all);
  EXPECT_EQ(t->decode(t->encode(all, false, true)), all);
}

TEST(BpeSmall, Errors) {
  json m = tiny_gguf();
  m["tokenizer.ggml.model"] = "xyz";
  try {
    Tokenizer::from_gguf_metadata(m);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown tokenizer model \"xyz\""), std::string::npos) << e.what();
  }
  m = tiny_gguf();
  m["tokenizer.ggml.tokens"] = json::array();
  m.erase("tokenizer.ggml.token_type");
  EXPECT_THROW(Tokenizer::from_gguf_metadata(m), Error);
  m = tiny_gguf();
  m.erase("tokenizer.ggml.merges");
  EXPECT_THROW(Tokenizer::from_gguf_metadata(m), Error);
  m = tiny_gguf();
  m["tokenizer.ggml.pre"] = "nope";
  EXPECT_THROW(Tokenizer::from_gguf_metadata(m), Error);
  m = tiny_gguf();
  m["tokenizer.ggml.bos_token_id"] = 99999;
  EXPECT_THROW(Tokenizer::from_gguf_metadata(m), Error);

  auto t = Tokenizer::from_gguf_metadata(tiny_gguf());
  std::vector<int32_t> bad = {1, 99999};
  try {
    t->decode(bad);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad token id 99999 of vocab 264"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t->token_bytes(-1), Error);
  EXPECT_THROW(t->apply_chat_template({}, true), Error);  // no template
}

}  // namespace
}  // namespace longctx

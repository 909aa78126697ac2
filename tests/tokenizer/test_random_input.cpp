// test_random_input.cpp: random byte strings and random mixes of valid text, special-token text
// and invalid UTF-8 through every tokenizer kind: nothing throws or crashes, ids are in range,
// and decode(encode(x)) == x wherever the vocabulary can represent every byte.
#include <gtest/gtest.h>

#include <random>

#include "model_paths.h"
#include "tokenizer/unicode_nfc.h"

namespace longctx {
namespace {

using nlohmann::json;

constexpr int kIterations = 300;
constexpr size_t kMaxLen = 200;

std::string random_input(std::mt19937& rng) {
  static const std::vector<std::string> atoms = {
      "a", "Hello", " ", "  ", "\n", "\r\n", "\t", "123", "4", "'s", "'LL", "é", "e\xCC\x81", "中文", "😀",
      "<|im_start|>", "<|im_end|>", "<|eot_id|>", "<s>", "</s>", "<custom_tool>", "<|", "|>", "\xFF",
      "\xC3", "\xE2\x82", "\xF0\x9F\x98", "\xED\xA0\x80", "\xC0\xAF", "\x00", "\x7F", "\xC2\x85", "\xE3\x80\x80"};
  std::string s;
  std::uniform_int_distribution<int> n_atoms(0, 40), pick(0, int(atoms.size()) - 1), byte(0, 255), coin(0, 3);
  for (int i = n_atoms(rng); i > 0 && s.size() < kMaxLen; --i) {
    if (coin(rng) == 0) {
      s += char(byte(rng));
    } else {
      s += atoms[size_t(pick(rng))];
    }
  }
  return s;
}

// exact_round_trip: decode(encode(x)) == x (after NFC when nfc is set).
void check(const Tokenizer& t, bool exact_round_trip, uint32_t seed, bool nfc = false) {
  std::mt19937 rng(seed);
  for (int i = 0; i < kIterations; ++i) {
    const std::string s = random_input(rng);
    for (bool special : {false, true}) {
      const auto ids = t.encode(s, true, special);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t.vocab_size()) << id;
      const std::string back = t.decode(ids, false);
      (void)t.decode(ids, true);
      if (exact_round_trip) {
        std::string want = nfc ? tok::to_nfc(s) : s;
        if (t.adds_bos() && t.bos_id() >= 0) want = t.token_bytes(t.bos_id()) + want;
        EXPECT_EQ(back, want) << t.kind() << (special ? " special" : " plain");
      }
    }
  }
}

TEST(RandomInput, HfByteLevel) {
  const json g = testing::load_json(testing::golden_path("hf_bpe_tiny.json"));
  for (const char* name : {"llama3", "qwen2"}) {
    auto t = Tokenizer::from_hf_json(g[name]["tokenizer"], g[name]["tokenizer_config"]);
    check(*t, /*exact_round_trip=*/true, 1234, /*nfc=*/std::string(name) == "qwen2");
  }
}

TEST(RandomInput, SentencePiece) {
  const json g = testing::load_json(testing::golden_path("spm_tiny.json"));
  auto t = Tokenizer::from_gguf_metadata(g["metadata"]);
  // The dummy prefix makes decode(" x") == "x"-style differences; just require no failure.
  check(*t, /*exact_round_trip=*/false, 99);
}

TEST(RandomInput, HfSentencePiece) {
  const json g = testing::load_json(testing::golden_path("hf_spm_tiny.json"));
  for (const char* style : {"llama2", "metaspace"}) {
    auto t = Tokenizer::from_hf_json(g[style]["tokenizer"], g[style]["tokenizer_config"]);
    check(*t, /*exact_round_trip=*/false, 4321);
  }
}

TEST(RandomInput, SmolLM2) {
  std::string why;
  auto t = testing::load_smollm2(&why);
  if (!t) GTEST_SKIP() << why;
  check(*t, /*exact_round_trip=*/false, 7);  // the vocabulary lacks a few bytes (0x00, 0xFF, ...)
}

}  // namespace
}  // namespace longctx

// test_pretokenizer.cpp: the PCRE2 pre-tokenizer splits match Python `regex` for the GPT-2,
// Llama-3 and Qwen2 patterns (golden: tests/data/tokenizer/pretok_splits.json).
#include <gtest/gtest.h>

#include "model_paths.h"
#include "tokenizer/pretokenizer.h"
#include "util/error.h"

namespace longctx {
namespace {

using nlohmann::json;

TEST(Pretokenizer, PatternsMatchGolden) {
  const json g = testing::load_json(testing::golden_path("pretok_splits.json"));
  EXPECT_EQ(g["patterns"]["gpt2"].get<std::string>(), tok::kGpt2Pattern);
  EXPECT_EQ(g["patterns"]["llama3"].get<std::string>(), tok::kLlama3Pattern);
  EXPECT_EQ(g["patterns"]["qwen2"].get<std::string>(), tok::kQwen2Pattern);
}

TEST(Pretokenizer, SplitsMatchPythonRegex) {
  const json g = testing::load_json(testing::golden_path("pretok_splits.json"));
  int checked = 0;
  for (const char* name : {"gpt2", "llama3", "qwen2"}) {
    auto pre = tok::Pretokenizer::preset(name);
    for (const auto& c : g["cases"]) {
      const std::string text = c["text"].get<std::string>();
      const auto want = c[name].get<std::vector<std::string>>();
      EXPECT_EQ(pre->split(text), want) << name << " on \"" << text << "\"";
      ++checked;
    }
  }
  EXPECT_GT(checked, 90);
}

TEST(Pretokenizer, SmolLMSplitsDigitsFirst) {
  auto pre = tok::Pretokenizer::preset("smollm");
  EXPECT_EQ(pre->split("ab 123 x"), (std::vector<std::string>{"ab", " ", "1", "2", "3", " x"}));
}

TEST(Pretokenizer, InvalidUtf8StaysCovered) {
  // Invalid bytes never match the regex but must not be lost.
  const std::string text = "ok \xFF\xFE bad \xC3 end\xE2\x82";
  for (const char* name : {"gpt2", "llama3", "qwen2", "smollm"}) {
    std::string joined;
    for (const auto& p : tok::Pretokenizer::preset(name)->split(text)) joined += p;
    EXPECT_EQ(joined, text) << name;
  }
}

TEST(Pretokenizer, HfSplitBehaviors) {
  using tok::SplitBehavior;
  auto run = [](SplitBehavior b, bool invert) {
    tok::Pretokenizer p;
    p.add_split("-", b, invert);
    return p.split("the-final--countdown");
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(run(SplitBehavior::Removed, false), (V{"the", "final", "countdown"}));
  EXPECT_EQ(run(SplitBehavior::Isolated, false), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(run(SplitBehavior::MergedWithPrevious, false), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(run(SplitBehavior::MergedWithNext, false), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(run(SplitBehavior::Contiguous, false), (V{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(run(SplitBehavior::Removed, true), (V{"-", "-", "-"}));
}

TEST(Pretokenizer, HfJsonPipeline) {
  const json j = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Digits", "individual_digits": true},
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}]})");
  auto p = tok::Pretokenizer::from_hf_json(j);
  // As HF tokenizers: the prefix space goes on every piece the Digits step produced.
  EXPECT_EQ(p->split("a12"), (std::vector<std::string>{" a", " 1", " 2"}));
  EXPECT_THROW(tok::Pretokenizer::from_hf_json(json::parse(R"({"type": "Metaspace"})")), Error);
  EXPECT_THROW(tok::Pretokenizer::preset("nope"), Error);
  EXPECT_THROW(tok::RegexSplitter("(unclosed"), Error);
}

}  // namespace
}  // namespace longctx

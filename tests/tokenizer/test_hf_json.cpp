// test_hf_json.cpp: Tokenizer::from_hf_json on small byte-level BPE tokenizer.json files trained
// with HF `tokenizers` (Llama-3-style and Qwen2-style Split pre-tokenizers), against that
// library's ids (golden: tests/data/tokenizer/hf_bpe_tiny.json).
#include <gtest/gtest.h>

#include "model_paths.h"
#include "tokenizer/unicode_nfc.h"
#include "util/error.h"

namespace longctx {
namespace {

using nlohmann::json;

TEST(HfJson, MatchesTokenizersLibrary) {
  const json g = testing::load_json(testing::golden_path("hf_bpe_tiny.json"));
  for (const char* name : {"llama3", "qwen2"}) {
    const json& e = g[name];
    auto t = Tokenizer::from_hf_json(e["tokenizer"], e["tokenizer_config"]);
    EXPECT_EQ(t->kind(), std::string("bpe:") + name);
    for (const auto& c : e["cases"]) {
      const std::string text = c["text"].get<std::string>();
      EXPECT_EQ(t->encode(text, false, true), c["ids_special"].get<std::vector<int32_t>>()) << name << ": " << text;
      EXPECT_EQ(t->encode(text, false, false), c["ids_plain"].get<std::vector<int32_t>>()) << name << ": " << text;
      // The qwen2-style tokenizer normalizes to NFC (as Qwen2's tokenizer.json does).
      const std::string want = std::string(name) == "qwen2" ? tok::to_nfc(text) : text;
      EXPECT_EQ(t->decode(t->encode(text, false, true)), want) << name;
    }
  }
}

TEST(HfJson, SpecialIdsAndTemplates) {
  const json g = testing::load_json(testing::golden_path("hf_bpe_tiny.json"));
  auto llama = Tokenizer::from_hf_json(g["llama3"]["tokenizer"], g["llama3"]["tokenizer_config"]);
  EXPECT_TRUE(llama->adds_bos());
  ASSERT_GE(llama->bos_id(), 0);
  EXPECT_EQ(llama->token_bytes(llama->bos_id()), "<|begin_of_text|>");
  EXPECT_EQ(llama->token_bytes(llama->eos_id()), "<|eot_id|>");
  EXPECT_TRUE(llama->is_end_of_generation(llama->eos_id()));
  const std::vector<ChatMessage> msgs = {{"user", " Hi "}};
  EXPECT_EQ(llama->apply_chat_template(msgs, true),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  const auto ids = llama->encode("hi", true, true);
  EXPECT_EQ(ids.front(), llama->bos_id());

  auto qwen = Tokenizer::from_hf_json(g["qwen2"]["tokenizer"], g["qwen2"]["tokenizer_config"]);
  EXPECT_FALSE(qwen->adds_bos());
  EXPECT_EQ(qwen->bos_id(), -1);
  EXPECT_EQ(qwen->apply_chat_template(msgs, false),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\n Hi <|im_end|>\n");
  // A non-special added token is matched even without parse_special.
  const auto custom = qwen->encode("a<custom_tool>b", false, false);
  EXPECT_EQ(custom.size(), 3u);
}

TEST(HfJson, BosFromPostProcessor) {
  // Without add_bos_token in tokenizer_config.json, a TemplateProcessing post-processor that starts
  // with the BOS token means "add BOS" (as in Llama-3's tokenizer.json).
  const json g = testing::load_json(testing::golden_path("hf_bpe_tiny.json"));
  json tj = g["llama3"]["tokenizer"];
  tj["post_processor"] = json::parse(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing",
       "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
       "pair": [], "special_tokens": {}}]})");
  json cfg = g["llama3"]["tokenizer_config"];
  cfg.erase("add_bos_token");
  EXPECT_TRUE(Tokenizer::from_hf_json(tj, cfg)->adds_bos());
  tj["post_processor"] = nullptr;
  EXPECT_FALSE(Tokenizer::from_hf_json(tj, cfg)->adds_bos());
}

TEST(HfJson, Errors) {
  const json g = testing::load_json(testing::golden_path("hf_bpe_tiny.json"));
  json tj = g["qwen2"]["tokenizer"];
  tj["model"]["type"] = "Unigram";
  EXPECT_THROW(Tokenizer::from_hf_json(tj, json::object()), Error);
  tj = g["qwen2"]["tokenizer"];
  tj["pre_tokenizer"] = json::parse(R"({"type": "Whitespace"})");  // neither byte-level nor "▁"
  tj["decoder"] = nullptr;
  tj["normalizer"] = nullptr;
  EXPECT_THROW(Tokenizer::from_hf_json(tj, json::object()), Error);
  tj = g["qwen2"]["tokenizer"];
  tj["model"]["vocab"] = json::object();
  tj["added_tokens"] = json::array();
  EXPECT_THROW(Tokenizer::from_hf_json(tj, json::object()), Error);
  EXPECT_THROW(Tokenizer::from_hf_json(json::object(), json::object()), Error);
}

}  // namespace
}  // namespace longctx

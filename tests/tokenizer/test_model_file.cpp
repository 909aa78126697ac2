// test_model_file.cpp: Tokenizer::from_model_file end to end through the loader: a GGUF file
// written with the loader's GgufWriter (SentencePiece vocab from spm_tiny.json) and an HF
// safetensors directory with tokenizer.json (hf_bpe_tiny.json), checked against the golden ids.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "model_paths.h"
#include "util/error.h"

#ifdef LONGCTX_TOKENIZER_TEST_HAVE_LOADER
#include "loader/gguf_writer.h"
#include "loader/safetensors_writer.h"
#endif

namespace longctx {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

#ifdef LONGCTX_TOKENIZER_TEST_HAVE_LOADER
// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / (std::string("longctx_tok_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_json(const fs::path& p, const json& j) {
  std::ofstream f(p);
  f << j.dump();
}

SafetensorsTensor tiny_tensor() { return {"model.embed_tokens.weight", DType::F32, {2, 2}, {1, 2, 3, 4}, {}}; }

TEST(ModelFile, GgufSentencePiece) {
  const json g = testing::load_json(testing::golden_path("spm_tiny.json"));
  const json& m = g["metadata"];
  GgufWriter w;
  w.add("general.architecture", GgufValue::string("llama"));
  w.add("tokenizer.ggml.model", GgufValue::string(m["tokenizer.ggml.model"].get<std::string>()));
  w.add("tokenizer.ggml.tokens", GgufValue::strings(m["tokenizer.ggml.tokens"].get<std::vector<std::string>>()));
  w.add("tokenizer.ggml.scores", GgufValue::f32s(m["tokenizer.ggml.scores"].get<std::vector<float>>()));
  w.add("tokenizer.ggml.token_type", GgufValue::i32s(m["tokenizer.ggml.token_type"].get<std::vector<int32_t>>()));
  w.add_u32("tokenizer.ggml.bos_token_id", 1);
  w.add_u32("tokenizer.ggml.eos_token_id", 2);
  w.add_u32("tokenizer.ggml.unknown_token_id", 0);
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  w.add("tokenizer.chat_template", GgufValue::string(m["tokenizer.chat_template"].get<std::string>()));
  w.add_tensor("token_embd.weight", {2, 32}, DType::F32, std::vector<float>(64, 0.5f));
  TempDir dir;
  const std::string path = (dir.path() / "spm.gguf").string();
  w.write(path);

  auto mf = open_model_file(path);
  auto t = Tokenizer::from_model_file(*mf);
  EXPECT_EQ(t->kind(), "spm");
  EXPECT_TRUE(t->adds_bos());
  for (const auto& c : g["cases"]) {
    EXPECT_EQ(t->encode(c["text"].get<std::string>(), false, false), c["ids"].get<std::vector<int32_t>>());
  }
  const std::vector<ChatMessage> msgs = {{"system", "S"}, {"user", "U"}};
  EXPECT_EQ(t->apply_chat_template(msgs, true), "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST]");
}

TEST(ModelFile, SafetensorsDirWithTokenizerJson) {
  const json g = testing::load_json(testing::golden_path("hf_bpe_tiny.json"));
  TempDir dir;
  write_safetensors_dir(dir.path().string(), json{{"architectures", {"Qwen2ForCausalLM"}}}, {tiny_tensor()});
  write_json(dir.path() / "tokenizer.json", g["qwen2"]["tokenizer"]);
  write_json(dir.path() / "tokenizer_config.json", g["qwen2"]["tokenizer_config"]);
  auto mf = open_model_file(dir.path().string());
  ASSERT_EQ(mf->format(), "safetensors");
  auto t = Tokenizer::from_model_file(*mf);
  EXPECT_EQ(t->kind(), "bpe:qwen2");
  for (const auto& c : g["qwen2"]["cases"]) {
    EXPECT_EQ(t->encode(c["text"].get<std::string>(), false, true), c["ids_special"].get<std::vector<int32_t>>());
  }
}

TEST(ModelFile, SafetensorsDirWithoutTokenizerIsAnError) {
  TempDir dir;
  write_safetensors_dir(dir.path().string(), json{{"architectures", {"LlamaForCausalLM"}}}, {tiny_tensor()});
  auto mf = open_model_file(dir.path().string());
  try {
    Tokenizer::from_model_file(*mf);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
}
#else
TEST(ModelFile, NeedsLoader) { GTEST_SKIP() << "built without the loader"; }
#endif

}  // namespace
}  // namespace longctx

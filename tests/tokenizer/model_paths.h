// model_paths.h: where tokenizer tests find the real model files and golden data.
//
// The SmolLM2 GGUF lives in the model cache ($LONGCTX_MODELS or ~/.cache/longctx/models); tests
// that need it GTEST_SKIP when it is absent. Golden data is committed under tests/data/tokenizer.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/tokenizer.h"

#ifdef LONGCTX_TOKENIZER_TEST_HAVE_LOADER
#include "loader/model_file.h"
#endif

namespace longctx::testing {

inline constexpr const char* kSmolLM2File = "SmolLM2-135M-Instruct.Q4_1.gguf";
inline constexpr const char* kGemma3File = "gemma-3-270m-q4_k_m.gguf";  // scripts/fetch-model.sh gemma3-270m

inline std::string models_dir() {
  if (const char* d = std::getenv("LONGCTX_MODELS")) return d;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/longctx/models";
}

inline std::string smollm2_path() { return models_dir() + "/" + kSmolLM2File; }

inline std::string golden_path(const std::string& name) {
  return std::string(LONGCTX_TOKENIZER_TEST_DATA) + "/" + name;
}

inline nlohmann::json load_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(f);
}

// The tokenizer of a cached GGUF (SmolLM2 by default), or nullptr (test should skip) if unavailable.
inline std::unique_ptr<Tokenizer> load_smollm2(std::string* why_not, const char* file = kSmolLM2File) {
#ifdef LONGCTX_TOKENIZER_TEST_HAVE_LOADER
  const std::string path = models_dir() + "/" + file;
  if (!std::filesystem::exists(path)) {
    *why_not = "model file not found: " + path;
    return nullptr;
  }
  auto mf = open_model_file(path);
  return Tokenizer::from_model_file(*mf);
#else
  *why_not = "built without the loader";
  return nullptr;
#endif
}

}  // namespace longctx::testing

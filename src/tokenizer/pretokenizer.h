// pretokenizer.h: splits text into pre-tokens before BPE (regex splits, digit splits, prefix space).
//
// A Pretokenizer is a sequence of steps applied in order; each step refines every piece produced
// by the previous one independently (so regex lookaheads never see past a piece), as HF
// `tokenizers` Sequence pre-tokenizers do. Supported steps mirror tokenizer.json:
//   Split(regex or literal, behavior, invert), Digits(individual_digits),
//   ByteLevel(add_prefix_space, use_regex = the GPT-2 pattern).
// Named presets (GGUF tokenizer.ggml.pre values) build the same pipelines: see presets below.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex_splitter.h"

namespace longctx::tok {

// Published pre-tokenizer patterns.
// GPT-2 (also HF ByteLevel use_regex=true).
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama-3: case-insensitive contractions, letters with one leading non-letter, 1-3 digit groups.
inline constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: as Llama-3 but every digit on its own.
inline constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// How a Split step treats the matches (names as in tokenizer.json).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

class Pretokenizer {
 public:
  // Presets by name: "gpt2", "llama3", "qwen2", "smollm" (digits one by one, then GPT-2).
  // Throws Error listing the supported names for an unknown one.
  static std::unique_ptr<Pretokenizer> preset(std::string_view name);
  // From a tokenizer.json "pre_tokenizer" value (null -> no splitting). Throws Error naming an
  // unsupported type.
  static std::unique_ptr<Pretokenizer> from_hf_json(const nlohmann::json& pre);

  Pretokenizer();
  ~Pretokenizer();

  void add_split(const std::string& regex, SplitBehavior behavior, bool invert);
  void add_digits(bool individual);
  void add_byte_level(bool add_prefix_space, bool use_regex);

  // Splits text into pre-tokens (byte strings; their concatenation is text, plus any prefix
  // spaces that add_prefix_space inserted).
  std::vector<std::string> split(std::string_view text) const;

  // The regex patterns used, in order (for naming the kind of a tokenizer.json pipeline).
  std::vector<std::string> patterns() const;

 private:
  struct Step;
  std::vector<std::unique_ptr<Step>> steps_;
};

}  // namespace longctx::tok

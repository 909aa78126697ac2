// vocab.h: the model-independent description of a vocabulary that every tokenizer kind is built
// from (filled from GGUF tokenizer.ggml.* keys or from tokenizer.json / tokenizer_config.json).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace longctx::tok {

// GGUF token types (tokenizer.ggml.token_type values).
enum class TokenType : int32_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

struct Vocab {
  std::vector<std::string> tokens;  // as stored: byte-mapped text (BPE) or "▁" text (SPM)
  std::vector<TokenType> types;     // same size as tokens
  std::vector<float> scores;        // SPM merge scores (empty for byte-level BPE)
  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;
  bool add_bos = false;
  bool add_eos = false;
  std::string chat_template;        // Jinja text, empty if the model has none

  int32_t size() const { return int32_t(tokens.size()); }
  bool valid_id(int64_t id) const { return id >= 0 && id < int64_t(tokens.size()); }
  bool is_control(int32_t id) const { return types[id] == TokenType::Control; }
};

}  // namespace longctx::tok

// spm_tokenizer.h: SentencePiece-style BPE as stored in Llama-2 / Mistral GGUF files
// (tokenizer.ggml.model == "llama").
//
// Spaces become "▁" (U+2581) and a dummy "▁" is put in front of the text (and after each special
// token, as llama.cpp does) when add_space_prefix is on. The text starts as one symbol per UTF-8
// character; the adjacent pair whose concatenation is a vocabulary piece with the highest score
// is merged first (leftmost on ties) until nothing merges. Characters that are not pieces fall
// back to byte tokens <0xNN> (or <unk> if the vocabulary has none).
#pragma once
#include <array>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer_base.h"

namespace longctx::tok {

class SpmTokenizer : public TokenizerBase {
 public:
  // Throws Error if scores are missing (size differs from the token count).
  SpmTokenizer(Vocab vocab, std::vector<AddedToken> added, bool add_space_prefix);

  std::string token_bytes(int32_t id) const override;
  std::string kind() const override { return "spm"; }

 protected:
  void encode_plain(std::string_view text, PlainContext where, std::vector<int32_t>& out) const override;
  // Removes the dummy-prefix space at the start of decoded text (as HF's Llama decoder does).
  void finish_decode(std::string& text) const override;

 private:
  int32_t piece_id(std::string_view piece) const;
  void emit_symbol(std::string_view sym, std::vector<int32_t>& out) const;

  bool add_space_prefix_;
  std::unordered_map<std::string, int32_t> piece_to_id_;  // normal and user-defined pieces
  std::array<int32_t, 256> byte_token_{};                  // <0xNN> ids, -1 if missing
  std::vector<std::string> raw_;                           // decoded bytes per token
};

}  // namespace longctx::tok

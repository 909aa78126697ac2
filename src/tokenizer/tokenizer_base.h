// tokenizer_base.h: the shared part of every tokenizer kind (special-token splitting, BOS,
// end-of-generation ids, decode loop, chat templates); kinds only encode plain text and say
// what bytes a token stands for.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace longctx::tok {

class TokenizerBase : public Tokenizer {
 public:
  // Validates the vocabulary (non-empty, ids in range) and sets up special tokens and the chat
  // template. `added` are the tokens matched before the plain tokenizer.
  TokenizerBase(Vocab vocab, std::vector<AddedToken> added);

  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const override;

  int32_t vocab_size() const override { return vocab_.size(); }
  int32_t bos_id() const override { return vocab_.bos; }
  int32_t eos_id() const override { return vocab_.eos; }
  bool is_end_of_generation(int32_t id) const override { return eog_.contains(id); }
  bool adds_bos() const override { return vocab_.add_bos; }
  std::string apply_chat_template(std::span<const ChatMessage> messages,
                                  bool add_generation_prompt) const override;

  const Vocab& vocab() const { return vocab_; }
  // The chat template family name ("chatml", "llama3", ...) or "" if the model has none.
  std::string chat_family() const;

 protected:
  // Where a stretch of plain text sits in the input (SentencePiece-style prefixes depend on it).
  struct PlainContext {
    bool after_special;  // at the start of the input or right after a special token
    bool at_start;       // at byte 0 of the input
  };
  // Encodes one stretch of plain text (no special tokens in it).
  virtual void encode_plain(std::string_view text, PlainContext where, std::vector<int32_t>& out) const = 0;
  // Final fix-up of decoded text (SentencePiece strips the dummy-prefix space).
  virtual void finish_decode(std::string& /*text*/) const {}
  // Throws Error for an id outside the vocabulary.
  void check_id(int32_t id) const;

  Vocab vocab_;
  SpecialTokenMatcher specials_;
  std::unordered_set<int32_t> special_ids_;  // skipped by decode(skip_special)
  std::unordered_set<int32_t> eog_;
  std::optional<ChatTemplate> chat_;
};

}  // namespace longctx::tok

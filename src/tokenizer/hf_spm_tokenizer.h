// hf_spm_tokenizer.h: SentencePiece-style BPE as written in tokenizer.json (Llama-2 / Mistral HF
// directories): a BPE model with byte_fallback over "▁" text, with no byte-level mapping.
//
// The text is first given its "▁" form: either the Llama-2 normalizer (Prepend "▁" to every
// plain segment, Replace " " -> "▁") or a Metaspace pre-tokenizer (replace, then prepend "▁"
// unless the segment already starts with one; prepend_scheme "first" only at the start of the
// input). Optionally (Metaspace split) words are cut before each "▁". Each word starts as one
// symbol per character; characters missing from the vocabulary become <0xNN> byte pieces (or
// <unk>, consecutive ones fused); ranked merges are applied as for byte-level BPE. Decoding turns
// "▁" back into spaces, byte pieces into bytes, and drops the first leading space (Strip decoder).
#pragma once
#include <array>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/bpe_merge.h"
#include "tokenizer/tokenizer_base.h"

namespace longctx::tok {

struct HfSpmOptions {
  enum class Prefix { None, Prepend, MetaspaceAlways, MetaspaceFirst };
  Prefix prefix = Prefix::Prepend;
  bool split_words = false;      // Metaspace split: a word starts at each "▁"
  bool byte_fallback = true;
  bool fuse_unk = true;
  bool strip_leading_space = true;  // decoder Strip(" ", 1, 0)
};

class HfSpmTokenizer : public TokenizerBase {
 public:
  HfSpmTokenizer(Vocab vocab, std::vector<AddedToken> added,
                 const std::vector<std::pair<std::string, std::string>>& merges, HfSpmOptions opts);

  std::string token_bytes(int32_t id) const override;
  std::string kind() const override { return "spm"; }

 protected:
  void encode_plain(std::string_view text, PlainContext where, std::vector<int32_t>& out) const override;
  void finish_decode(std::string& text) const override;

 private:
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  HfSpmOptions opts_;
  BpeMergeTable merges_;
  std::unordered_map<std::string, int32_t> piece_to_id_;
  std::array<int32_t, 256> byte_piece_{};
  std::vector<std::string> raw_;
};

}  // namespace longctx::tok

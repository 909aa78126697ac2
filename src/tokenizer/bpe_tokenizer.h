// bpe_tokenizer.h: byte-level BPE (GPT-2 style: SmolLM2, Llama-3, Qwen2).
//
// Text is split by the pre-tokenizer, each pre-token's bytes start as one token per byte (the
// GPT-2 byte->char mapping says which), and ranked merges are applied. Works on raw bytes, so
// any input (invalid UTF-8 included) encodes and decode(encode(x)) == x. Pre-token results are
// memoised in a bounded cache shared by all threads.
#pragma once
#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/bpe_merge.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_base.h"

namespace longctx::tok {

struct BpeOptions {
  std::string kind;             // "bpe:gpt2", "bpe:llama3", ...
  bool ignore_merges = false;   // a pre-token that is itself a token is emitted whole (Llama-3)
  bool nfc = false;             // normalize plain text to NFC first (tokenizer.json "NFC")
};

class BpeTokenizer : public TokenizerBase {
 public:
  // merges: pairs of token texts as stored in the vocabulary ("Ġ", "t"), best first. Merges
  // whose parts or result are not in the vocabulary are skipped. Bytes without a single-byte
  // token become <unk> if there is one, else are dropped (as HF tokenizers does).
  BpeTokenizer(Vocab vocab, std::vector<AddedToken> added,
               const std::vector<std::pair<std::string, std::string>>& merges,
               std::unique_ptr<Pretokenizer> pre, BpeOptions opts);

  std::string token_bytes(int32_t id) const override;
  std::string kind() const override { return opts_.kind; }
  size_t num_merges() const { return merges_.size(); }

 protected:
  void encode_plain(std::string_view text, PlainContext where, std::vector<int32_t>& out) const override;

 private:
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  std::unique_ptr<Pretokenizer> pre_;
  BpeOptions opts_;
  BpeMergeTable merges_;
  std::vector<std::string> raw_;               // bytes per token
  std::array<int32_t, 256> byte_id_{};         // single-byte tokens, -1 if missing
  std::unordered_map<std::string, int32_t> raw_to_id_;  // normal tokens (ignore_merges only)
  bool unk_for_missing_bytes_ = false;

  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace longctx::tok

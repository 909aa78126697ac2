// bpe_tokenizer.cpp: see bpe_tokenizer.h.
#include "tokenizer/bpe_tokenizer.h"

#include "tokenizer/byte_unicode.h"
#include "tokenizer/unicode_nfc.h"
#include "util/error.h"

namespace longctx::tok {

namespace {
constexpr size_t kMaxCachedPieceBytes = 64;   // longer pre-tokens are rare; don't cache them
constexpr size_t kMaxCacheEntries = 1 << 18;  // cleared when full
}  // namespace

BpeTokenizer::BpeTokenizer(Vocab vocab, std::vector<AddedToken> added,
                           const std::vector<std::pair<std::string, std::string>>& merges,
                           std::unique_ptr<Pretokenizer> pre, BpeOptions opts)
    : TokenizerBase(std::move(vocab), std::move(added)), pre_(std::move(pre)), opts_(std::move(opts)) {
  const int32_t n = vocab_.size();
  std::unordered_map<std::string_view, int32_t> text_to_id;
  text_to_id.reserve(size_t(n));
  for (int32_t id = 0; id < n; ++id) text_to_id.try_emplace(vocab_.tokens[id], id);

  raw_.resize(size_t(n));
  byte_id_.fill(-1);
  for (int32_t id = 0; id < n; ++id) {
    const std::string& t = vocab_.tokens[id];
    const TokenType type = vocab_.types[id];
    if (type == TokenType::Control || type == TokenType::UserDefined) {
      raw_[id] = t;  // added tokens are stored as plain text
      continue;
    }
    auto bytes = mapped_to_bytes(t);
    raw_[id] = bytes ? std::move(*bytes) : t;
    if (bytes && raw_[id].size() == 1) {
      int32_t& slot = byte_id_[static_cast<uint8_t>(raw_[id][0])];
      if (slot < 0) slot = id;
    }
    if (opts_.ignore_merges && bytes) raw_to_id_.try_emplace(raw_[id], id);
  }

  // GGUF files often name a control token (e.g. <|endoftext|>) as unknown_token_id; only a
  // token of type Unknown stands in for unencodable bytes.
  unk_for_missing_bytes_ = vocab_.unk >= 0 && vocab_.types[vocab_.unk] == TokenType::Unknown;

  int32_t rank = 0;
  for (const auto& [a, b] : merges) {
    auto ia = text_to_id.find(a), ib = text_to_id.find(b), im = text_to_id.find(a + b);
    if (ia != text_to_id.end() && ib != text_to_id.end() && im != text_to_id.end()) {
      merges_.add(ia->second, ib->second, im->second, rank);
    }
    ++rank;
  }
}

std::string BpeTokenizer::token_bytes(int32_t id) const {
  check_id(id);
  return raw_[id];
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (opts_.ignore_merges) {
    if (auto it = raw_to_id_.find(std::string(piece)); it != raw_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(piece.size());
  for (char c : piece) {
    const int32_t id = byte_id_[static_cast<uint8_t>(c)];
    if (id >= 0) {
      ids.push_back(id);
    } else if (unk_for_missing_bytes_) {
      ids.push_back(vocab_.unk);
    }
    // else: the vocabulary cannot represent this byte and has no real unknown token; drop it
    // (as HF tokenizers does without unk_token). SmolLM2, e.g., has no token for 0x04 or 0x1D.
  }
  merges_.apply(ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

void BpeTokenizer::encode_plain(std::string_view text, PlainContext /*where*/, std::vector<int32_t>& out) const {
  std::string normalized;
  if (opts_.nfc) {
    normalized = to_nfc(text);
    text = normalized;
  }
  for (const std::string& piece : pre_->split(text)) {
    const bool cacheable = piece.size() <= kMaxCachedPieceBytes;
    if (cacheable) {
      std::lock_guard lk(cache_mu_);
      if (auto it = cache_.find(piece); it != cache_.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    const size_t start = out.size();
    encode_piece(piece, out);
    if (cacheable) {
      std::lock_guard lk(cache_mu_);
      if (cache_.size() >= kMaxCacheEntries) cache_.clear();
      cache_.try_emplace(piece, out.begin() + std::ptrdiff_t(start), out.end());
    }
  }
}

}  // namespace longctx::tok

// hf_spm_tokenizer.cpp: see hf_spm_tokenizer.h.
#include "tokenizer/hf_spm_tokenizer.h"

#include "tokenizer/spm_pieces.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace longctx::tok {

HfSpmTokenizer::HfSpmTokenizer(Vocab vocab, std::vector<AddedToken> added,
                               const std::vector<std::pair<std::string, std::string>>& merges, HfSpmOptions opts)
    : TokenizerBase(std::move(vocab), std::move(added)), opts_(opts) {
  const int32_t n = vocab_.size();
  byte_piece_.fill(-1);
  raw_.resize(size_t(n));
  for (int32_t id = 0; id < n; ++id) {
    const std::string& t = vocab_.tokens[id];
    const TokenType type = vocab_.types[id];
    if (type == TokenType::Control || type == TokenType::UserDefined) {
      raw_[id] = t;
      continue;
    }
    piece_to_id_.try_emplace(t, id);
    if (const int b = parse_byte_piece(t); b >= 0) {
      if (byte_piece_[size_t(b)] < 0) byte_piece_[size_t(b)] = id;
      raw_[id] = std::string(1, char(b));
    } else {
      raw_[id] = replace_all(t, kSpaceMark, " ");
    }
  }
  int32_t rank = 0;
  for (const auto& [a, b] : merges) {
    auto ia = piece_to_id_.find(a), ib = piece_to_id_.find(b), im = piece_to_id_.find(a + b);
    if (ia != piece_to_id_.end() && ib != piece_to_id_.end() && im != piece_to_id_.end()) {
      merges_.add(ia->second, ib->second, im->second, rank);
    }
    ++rank;
  }
}

void HfSpmTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  std::vector<int32_t> ids;
  ids.reserve(word.size());
  bool last_unk = false;
  for (size_t pos = 0; pos < word.size();) {
    const size_t len = utf8_char_len(word, pos);
    const std::string ch(word.substr(pos, len));
    pos += len;
    if (auto it = piece_to_id_.find(ch); it != piece_to_id_.end()) {
      ids.push_back(it->second);
      last_unk = false;
      continue;
    }
    bool all_bytes = opts_.byte_fallback;
    for (char c : ch) all_bytes = all_bytes && byte_piece_[static_cast<uint8_t>(c)] >= 0;
    if (all_bytes) {
      for (char c : ch) ids.push_back(byte_piece_[static_cast<uint8_t>(c)]);
      last_unk = false;
    } else if (vocab_.unk >= 0) {
      if (!(opts_.fuse_unk && last_unk)) ids.push_back(vocab_.unk);
      last_unk = true;
    }
    // else: no way to represent the character; dropped (as HF tokenizers without unk_token).
  }
  merges_.apply(ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

void HfSpmTokenizer::encode_plain(std::string_view text, PlainContext where, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string s;
  switch (opts_.prefix) {
    case HfSpmOptions::Prefix::None:
      s = replace_all(text, " ", kSpaceMark);
      break;
    case HfSpmOptions::Prefix::Prepend:
      s = std::string(kSpaceMark) + replace_all(text, " ", kSpaceMark);
      break;
    case HfSpmOptions::Prefix::MetaspaceAlways:
    case HfSpmOptions::Prefix::MetaspaceFirst: {
      s = replace_all(text, " ", kSpaceMark);
      const bool scheme_ok = opts_.prefix == HfSpmOptions::Prefix::MetaspaceAlways || where.at_start;
      if (scheme_ok && s.compare(0, kSpaceMark.size(), kSpaceMark) != 0) s.insert(0, kSpaceMark);
      break;
    }
  }
  if (!opts_.split_words) {
    encode_word(s, out);
    return;
  }
  size_t begin = 0;
  for (size_t hit = s.find(kSpaceMark, 1); hit != std::string::npos; hit = s.find(kSpaceMark, hit + 1)) {
    if (hit > begin) encode_word(std::string_view(s).substr(begin, hit - begin), out);
    begin = hit;
  }
  encode_word(std::string_view(s).substr(begin), out);
}

std::string HfSpmTokenizer::token_bytes(int32_t id) const {
  check_id(id);
  return raw_[id];
}

void HfSpmTokenizer::finish_decode(std::string& text) const {
  if (opts_.strip_leading_space && !text.empty() && text.front() == ' ') text.erase(0, 1);
}

}  // namespace longctx::tok

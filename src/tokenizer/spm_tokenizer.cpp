// spm_tokenizer.cpp: see spm_tokenizer.h.
#include "tokenizer/spm_tokenizer.h"

#include <queue>

#include "tokenizer/spm_pieces.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace longctx::tok {

namespace {
struct Symbol {
  size_t begin, len;  // byte range in the escaped text; len 0 once merged away
  int32_t prev, next;
};

struct Bigram {
  float score;
  int32_t left;
  size_t len;  // combined byte length at push time, to detect stale entries
  bool operator<(const Bigram& o) const {
    // priority_queue pops the largest: higher score first, then the leftmost.
    return score != o.score ? score < o.score : left > o.left;
  }
};
}  // namespace

SpmTokenizer::SpmTokenizer(Vocab vocab, std::vector<AddedToken> added, bool add_space_prefix)
    : TokenizerBase(std::move(vocab), std::move(added)), add_space_prefix_(add_space_prefix) {
  const int32_t n = vocab_.size();
  if (int32_t(vocab_.scores.size()) != n) {
    fail("SentencePiece vocabulary has {} scores for {} tokens (missing tokenizer.ggml.scores?)",
         vocab_.scores.size(), n);
  }
  byte_token_.fill(-1);
  raw_.resize(size_t(n));
  for (int32_t id = 0; id < n; ++id) {
    const std::string& t = vocab_.tokens[id];
    const TokenType type = vocab_.types[id];
    const int b = parse_byte_piece(t);
    if (type == TokenType::Byte && b >= 0) {
      if (byte_token_[size_t(b)] < 0) byte_token_[size_t(b)] = id;
      raw_[id] = std::string(1, char(b));
      continue;
    }
    if (type == TokenType::Normal || type == TokenType::UserDefined) {
      piece_to_id_.try_emplace(t, id);
      raw_[id] = replace_all(t, kSpaceMark, " ");
    } else {
      raw_[id] = t;  // control, unknown, unused: their text
    }
  }
}

int32_t SpmTokenizer::piece_id(std::string_view piece) const {
  auto it = piece_to_id_.find(std::string(piece));
  return it == piece_to_id_.end() ? -1 : it->second;
}

void SpmTokenizer::emit_symbol(std::string_view sym, std::vector<int32_t>& out) const {
  if (int32_t id = piece_id(sym); id >= 0) {
    out.push_back(id);
    return;
  }
  for (char c : sym) {
    const int32_t id = byte_token_[static_cast<uint8_t>(c)];
    if (id >= 0) {
      out.push_back(id);
    } else if (vocab_.unk >= 0) {
      // Without byte tokens a whole unknown character is one <unk>.
      out.push_back(vocab_.unk);
      return;
    }
  }
}

void SpmTokenizer::encode_plain(std::string_view text, PlainContext where, std::vector<int32_t>& out) const {
  std::string s;
  if (add_space_prefix_ && where.after_special) s = " ";
  s += text;
  s = replace_all(s, " ", kSpaceMark);
  if (s.empty()) return;

  std::vector<Symbol> syms;
  for (size_t pos = 0; pos < s.size();) {
    const size_t len = utf8_char_len(s, pos);
    const int32_t idx = int32_t(syms.size());
    syms.push_back({pos, len, idx - 1, -1});
    if (idx > 0) syms[size_t(idx - 1)].next = idx;
    pos += len;
  }
  std::priority_queue<Bigram> queue;
  auto try_add = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = syms[size_t(left)].next;
    if (right < 0) return;
    const Symbol& a = syms[size_t(left)];
    const size_t len = a.len + syms[size_t(right)].len;
    const int32_t id = piece_id(std::string_view(s).substr(a.begin, len));
    if (id >= 0) queue.push({vocab_.scores[size_t(id)], left, len});
  };
  for (int32_t i = 0; i + 1 < int32_t(syms.size()); ++i) try_add(i);

  while (!queue.empty()) {
    const Bigram bg = queue.top();
    queue.pop();
    Symbol& left = syms[size_t(bg.left)];
    if (left.len == 0 || left.next < 0) continue;
    Symbol& right = syms[size_t(left.next)];
    if (left.len + right.len != bg.len) continue;  // stale: one side changed
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) syms[size_t(right.next)].prev = bg.left;
    try_add(left.prev);
    try_add(bg.left);
  }
  for (int32_t i = 0; i >= 0 && i < int32_t(syms.size()); i = syms[size_t(i)].next) {
    emit_symbol(std::string_view(s).substr(syms[size_t(i)].begin, syms[size_t(i)].len), out);
  }
}

std::string SpmTokenizer::token_bytes(int32_t id) const {
  check_id(id);
  return raw_[id];
}

void SpmTokenizer::finish_decode(std::string& text) const {
  if (add_space_prefix_ && !text.empty() && text.front() == ' ') text.erase(0, 1);
}

}  // namespace longctx::tok

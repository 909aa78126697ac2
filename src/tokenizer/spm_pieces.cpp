// spm_pieces.cpp: see spm_pieces.h.
#include "tokenizer/spm_pieces.h"

namespace longctx::tok {

namespace {
constexpr size_t kBytePieceLen = 6;  // "<0xNN>"
}  // namespace

int parse_byte_piece(std::string_view t) {
  if (t.size() != kBytePieceLen || t.substr(0, 3) != "<0x" || t.back() != '>') return -1;
  unsigned v = 0;
  for (char c : t.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9') v |= unsigned(c - '0');
    else if (c >= 'A' && c <= 'F') v |= unsigned(c - 'A' + 10);
    else if (c >= 'a' && c <= 'f') v |= unsigned(c - 'a' + 10);
    else return -1;
  }
  return int(v);
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
    out.append(s.substr(pos, hit - pos));
    out.append(to);
  }
  out.append(s.substr(pos));
  return out;
}

}  // namespace longctx::tok

// utf8.cpp: see utf8.h. Strict decoding per RFC 3629 (no overlongs, no surrogates).
#include "tokenizer/utf8.h"

namespace longctx::tok {

namespace {
constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr uint32_t kSurrogateFirst = 0xD800, kSurrogateLast = 0xDFFF;

inline bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }
}  // namespace

uint32_t utf8_decode(std::string_view s, size_t pos, size_t& len) {
  len = 1;
  const auto c0 = static_cast<unsigned char>(s[pos]);
  if (c0 < 0x80) return c0;
  size_t n;
  uint32_t cp, min_cp;
  if ((c0 & 0xE0) == 0xC0) {
    n = 2; cp = c0 & 0x1F; min_cp = 0x80;
  } else if ((c0 & 0xF0) == 0xE0) {
    n = 3; cp = c0 & 0x0F; min_cp = 0x800;
  } else if ((c0 & 0xF8) == 0xF0) {
    n = 4; cp = c0 & 0x07; min_cp = 0x10000;
  } else {
    return kInvalidCodepoint;
  }
  if (pos + n > s.size()) return kInvalidCodepoint;
  for (size_t i = 1; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[pos + i]);
    if (!is_cont(c)) return kInvalidCodepoint;
    cp = (cp << 6) | (c & 0x3F);
  }
  if (cp < min_cp || cp > kMaxCodepoint || (cp >= kSurrogateFirst && cp <= kSurrogateLast)) {
    return kInvalidCodepoint;
  }
  len = n;
  return cp;
}

size_t utf8_char_len(std::string_view s, size_t pos) {
  size_t len;
  utf8_decode(s, pos, len);
  return len;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

std::vector<std::string_view> split_utf8_chars(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const size_t n = utf8_char_len(s, pos);
    out.push_back(s.substr(pos, n));
    pos += n;
  }
  return out;
}

bool utf8_is_valid(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    size_t n;
    if (utf8_decode(s, pos, n) == kInvalidCodepoint) return false;
    pos += n;
  }
  return true;
}

}  // namespace longctx::tok

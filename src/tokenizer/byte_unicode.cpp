// byte_unicode.cpp: see byte_unicode.h. Tables are built once on first use.
#include "tokenizer/byte_unicode.h"

#include <array>

#include "tokenizer/utf8.h"

namespace longctx::tok {

namespace {
constexpr int kNumBytes = 256;
constexpr uint32_t kRemapBase = 0x100;  // first code point for non-printable bytes
// The largest mapped code point is kRemapBase + 67 (68 remapped bytes).
constexpr uint32_t kMaxMapped = kRemapBase + 68;

struct Tables {
  std::array<uint32_t, kNumBytes> to_cp{};
  std::array<int16_t, kMaxMapped> to_byte{};
  Tables() {
    to_byte.fill(-1);
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    uint32_t next = kRemapBase;
    for (int b = 0; b < kNumBytes; ++b) {
      to_cp[b] = printable(b) ? uint32_t(b) : next++;
      to_byte[to_cp[b]] = int16_t(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}
}  // namespace

uint32_t byte_to_codepoint(uint8_t b) { return tables().to_cp[b]; }

int codepoint_to_byte(uint32_t cp) { return cp < kMaxMapped ? tables().to_byte[cp] : -1; }

std::string bytes_to_mapped(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) utf8_append(out, byte_to_codepoint(static_cast<uint8_t>(c)));
  return out;
}

std::optional<std::string> mapped_to_bytes(std::string_view mapped) {
  std::string out;
  out.reserve(mapped.size());
  for (size_t pos = 0; pos < mapped.size();) {
    size_t n;
    const uint32_t cp = utf8_decode(mapped, pos, n);
    const int b = cp == kInvalidCodepoint ? -1 : codepoint_to_byte(cp);
    if (b < 0) return std::nullopt;
    out += char(b);
    pos += n;
  }
  return out;
}

}  // namespace longctx::tok

// byte_unicode.h: the GPT-2 byte <-> Unicode character mapping used by byte-level BPE.
//
// Byte-level BPE vocabularies store every token as printable text: each byte b is shown as one
// code point (printable Latin-1 bytes as themselves, the other 68 bytes as U+0100 + n in order,
// e.g. space -> 'Ġ' U+0120, '\n' -> 'Ċ' U+010A). The tokenizer works on raw bytes internally, so
// it only needs this mapping to turn vocabulary/merge strings into bytes and back.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace longctx::tok {

// The code point that stands for byte b.
uint32_t byte_to_codepoint(uint8_t b);
// The byte a code point stands for, or -1 if cp is not one of the 256 mapped code points.
int codepoint_to_byte(uint32_t cp);

// Raw bytes -> mapped text (UTF-8 of the mapped code points).
std::string bytes_to_mapped(std::string_view bytes);
// Mapped text -> raw bytes; nullopt if any character is not a mapped code point.
std::optional<std::string> mapped_to_bytes(std::string_view mapped);

}  // namespace longctx::tok

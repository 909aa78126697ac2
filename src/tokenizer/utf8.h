// utf8.h: minimal UTF-8 helpers for the tokenizer (decode one code point, encode, split).
//
// Why: tokenizers must accept arbitrary bytes (invalid UTF-8 included) without crashing, so
// every helper here treats an invalid or truncated sequence as a single "character" of one
// byte instead of failing. Nothing here allocates per character except split_utf8_chars.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace longctx::tok {

// Code point used for an undecodable byte.
inline constexpr uint32_t kInvalidCodepoint = 0xFFFFFFFFu;

// Length in bytes of the UTF-8 sequence starting at s[pos] (1..4). An invalid or truncated
// sequence (bad lead byte, bad continuation, overlong, surrogate, > U+10FFFF) has length 1.
size_t utf8_char_len(std::string_view s, size_t pos);

// Decodes the character at s[pos]; returns kInvalidCodepoint for an invalid sequence.
// Sets len to the number of bytes consumed (utf8_char_len).
uint32_t utf8_decode(std::string_view s, size_t pos, size_t& len);

// Appends the UTF-8 encoding of cp (must be a valid scalar value) to out.
void utf8_append(std::string& out, uint32_t cp);

// Splits s into characters (invalid bytes become one-byte pieces).
std::vector<std::string_view> split_utf8_chars(std::string_view s);

// True when s is entirely valid UTF-8.
bool utf8_is_valid(std::string_view s);

}  // namespace longctx::tok

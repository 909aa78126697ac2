// spm_pieces.h: helpers for SentencePiece-style vocabularies ("▁" for spaces, <0xNN> byte pieces),
// shared by the GGUF SentencePiece tokenizer and the tokenizer.json (HF) one.
#pragma once
#include <string>
#include <string_view>

namespace longctx::tok {

inline constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581 "▁"

// The byte value of a "<0xNN>" piece, or -1 if `piece` is not one.
int parse_byte_piece(std::string_view piece);

// s with every occurrence of `from` replaced by `to`.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to);

}  // namespace longctx::tok

// unicode_nfc.h: Unicode Normalization Form C, for tokenizer.json "NFC" normalizers (Qwen2).
//
// Why: HF tokenizers normalizes Qwen2 input to NFC before pre-tokenizing, so "e" + U+0301 must
// become "é" (U+00E9) to get the same ids. How: utf8proc (Debian's libutf8proc, UAX #15 with its
// Unicode tables) normalizes each run of valid UTF-8. Text whose code points are all below U+0300
// is already NFC and is returned untouched. Invalid UTF-8 bytes pass through unchanged and block
// composition across them (utf8proc alone would refuse the whole text).
#pragma once
#include <string>
#include <string_view>

namespace longctx::tok {

std::string to_nfc(std::string_view text);

// The Unicode version of utf8proc's tables (e.g. "15.0.0").
const char* nfc_unicode_version();

}  // namespace longctx::tok

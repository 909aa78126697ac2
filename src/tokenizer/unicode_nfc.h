// unicode_nfc.h: Unicode Normalization Form C, for tokenizer.json "NFC" normalizers (Qwen2).
//
// Why: HF tokenizers normalizes Qwen2 input to NFC before pre-tokenizing, so "e" + U+0301 must
// become "é" (U+00E9) to get the same ids. How: canonical decomposition (table + Hangul algorithm),
// canonical reordering by combining class, then canonical composition (UAX #15). Tables are
// generated from Python's unicodedata into nfc_tables.inc. Text whose code points are all below
// U+0300 is already NFC and is returned untouched. Invalid UTF-8 bytes pass through unchanged and
// block composition across them.
#pragma once
#include <string>
#include <string_view>

namespace longctx::tok {

std::string to_nfc(std::string_view text);

// The Unicode version of the tables (e.g. "14.0.0").
const char* nfc_unicode_version();

}  // namespace longctx::tok

// unicode_nfc.cpp: see unicode_nfc.h. The normalization itself is utf8proc's (UAX #15 with its
// Unicode tables); this file only keeps invalid UTF-8 bytes out of its way.
#include "tokenizer/unicode_nfc.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace longctx::tok {

namespace {

// Appends the NFC form of a run of valid UTF-8 (as utf8_decode judges it) to out.
void append_nfc(std::string_view run, std::string& out) {
  if (run.empty()) return;
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()), utf8proc_ssize_t(run.size()), &dst,
                   utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(dst, &std::free);
  // utf8proc refuses only what utf8_decode also refuses (surrogates, overlongs, > U+10FFFF), so
  // n < 0 cannot follow a run of valid code points; the run then stays as it is.
  if (n < 0) {
    out.append(run);
    return;
  }
  out.append(reinterpret_cast<const char*>(dst), size_t(n));
}

}  // namespace

const char* nfc_unicode_version() { return utf8proc_unicode_version(); }

std::string to_nfc(std::string_view text) {
  // Fast path: nothing at or above U+0300 (bytes < 0xCC cover U+0000..U+02FF), which is NFC.
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0xCC; })) {
    return std::string(text);
  }
  // Invalid bytes pass through unchanged and block composition across them: the valid runs
  // between them are normalized one by one.
  std::string out;
  out.reserve(text.size());
  size_t run_start = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t n;
    if (utf8_decode(text, pos, n) == kInvalidCodepoint) {
      append_nfc(text.substr(run_start, pos - run_start), out);
      out.append(text.substr(pos, n));
      run_start = pos + n;
    }
    pos += n;
  }
  append_nfc(text.substr(run_start), out);
  return out;
}

}  // namespace longctx::tok

// regex_splitter.cpp: see regex_splitter.h.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex_splitter.h"

#include <pcre2.h>

#include <memory>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace longctx::tok {

namespace {
constexpr size_t kErrorBufferSize = 256;
constexpr uint32_t kCompileOptions = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[kErrorBufferSize];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};
}  // namespace

RegexSplitter::RegexSplitter(const std::string& pattern) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   kCompileOptions, &err, &err_off, nullptr);
  if (!code) {
    fail("pre-tokenizer regex does not compile at offset {}: {} (pattern: {})", size_t(err_off),
         pcre2_message(err), pattern);
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplitter::~RegexSplitter() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void RegexSplitter::find_matches(std::string_view text,
                                 std::vector<std::pair<size_t, size_t>>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(code, nullptr));
  if (!md) fail("out of memory creating regex match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    const int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), pos, 0, md.get(), nullptr)
                        : pcre2_match(code, subject, text.size(), pos, 0, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("pre-tokenizer regex failed: {} (pattern: {})", pcre2_message(rc), pattern_);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      pos = e;
    } else {
      // Empty match: skip one character so the loop always advances.
      pos = b + utf8_char_len(text, b);
    }
  }
}

}  // namespace longctx::tok

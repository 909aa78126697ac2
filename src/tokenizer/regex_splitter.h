// regex_splitter.h: finds all matches of a pre-tokenizer regex in a text (PCRE2, UTF + UCP).
//
// Pre-tokenizer patterns (GPT-2, Llama-3, Qwen2, tokenizer.json Split) use \p{L}, \p{N}, \s and
// lookahead, which PCRE2 handles with the same leftmost-first backtracking semantics as the
// Oniguruma / `regex` engines the reference tokenizers use. Compiled once (JIT when available);
// matching is thread-safe (each call has its own match data). Invalid UTF-8 in the subject is
// allowed (PCRE2_MATCH_INVALID_UTF): bytes of an invalid sequence never match, so they end up in
// the gaps between matches, which callers keep as their own pieces.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace longctx::tok {

class RegexSplitter {
 public:
  // Throws Error naming the pattern and PCRE2's message if it does not compile.
  explicit RegexSplitter(const std::string& pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  const std::string& pattern() const { return pattern_; }

  // Appends [begin, end) byte ranges of every non-overlapping match, left to right.
  void find_matches(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*, kept opaque so callers need no PCRE2 headers
  bool jit_ = false;
};

}  // namespace longctx::tok

// special_tokens.h: finds special / added tokens in text before the normal tokenizer runs.
//
// Text like "<|im_start|>user" must become [<|im_start|>, ...] rather than BPE pieces of
// "<", "|", ... . Each added token is matched literally, leftmost-longest (as HF's added-token
// splitter does); "control" tokens only when the caller asks for parse_special, user-defined
// (non-special added) tokens always. lstrip / rstrip tokens also swallow the whitespace next to
// them, as in tokenizer.json.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace longctx::tok {

struct AddedToken {
  std::string text;
  int32_t id = -1;
  bool special = true;  // control token: matched only with parse_special
  bool lstrip = false;
  bool rstrip = false;
};

class SpecialTokenMatcher {
 public:
  void add(AddedToken t);
  bool empty() const { return tokens_.empty(); }

  // A piece of the input: plain text [begin, end) when id < 0, otherwise a matched token.
  struct Fragment {
    size_t begin, end;
    int32_t id;
  };
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;

 private:
  std::vector<AddedToken> tokens_;
  // For each first byte, indices into tokens_ sorted by decreasing length.
  std::vector<std::vector<uint32_t>> by_first_byte_ = std::vector<std::vector<uint32_t>>(256);
};

}  // namespace longctx::tok

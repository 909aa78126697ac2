// special_tokens.cpp: see special_tokens.h.
#include "tokenizer/special_tokens.h"

#include <algorithm>

namespace longctx::tok {

namespace {
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
}  // namespace

void SpecialTokenMatcher::add(AddedToken t) {
  if (t.text.empty()) return;
  const auto first = static_cast<uint8_t>(t.text[0]);
  tokens_.push_back(std::move(t));
  auto& list = by_first_byte_[first];
  list.push_back(uint32_t(tokens_.size() - 1));
  std::stable_sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
    return tokens_[a].text.size() > tokens_[b].text.size();
  });
}

std::vector<SpecialTokenMatcher::Fragment> SpecialTokenMatcher::partition(std::string_view text,
                                                                           bool parse_special) const {
  std::vector<Fragment> out;
  size_t plain_begin = 0, pos = 0;
  while (pos < text.size()) {
    const AddedToken* hit = nullptr;
    for (uint32_t idx : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      const AddedToken& t = tokens_[idx];
      if (t.special && !parse_special) continue;
      if (text.compare(pos, t.text.size(), t.text) == 0) {
        hit = &t;
        break;
      }
    }
    if (!hit) {
      ++pos;
      continue;
    }
    size_t plain_end = pos, after = pos + hit->text.size();
    if (hit->lstrip) while (plain_end > plain_begin && is_space(text[plain_end - 1])) --plain_end;
    if (hit->rstrip) while (after < text.size() && is_space(text[after])) ++after;
    if (plain_end > plain_begin) out.push_back({plain_begin, plain_end, -1});
    out.push_back({pos, pos + hit->text.size(), hit->id});
    plain_begin = pos = after;
  }
  if (plain_begin < text.size()) out.push_back({plain_begin, text.size(), -1});
  return out;
}

}  // namespace longctx::tok

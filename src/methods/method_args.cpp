// method_args.cpp: see method_args.h.
#include "methods/method_args.h"

#include <charconv>

#include "util/error.h"

namespace longctx {

int64_t parse_count(std::string_view text, std::string_view method, std::string_view what) {
  int64_t v = -1;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || v < 0)
    fail("{}: {} must be a non-negative integer (got '{}')", method, what, text);
  return v;
}

std::vector<std::string> split_spec(std::string_view text, char sep) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t start = 0;
  while (true) {
    const size_t pos = text.find(sep, start);
    out.emplace_back(text.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

}  // namespace longctx

// lengths.cpp: --lengths / --depths / --attn list parsing (see lengths.h).
#include "eval/lengths.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>

#include "methods/registry.h"
#include "util/error.h"

namespace longctx::eval {
namespace {
constexpr int64_t kMaxLength = int64_t(1) << 32;  // 4G tokens: anything above is a typo

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string_view::npos) end = s.size();
    std::string piece(s.substr(start, end - start));
    while (!piece.empty() && std::isspace(static_cast<unsigned char>(piece.back()))) piece.pop_back();
    size_t lead = 0;
    while (lead < piece.size() && std::isspace(static_cast<unsigned char>(piece[lead]))) ++lead;
    out.push_back(piece.substr(lead));
    start = end + 1;
  }
  return out;
}
}  // namespace

int64_t parse_length(std::string_view text) {
  std::string t(text);
  if (t.empty()) fail("empty length in --lengths (expected e.g. 2k,4k,8k)");
  int64_t mult = 1;
  const char last = char(std::tolower(static_cast<unsigned char>(t.back())));
  if (last == 'k') mult = 1024;
  else if (last == 'm') mult = 1024 * 1024;
  std::string digits = mult == 1 ? t : t.substr(0, t.size() - 1);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size())
    fail("bad length \"{}\" in --lengths: expected a whole number of tokens with an optional k (x1024) or m "
         "(x1048576) suffix, e.g. 2k, 32768, 1m", t);
  if (v <= 0) fail("bad length \"{}\" in --lengths: a length must be positive", t);
  if (v > kMaxLength / mult) fail("bad length \"{}\" in --lengths: too large", t);
  return v * mult;
}

std::vector<int64_t> parse_lengths(std::string_view list) {
  std::vector<int64_t> out;
  for (const auto& piece : split(list, ',')) out.push_back(parse_length(piece));
  return out;
}

std::vector<double> parse_depths(std::string_view list) {
  std::vector<double> out;
  for (auto piece : split(list, ',')) {
    bool percent = !piece.empty() && piece.back() == '%';
    if (percent) piece.pop_back();
    double v = NAN;
    auto [p, ec] = std::from_chars(piece.data(), piece.data() + piece.size(), v);
    if (piece.empty() || ec != std::errc() || p != piece.data() + piece.size())
      fail("bad depth \"{}\" in --depths: expected fractions in [0, 1] (0,0.5,1) or percentages (0%,50%,100%)",
           piece + (percent ? "%" : ""));
    if (percent) v /= 100.0;
    if (!(v >= 0.0 && v <= 1.0))
      fail("bad depth \"{}\" in --depths: a depth must lie in [0, 1] (or 0%..100%)", piece + (percent ? "%" : ""));
    out.push_back(v);
  }
  return out;
}

std::string format_length(int64_t n) {
  if (n >= 1024 * 1024 && n % (1024 * 1024) == 0) return fmt::format("{}M", n / (1024 * 1024));
  if (n >= 1024 && n % 1024 == 0) return fmt::format("{}K", n / 1024);
  return fmt::format("{}", n);
}

// Whether a comma-separated piece of --attn starts a new spec: a registered method's name or a
// phase clause ("prefill:...", "decode:..."). Anything else continues the previous method's
// arguments ("a_shape=64,1024", "hip=k=64,window=64").
static bool starts_spec(const std::string& piece) {
  const std::string name = piece.substr(0, piece.find_first_of("=:;"));
  return find_method(name) != nullptr || name == "prefill" || name == "decode";
}

std::vector<std::string> split_methods(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const auto& v : values)
    for (const auto& piece : split(v, ',')) {
      if (piece.empty()) fail("empty attention method in --attn \"{}\"", v);
      if (!out.empty() && !starts_spec(piece) && out.back().find('=') != std::string::npos)
        out.back() += "," + piece;
      else
        out.push_back(piece);
    }
  return out;
}

}  // namespace longctx::eval

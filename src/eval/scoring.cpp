// scoring.cpp: RULER's string-match scoring rules (see scoring.h).
#include "eval/scoring.h"

#include <algorithm>

namespace longctx::eval {
namespace {
std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c); });
  return out;
}
}  // namespace

std::string metric_name(Metric m) {
  return m == Metric::MatchAll ? "string_match_all" : "string_match_part";
}

double string_match_all(std::string_view output, const std::vector<std::string>& expected) {
  if (expected.empty()) return 1.0;
  const std::string out = lower(output);
  size_t hits = 0;
  for (const auto& e : expected) hits += out.find(lower(e)) != std::string::npos;
  return double(hits) / double(expected.size());
}

double string_match_part(std::string_view output, const std::vector<std::string>& expected) {
  const std::string out = lower(output);
  for (const auto& e : expected)
    if (out.find(lower(e)) != std::string::npos) return 1.0;
  return expected.empty() ? 1.0 : 0.0;
}

double score_answer(Metric m, std::string_view output, const std::vector<std::string>& expected) {
  return m == Metric::MatchAll ? string_match_all(output, expected) : string_match_part(output, expected);
}

}  // namespace longctx::eval

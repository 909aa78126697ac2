// scoring.h: RULER's answer-scoring rules.
//
// string_match_all (NIAH, variable tracking, CWE, FWE): the share of expected items that occur
//   in the output, case-insensitively (recall of the expected items); 1 means all were found.
// string_match_part (QA-style): 1 if any expected item occurs in the output, else 0.
// A sample counts as correct when its score is 1.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace longctx::eval {

enum class Metric { MatchAll, MatchPart };

std::string metric_name(Metric m);  // "string_match_all" / "string_match_part"
double string_match_all(std::string_view output, const std::vector<std::string>& expected);
double string_match_part(std::string_view output, const std::vector<std::string>& expected);
double score_answer(Metric m, std::string_view output, const std::vector<std::string>& expected);

}  // namespace longctx::eval

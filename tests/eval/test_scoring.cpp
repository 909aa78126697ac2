// test_scoring.cpp: RULER scoring rules on hand-made answers.
#include <gtest/gtest.h>

#include "eval/scoring.h"

using namespace longctx::eval;

TEST(Scoring, MatchAllIsRecallOfExpectedItems) {
  EXPECT_DOUBLE_EQ(string_match_all("The pass key is 71432.", {"71432"}), 1.0);
  EXPECT_DOUBLE_EQ(string_match_all("numbers: 111, 333", {"111", "222", "333", "444"}), 0.5);
  EXPECT_DOUBLE_EQ(string_match_all("nothing here", {"a1", "b2"}), 0.0);
  EXPECT_DOUBLE_EQ(string_match_all("They are: HULKING-CLOCK", {"hulking-clock"}), 1.0);  // case-insensitive
}

TEST(Scoring, MatchPartIsAnyExpectedItem) {
  EXPECT_DOUBLE_EQ(string_match_part("Paris is the answer", {"London", "Paris"}), 1.0);
  EXPECT_DOUBLE_EQ(string_match_part("Rome", {"London", "Paris"}), 0.0);
}

TEST(Scoring, ScoreAnswerDispatches) {
  EXPECT_DOUBLE_EQ(score_answer(Metric::MatchAll, "a c", {"a", "b"}), 0.5);
  EXPECT_DOUBLE_EQ(score_answer(Metric::MatchPart, "a c", {"a", "b"}), 1.0);
  EXPECT_EQ(metric_name(Metric::MatchAll), "string_match_all");
}

// test_colour_maps.cpp: the pictures' colour scales (built with or without picture support).
#include <gtest/gtest.h>

#include "eval/colour_maps.h"

using namespace longctx::eval;

TEST(ColourMaps, ScoreRunsRedYellowGreen) {
  EXPECT_EQ(score_colour(0.0), (Rgb{215, 48, 39}));
  EXPECT_EQ(score_colour(0.5), (Rgb{254, 224, 139}));
  EXPECT_EQ(score_colour(1.0), (Rgb{26, 152, 80}));
  EXPECT_EQ(score_colour(0.25), lerp({215, 48, 39}, {254, 224, 139}, 0.5));
  EXPECT_EQ(score_colour(-3.0), score_colour(0.0));  // clamped
  EXPECT_EQ(score_colour(7.0), score_colour(1.0));
  // Green rises monotonically with the score up to yellow, so a higher score never looks worse.
  for (int i = 1; i <= 50; ++i) EXPECT_GE(score_colour(i / 100.0).g, score_colour((i - 1) / 100.0).g);
}

TEST(ColourMaps, HeatRunsDarkToPaleAndBrightens) {
  EXPECT_EQ(heat_colour(0.0), (Rgb{10, 10, 40}));
  EXPECT_EQ(heat_colour(1.0), (Rgb{252, 250, 190}));
  EXPECT_EQ(heat_colour(0.5), (Rgb{190, 50, 90}));
  EXPECT_EQ(heat_colour(-1.0), heat_colour(0.0));
  EXPECT_EQ(heat_colour(2.0), heat_colour(1.0));
  auto brightness = [](Rgb c) { return int(c.r) + int(c.g) + int(c.b); };
  for (int i = 1; i <= 100; ++i) EXPECT_GT(brightness(heat_colour(i / 100.0)), brightness(heat_colour((i - 1) / 100.0))) << i;
}

TEST(ColourMaps, LerpClampsAndRounds) {
  EXPECT_EQ(lerp({0, 0, 0}, {255, 100, 10}, 0.5), (Rgb{128, 50, 5}));
  EXPECT_EQ(lerp({0, 0, 0}, {255, 100, 10}, 2.0), (Rgb{255, 100, 10}));
  EXPECT_EQ(lerp({0, 0, 0}, {255, 100, 10}, -1.0), (Rgb{0, 0, 0}));
}

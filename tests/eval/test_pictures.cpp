// test_pictures.cpp: PNG through cairo (signature, pixels read back, errors naming the path) and
// the two pictures: their size, the cell / map colours at known places, the colour bar's ends,
// and text (the real font's anti-aliased ink) in every label area. Built with picture support only.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "eval/image.h"
#include "eval/plots.h"
#include "util/error.h"

using namespace longctx;
using namespace longctx::eval;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("longctx_eval_test_" + name)).string();
}

// Pixels of text ink in a box: dark grey, unlike any background, cell or bar colour used there.
int ink_pixels(const Image& img, const Box& b) {
  int n = 0;
  for (int y = b.y; y < b.y + b.h; ++y)
    for (int x = b.x; x < b.x + b.w; ++x) {
      const Rgb c = img.get(x, y);
      n += c.r < 110 && c.g < 110 && c.b < 110 && std::abs(int(c.r) - int(c.g)) < 20;
    }
  return n;
}

std::set<uint32_t> colours_in(const Image& img, const Box& b) {
  std::set<uint32_t> s;
  for (int y = b.y; y < b.y + b.h; ++y)
    for (int x = b.x; x < b.x + b.w; ++x) {
      const Rgb c = img.get(x, y);
      s.insert(uint32_t(c.r) << 16 | uint32_t(c.g) << 8 | c.b);
    }
  return s;
}

HeatmapData needle_data() {
  HeatmapData d;
  d.title = "passkey: dense";
  d.subtitle = "SmolLM2-135M-Instruct, 3 samples per cell";
  d.lengths = {2048, 4096, 8192};
  d.rows = {"0%", "50%", "100%"};
  d.score = {{1.0, 0.0, 0.25}, {0.5, NAN, 1.0}, {0.75, 1.0, 0.0}};
  return d;
}

}  // namespace

TEST(Png, WritesAValidPngThatReadsBack) {
  Image img(7, 5, {10, 20, 30});
  img.set(3, 2, {255, 0, 128});
  const std::string path = temp_path("small.png");
  write_png(path, img);
  std::ifstream f(path, std::ios::binary);
  char sig[8];
  f.read(sig, 8);
  const unsigned char want[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  EXPECT_EQ(std::memcmp(sig, want, 8), 0);
  Image back = read_png(path);
  EXPECT_EQ(back.width(), 7);
  EXPECT_EQ(back.height(), 5);
  EXPECT_EQ(back.data(), img.data());
  std::filesystem::remove(path);
}

TEST(Png, ErrorsNameThePath) {
  try {
    write_png("/nonexistent-dir/x.png", Image(2, 2));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.png"), std::string::npos) << e.what();
  }
  const std::string bad = temp_path("not.png");
  std::ofstream(bad) << "hello";
  EXPECT_THROW(read_png(bad), Error);
  EXPECT_THROW(read_png(temp_path("missing.png")), Error);
  std::filesystem::remove(bad);
}

TEST(Pictures, BuiltWithCairo) {
  EXPECT_TRUE(pictures_built());
  EXPECT_NO_THROW(require_pictures());
}

TEST(Heatmap, CellsHaveTheirScoreColoursAndNumbers) {
  const HeatmapData d = needle_data();
  const HeatmapLayout l = layout_heatmap(d);
  const Image img = accuracy_heatmap(d);
  EXPECT_EQ(img.width(), l.width);
  EXPECT_EQ(img.height(), l.height);
  EXPECT_EQ(l.grid.w, 3 * l.cell_w);
  EXPECT_EQ(l.grid.h, 3 * l.cell_h);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) {
      const double s = d.score[size_t(r)][size_t(c)];
      const Rgb want = std::isnan(s) ? kNotRun : score_colour(s);
      const Box cell{l.grid.x + c * l.cell_w, l.grid.y + r * l.cell_h, l.cell_w, l.cell_h};
      // Corners (inside the white separators) are the fill; the middle holds the number's glyphs.
      EXPECT_EQ(img.get(cell.x + 3, cell.y + 3), want) << r << "," << c;
      EXPECT_EQ(img.get(cell.x + cell.w - 4, cell.y + cell.h - 4), want) << r << "," << c;
      const Box middle{cell.x + cell.w / 4, cell.y + cell.h / 4, cell.w / 2, cell.h / 2};
      const auto colours = colours_in(img, middle);
      if (std::isnan(s)) {
        EXPECT_EQ(colours.size(), 1u) << "a cell not run has no number";
      } else {
        EXPECT_GT(colours.size(), 3u) << "the score is written in cell " << r << "," << c;
      }
    }
}

TEST(Heatmap, ColourBarRunsFromZeroToHundredPercent) {
  const HeatmapData d = needle_data();
  const HeatmapLayout l = layout_heatmap(d);
  const Image img = accuracy_heatmap(d);
  const int x = l.bar.x + l.bar.w / 2;
  EXPECT_EQ(img.get(x, l.bar.y), score_colour(1.0));
  EXPECT_EQ(img.get(x, l.bar.y + l.bar.h - 1), score_colour(0.0));
  const Rgb mid = img.get(x, l.bar.y + l.bar.h / 2);
  const Rgb want = score_colour(0.5);
  EXPECT_NEAR(mid.r, want.r, 4);
  EXPECT_NEAR(mid.g, want.g, 4);
  EXPECT_NEAR(mid.b, want.b, 4);
  EXPECT_GE(l.bar.h, 140) << "room for five tick labels";
}

TEST(Heatmap, EveryLabelAreaHasText) {
  const HeatmapData d = needle_data();
  const HeatmapLayout l = layout_heatmap(d);
  const Image img = accuracy_heatmap(d);
  EXPECT_GT(ink_pixels(img, l.title), 200) << "title and subtitle";
  EXPECT_GT(ink_pixels(img, l.y_labels), 30) << "0%, 50%, 100%";
  EXPECT_GT(ink_pixels(img, l.x_labels), 30) << "2K, 4K, 8K";
  EXPECT_GT(ink_pixels(img, l.bar_labels), 40) << "0 .. 100 and Accuracy (%)";
  EXPECT_GT(ink_pixels(img, l.y_title), 40) << "Needle depth";
  // Below the length labels: the x axis title.
  const Box x_title{l.grid.x, l.x_labels.y + l.x_labels.h, l.grid.w, l.height - l.x_labels.y - l.x_labels.h};
  EXPECT_GT(ink_pixels(img, x_title), 60) << "Context length (tokens)";
  // And nothing but background in the corner under the colour bar's labels.
  EXPECT_EQ(colours_in(img, {l.width - 8, l.height - 8, 8, 8}).size(), 1u);
}

TEST(Heatmap, RealFontTellsLowerFromUpperCase) {
  HeatmapData a = needle_data(), b = needle_data();
  a.title = "needle";
  b.title = "NEEDLE";
  const HeatmapLayout la = layout_heatmap(a);
  const Image ia = accuracy_heatmap(a), ib = accuracy_heatmap(b);
  ASSERT_EQ(ia.width(), ib.width());
  int differ = 0;
  for (int y = la.title.y; y < la.title.y + la.title.h; ++y)
    for (int x = 0; x < ia.width(); ++x) differ += !(ia.get(x, y) == ib.get(x, y));
  EXPECT_GT(differ, 50);
}

TEST(Heatmap, OneRowStillFitsItsAxisTitleAndBar) {
  HeatmapData d;
  d.title = "passkey: dense";
  d.lengths = {1024};
  d.rows = {"50%"};
  d.score = {{1.0}};
  const HeatmapLayout l = layout_heatmap(d);
  EXPECT_GE(l.grid.h, 140);
  const Image img = accuracy_heatmap(d);
  EXPECT_EQ(img.get(l.grid.x + 3, l.grid.y + 3), score_colour(1.0));
  EXPECT_GT(ink_pixels(img, l.y_title), 40);
}

TEST(Heatmap, BadShapesAreErrors) {
  HeatmapData d = needle_data();
  d.score.pop_back();
  EXPECT_THROW(layout_heatmap(d), Error);
  d = needle_data();
  d.score[1].pop_back();
  EXPECT_THROW(accuracy_heatmap(d), Error);
  d.lengths.clear();
  EXPECT_THROW(accuracy_heatmap(d), Error);
}

TEST(Heatmap, PngRoundTripKeepsEveryPixel) {
  const Image img = accuracy_heatmap(needle_data());
  const std::string path = temp_path("heat.png");
  write_png(path, img);
  const Image back = read_png(path);
  EXPECT_EQ(back.width(), img.width());
  EXPECT_EQ(back.data(), img.data());
  std::filesystem::remove(path);
}

namespace {
// Uniform attention over the causal keys (p = 1 / (q + 1)); the index keeps the last 10 keys.
AttentionMapData uniform_map(bool overlay) {
  AttentionMapData d;
  d.title = "a_shape=4,8: layer 3, head 1";
  d.subtitle = "100 tokens; relative error 0.500, recall 0.250";
  d.n_tokens = 100;
  d.size = 50;
  d.probs = [](int64_t q, std::vector<double>& p) { p.assign(size_t(q + 1), 1.0 / double(q + 1)); };
  if (overlay)
    d.kept = [](int64_t q, std::vector<uint8_t>& k) {
      k.assign(size_t(q + 1), 0);
      for (int64_t i = std::max<int64_t>(0, q - 10); i <= q; ++i) k[size_t(i)] = 1;
    };
  return d;
}
}  // namespace

TEST(AttentionMap, PixelsAreLogHeatOfTheirQueryRow) {
  const AttentionMapData d = uniform_map(false);
  const AttentionMapLayout l = layout_attention_map(d);
  const Image img = attention_map(d);
  EXPECT_EQ(img.width(), l.width);
  EXPECT_EQ(img.height(), l.height);
  ASSERT_EQ(l.map.w, 50);
  ASSERT_EQ(l.map.h, 50);
  for (int y : {0, 9, 25, 49}) {
    const int64_t q = 2 * y + 1;  // pixel row y shows query row 2y + 1 (2 tokens per pixel)
    const Rgb want = heat_colour((std::log10(1.0 / double(q + 1)) + 6.0) / 6.0);
    EXPECT_EQ(img.get(l.map.x, l.map.y + y), want) << y;       // key 0
    EXPECT_EQ(img.get(l.map.x + y, l.map.y + y), want) << y;   // the diagonal
    if (y < 49) {
      EXPECT_EQ(img.get(l.map.x + y + 1, l.map.y + y), kNotCausal) << y;
    }
  }
}

TEST(AttentionMap, OverlayOutlinesKeptAndDimsDropped) {
  const AttentionMapData d = uniform_map(true);
  const AttentionMapLayout l = layout_attention_map(d);
  const Image img = attention_map(d);
  const int y = 40;  // query 81: keys 71..81 kept, 0..70 dropped
  const Rgb bright = heat_colour((std::log10(1.0 / 82.0) + 6.0) / 6.0);
  EXPECT_EQ(img.get(l.map.x + 5, l.map.y + y), lerp(bright, {0, 0, 0}, 0.55));
  EXPECT_EQ(img.get(l.map.x + 35, l.map.y + y), kIndexOutline) << "left edge of the kept band (keys 70, 71)";
  EXPECT_GT(ink_pixels(img, l.legend), 60) << "the legend names kept and dropped";
  EXPECT_GT(l.legend.h, 0);
  EXPECT_EQ(layout_attention_map(uniform_map(false)).legend.h, 0);
}

TEST(AttentionMap, ColourBarAndLabels) {
  const AttentionMapData d = uniform_map(true);
  const AttentionMapLayout l = layout_attention_map(d);
  const Image img = attention_map(d);
  const int x = l.bar.x + l.bar.w / 2;
  EXPECT_EQ(img.get(x, l.bar.y), heat_colour(1.0));
  EXPECT_EQ(img.get(x, l.bar.y + l.bar.h - 1), heat_colour(0.0));
  EXPECT_GT(ink_pixels(img, l.bar_labels), 100) << "1, 10^-1 .. 10^-6 and the bar title";
  EXPECT_GT(ink_pixels(img, l.title), 200);
  EXPECT_GT(ink_pixels(img, l.x_labels), 20) << "key positions";
  EXPECT_GT(ink_pixels(img, l.y_labels), 20) << "query positions";
  EXPECT_GT(ink_pixels(img, l.y_title), 60) << "Query position (tokens)";
}

TEST(AttentionMap, LongContextsAreTickedInK) {
  AttentionMapData d = uniform_map(false);
  d.n_tokens = 65536;
  d.size = 64;
  d.probs = [](int64_t q, std::vector<double>& p) { p.assign(size_t(q + 1), 1.0 / double(q + 1)); };
  const AttentionMapLayout l = layout_attention_map(d);
  const Image img = attention_map(d);
  EXPECT_EQ(l.map.w, 64);
  EXPECT_GT(ink_pixels(img, l.x_labels), 40);
  // Labels are wider ("64K") than for 100 tokens ("100"): the y labels' box grows to fit them.
  EXPECT_GE(l.y_labels.w, layout_attention_map(uniform_map(false)).y_labels.w);
}

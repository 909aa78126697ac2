// test_png.cpp: the PNG writer (signature, libpng reads back the pixels), font and pictures.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "eval/image.h"
#include "eval/plots.h"
#include "util/error.h"

using namespace longctx;
using namespace longctx::eval;

namespace {
std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("longctx_eval_test_" + name)).string();
}
}  // namespace

TEST(Png, WritesAValidPngThatLibpngReadsBack) {
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
  EXPECT_EQ(back.get(3, 2), (Rgb{255, 0, 128}));
  EXPECT_EQ(back.get(0, 0), (Rgb{10, 20, 30}));
  std::filesystem::remove(path);
}

TEST(Png, ErrorsNameThePath) {
  try {
    write_png("/nonexistent-dir/x.png", Image(2, 2));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.png"), std::string::npos);
  }
  const std::string bad = temp_path("not.png");
  std::ofstream(bad) << "hello";
  EXPECT_THROW(read_png(bad), Error);
  std::filesystem::remove(bad);
}

TEST(Png, FontDrawsGlyphs) {
  Image img(40, 20);
  const int w = img.text(1, 1, "A1", {0, 0, 0}, 1);
  EXPECT_EQ(w, 12);
  EXPECT_EQ(img.get(1 + 2, 1), (Rgb{0, 0, 0}));  // top of the A
  EXPECT_EQ(img.get(1, 1), (Rgb{255, 255, 255}));
  EXPECT_EQ(glyph('a'), glyph('A'));
  EXPECT_EQ(glyph('\x01'), glyph('?'));
}

TEST(Png, NeedleHeatmapHasCellColoursAndLabels) {
  HeatmapData d;
  d.title = "PASSKEY - DENSE";
  d.lengths = {2048, 4096};
  d.rows = {"0%", "100%"};
  d.score = {{1.0, 0.0}, {0.5, NAN}};
  Image img = accuracy_heatmap(d);
  EXPECT_GT(img.width(), 200);
  // Find the green and red cells' colours somewhere in the picture.
  bool green = false, red = false;
  for (int y = 0; y < img.height(); ++y)
    for (int x = 0; x < img.width(); ++x) {
      green |= img.get(x, y) == score_colour(1.0);
      red |= img.get(x, y) == score_colour(0.0);
    }
  EXPECT_TRUE(green);
  EXPECT_TRUE(red);
  const std::string path = temp_path("heat.png");
  write_png(path, img);
  EXPECT_EQ(read_png(path).width(), img.width());
  std::filesystem::remove(path);
}

TEST(Png, AttentionMapDrawsHeatAndOverlay) {
  AttentionMapData d;
  d.title = "TEST";
  d.n_tokens = 100;
  d.size = 50;
  d.probs = [](int64_t q, std::vector<double>& p) { p.assign(size_t(q + 1), 1.0 / double(q + 1)); };
  d.kept = [](int64_t q, std::vector<uint8_t>& k) {
    k.assign(size_t(q + 1), 0);
    for (int64_t i = std::max<int64_t>(0, q - 10); i <= q; ++i) k[size_t(i)] = 1;
  };
  Image img = attention_map(d);
  bool overlay = false;
  for (int y = 0; y < img.height(); ++y)
    for (int x = 0; x < img.width(); ++x) overlay |= img.get(x, y) == Rgb{0, 230, 255};
  EXPECT_TRUE(overlay);
}

// plots.cpp: needle heatmaps and attention maps (see plots.h).
#include "eval/plots.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace longctx::eval {
namespace {

constexpr int kScale = 2;                  // font scale
constexpr Rgb kInk{30, 30, 30};
constexpr Rgb kGrid{255, 255, 255};
constexpr Rgb kNotRun{200, 200, 200};
constexpr Rgb kOverlay{0, 230, 255};       // index outline
constexpr Rgb kMasked{70, 70, 70};         // above the diagonal (not causal)
constexpr double kLogFloor = -6.0;         // attention maps: log10 p clamped at 1e-6
constexpr double kDroppedDim = 0.55;       // attention maps: darken dropped causal cells

Rgb lerp(Rgb a, Rgb b, double t) {
  auto m = [t](uint8_t x, uint8_t y) { return uint8_t(std::lround(x + (y - x) * std::clamp(t, 0.0, 1.0))); };
  return {m(a.r, b.r), m(a.g, b.g), m(a.b, b.b)};
}

std::string length_label(int64_t n) {
  if (n >= 1024 * 1024 && n % (1024 * 1024) == 0) return fmt::format("{}M", n / (1024 * 1024));
  if (n >= 1024 && n % 1024 == 0) return fmt::format("{}K", n / 1024);
  return fmt::format("{}", n);
}

}  // namespace

Rgb score_colour(double s) {
  constexpr Rgb red{215, 48, 39}, yellow{254, 224, 139}, green{26, 152, 80};
  s = std::clamp(s, 0.0, 1.0);
  return s < 0.5 ? lerp(red, yellow, s * 2) : lerp(yellow, green, (s - 0.5) * 2);
}

Rgb heat_colour(double t) {
  constexpr Rgb stops[] = {{10, 10, 40}, {80, 20, 120}, {190, 50, 90}, {250, 140, 40}, {252, 250, 190}};
  t = std::clamp(t, 0.0, 1.0) * 4.0;
  const int i = std::min(3, int(t));
  return lerp(stops[i], stops[i + 1], t - i);
}

Image accuracy_heatmap(const HeatmapData& d) {
  if (d.lengths.empty() || d.rows.empty()) fail("heatmap needs at least one length and one row");
  const int cell_w = std::max(64, Image::text_width("100", kScale) + 16), cell_h = 30;
  int left = 60;
  for (const auto& r : d.rows) left = std::max(left, Image::text_width(r, kScale) + 40);
  const int top = 50, right = 90, bottom = 70;
  const int nx = int(d.lengths.size()), ny = int(d.rows.size());
  const int W = std::max({left + nx * cell_w + right, left + Image::text_width(d.title, kScale) + 20,
                          Image::text_width("CONTEXT LENGTH (TOKENS)", kScale) + 8});
  // The vertical axis title: full size when it fits beside the grid, else small; the x axis
  // labels go below whichever is taller.
  const int y_scale = Image::text_width(d.y_title, kScale) <= ny * cell_h ? kScale : 1;
  const int ytw = Image::text_width(d.y_title, y_scale);
  const int grid_h = std::max(ny * cell_h, ytw);
  const int H = top + grid_h + bottom;
  Image img(W, H);
  img.text(left, 16, d.title, kInk, kScale);
  for (int y = 0; y < ny; ++y)
    for (int x = 0; x < nx; ++x) {
      const double s = d.score[size_t(y)][size_t(x)];
      const int px = left + x * cell_w, py = top + y * cell_h;
      img.fill_rect(px, py, cell_w, cell_h, std::isnan(s) ? kNotRun : score_colour(s));
      img.rect_outline(px, py, cell_w, cell_h, kGrid);
      if (!std::isnan(s)) {
        const std::string t = fmt::format("{:.0f}", s * 100);
        img.text(px + (cell_w - Image::text_width(t, kScale)) / 2, py + (cell_h - Image::text_height(kScale)) / 2,
                 t, kInk, kScale);
      }
    }
  // Axes: depth labels on the left, lengths below, axis titles.
  for (int y = 0; y < ny; ++y) {
    const std::string& t = d.rows[size_t(y)];
    img.text(left - 8 - Image::text_width(t, kScale), top + y * cell_h + (cell_h - Image::text_height(kScale)) / 2, t,
             kInk, kScale);
  }
  for (int x = 0; x < nx; ++x) {
    const std::string t = length_label(d.lengths[size_t(x)]);
    img.text(left + x * cell_w + (cell_w - Image::text_width(t, kScale)) / 2, top + grid_h + 8, t, kInk, kScale);
  }
  const std::string xt = "CONTEXT LENGTH (TOKENS)";
  img.text(std::max(4, left + (nx * cell_w - Image::text_width(xt, kScale)) / 2), top + grid_h + 36, xt, kInk,
           kScale);
  img.text_vertical(12, top + (grid_h + ytw) / 2, d.y_title, kInk, y_scale);
  // Colour bar: 0% (bottom) .. 100% (top).
  const int bx = left + nx * cell_w + 24, bw = 16, bh = std::max(ny * cell_h, 60);
  for (int i = 0; i < bh; ++i) img.fill_rect(bx, top + i, bw, 1, score_colour(1.0 - double(i) / (bh - 1)));
  img.rect_outline(bx, top, bw, bh, kInk);
  img.text(bx + bw + 4, top, "100", kInk, 1);
  img.text(bx + bw + 4, top + bh - 7, "0", kInk, 1);
  return img;
}

Image attention_map(const AttentionMapData& d) {
  if (d.n_tokens <= 0) fail("attention map needs at least one token");
  const int S = int(std::min<int64_t>(d.size, d.n_tokens));
  const int left = 80, top = 50, right = 110, bottom = 70;
  Image img(std::max(left + S + right, left + Image::text_width(d.title, kScale) + 20), top + S + bottom);
  img.text(left, 16, d.title, kInk, kScale);
  std::vector<double> p;
  std::vector<uint8_t> kept;
  std::vector<double> cell(static_cast<size_t>(S));
  std::vector<int> keep_state(static_cast<size_t>(S)), prev_state(static_cast<size_t>(S), -1);
  const double col_per_px = double(d.n_tokens) / S;
  for (int y = 0; y < S; ++y) {
    // One representative query row per pixel row (the last row it covers).
    const int64_t q = std::min<int64_t>(d.n_tokens - 1, int64_t(std::ceil((y + 1) * col_per_px)) - 1);
    d.probs(q, p);
    if (d.kept) d.kept(q, kept);
    std::fill(cell.begin(), cell.end(), 0.0);
    std::fill(keep_state.begin(), keep_state.end(), -1);  // -1 masked, 0 dropped, 1 kept, 2 mixed
    for (int64_t k = 0; k <= q; ++k) {
      const int x = std::min(S - 1, int(double(k) / col_per_px));
      cell[size_t(x)] = std::max(cell[size_t(x)], p[size_t(k)]);
      if (d.kept) {
        const int st = kept[size_t(k)] ? 1 : 0;
        int& ks = keep_state[size_t(x)];
        ks = ks < 0 ? st : (ks == st ? ks : 2);
      }
    }
    for (int x = 0; x < S; ++x) {
      const int64_t k0 = int64_t(double(x) * col_per_px);
      Rgb c = kMasked;
      if (k0 <= q) {
        const double lg = cell[size_t(x)] > 0 ? std::log10(cell[size_t(x)]) : kLogFloor;
        c = heat_colour((std::max(lg, kLogFloor) - kLogFloor) / -kLogFloor);
        if (d.kept && keep_state[size_t(x)] == 0) c = lerp(c, {0, 0, 0}, kDroppedDim);
      }
      img.set(left + x, top + y, c);
    }
    if (d.kept) {  // outline: kept-state changes along the row and against the previous row
      for (int x = 0; x < S; ++x) {
        const int ks = keep_state[size_t(x)] >= 1 ? 1 : 0;
        const int kl = x > 0 ? (keep_state[size_t(x - 1)] >= 1 ? 1 : 0) : 0;
        const int ku = prev_state[size_t(x)] >= 1 ? 1 : 0;
        if (keep_state[size_t(x)] >= 0 && (ks != kl || (y > 0 && ks != ku))) img.set(left + x, top + y, kOverlay);
      }
      prev_state = keep_state;
    }
  }
  img.rect_outline(left - 1, top - 1, S + 2, S + 2, kInk);
  // Ticks: 0, n/2, n on both axes.
  for (int64_t v : {int64_t(0), d.n_tokens / 2, d.n_tokens}) {
    const int off = int(double(v) / col_per_px);
    const std::string t = length_label(v);
    img.text(left + off - Image::text_width(t, kScale) / 2, top + S + 8, t, kInk, kScale);
    img.text(left - 8 - Image::text_width(t, kScale), top + std::min(off, S) - 7, t, kInk, kScale);
  }
  const std::string xt = "KEY POSITION", yt = "QUERY POSITION";
  img.text(left + (S - Image::text_width(xt, kScale)) / 2, top + S + 36, xt, kInk, kScale);
  img.text_vertical(10, top + (S + Image::text_width(yt, kScale)) / 2, yt, kInk, kScale);
  // Colour bar: log10 attention 0 (top) .. -6 (bottom).
  const int bx = left + S + 24, bw = 16, bh = S;
  for (int i = 0; i < bh; ++i) img.fill_rect(bx, top + i, bw, 1, heat_colour(1.0 - double(i) / (bh - 1)));
  img.rect_outline(bx, top, bw, bh, kInk);
  img.text(bx + bw + 4, top, "1", kInk, kScale);
  img.text(bx + bw + 4, top + bh - 14, "1E-6", kInk, kScale);
  if (d.kept) {
    img.fill_rect(bx, top + bh + 12, 12, 12, kOverlay);
    img.text(bx + 16, top + bh + 12, "INDEX", kInk, kScale);
  }
  return img;
}

}  // namespace longctx::eval

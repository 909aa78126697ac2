// plots.cpp: needle heatmaps and attention maps (see plots.h). Each picture is laid out first
// (layout_*: text is measured with the same fonts it is drawn in), then drawn on a Canvas.
#include "eval/plots.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "eval/canvas.h"
#include "eval/lengths.h"
#include "util/error.h"

namespace longctx::eval {
namespace {

constexpr Rgb kInk{30, 30, 30};
constexpr Rgb kMutedInk{90, 90, 90};       // subtitle
constexpr Rgb kFrame{120, 120, 120};       // map frame and tick marks
constexpr Rgb kCellSeparator{255, 255, 255};
const TextStyle kTitle{17, true, kInk};
const TextStyle kSubtitle{13, false, kMutedInk};
const TextStyle kLabel{13, false, kInk};   // tick labels
const TextStyle kAxis{14, false, kInk};    // axis titles
const TextStyle kCell{12, false, kInk};    // the score in a heatmap cell

constexpr int kPad = 16;         // outer margin
constexpr int kTitleH = 22;      // title line
constexpr int kSubtitleH = 18;   // subtitle line
constexpr int kTitleGap = 12;    // title block to plot
constexpr int kTick = 5;         // tick mark length
constexpr int kLabelGap = 4;     // tick mark to its label
constexpr int kLabelH = 16;      // a line of tick labels
constexpr int kAxisH = 18;       // a line of axis title
constexpr int kAxisGap = 8;      // tick labels to the axis title
constexpr int kBarGap = 24;      // plot to colour bar
constexpr int kBarW = 18;
constexpr int kMinBarH = 140;    // room for the bar's tick labels
constexpr int kCellH = 32;
constexpr int kMinCellW = 56;
constexpr int kLegendH = 20;

// Attention maps.
constexpr double kLogFloor = -6.0;    // log10 p clamped at 1e-6: the bar's bottom
constexpr double kDroppedDim = 0.55;  // darken causal cells the index drops
constexpr int kMaxPositionTicks = 6;

// Text: a line of text is measured on this canvas before the picture's size is known.
struct Measure {
  Canvas c{1, 1};
  int width(const std::string& s, const TextStyle& st) { return int(std::ceil(c.text_width(s, st))); }
};

Box title_box(Measure& m, const std::string& title, const std::string& subtitle) {
  const int w = std::max(m.width(title, kTitle), subtitle.empty() ? 0 : m.width(subtitle, kSubtitle));
  return {kPad, kPad, w, kTitleH + (subtitle.empty() ? 0 : kSubtitleH)};
}

// Title and subtitle centred over the plot [x0, x0 + w), kept inside the picture.
void draw_title(Canvas& c, const Box& t, int x0, int w, const std::string& title, const std::string& subtitle) {
  const double cx = std::clamp(x0 + w / 2.0, kPad + t.w / 2.0, c.width() - kPad - t.w / 2.0);
  c.text(cx, t.y + kTitleH / 2.0, title, kTitle, Align::centre);
  if (!subtitle.empty()) c.text(cx, t.y + kTitleH + kSubtitleH / 2.0, subtitle, kSubtitle, Align::centre);
}

// Relative luminance in [0, 1]: cell text is white on dark cells.
double luminance(Rgb c) { return (0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b) / 255.0; }

// Token positions to tick: multiples of a power of two times 1K from 2K tokens on (the lengths'
// own units), else of 1, 2 or 5 times a power of ten; at most kMaxPositionTicks + 1 ticks.
std::vector<int64_t> position_ticks(int64_t n) {
  int64_t step = 1024;
  if (n >= 2048) {
    while (n / step > kMaxPositionTicks) step *= 2;
  } else {
    constexpr int64_t kSteps[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000};  // n < 2048: 1000 gives <= 2 ticks
    step = *std::find_if(std::begin(kSteps), std::end(kSteps), [n](int64_t s) { return n / s <= kMaxPositionTicks; });
  }
  std::vector<int64_t> ticks;
  for (int64_t v = 0; v <= n; v += step) ticks.push_back(v);
  return ticks;
}

// "10⁻³" for a decade's exponent; "1" for 0.
std::string decade_label(int e) {
  static const char* kSuperscript[] = {"\u2070", "\u00b9", "\u00b2", "\u00b3", "\u2074",
                                       "\u2075", "\u2076", "\u2077", "\u2078", "\u2079"};
  if (e == 0) return "1";
  return fmt::format("10\u207b{}", kSuperscript[-e]);
}

// A vertical colour bar with ticks and labels on its right and its title beyond them.
struct BarTick {
  double frac;  // 0 at the bottom, 1 at the top
  std::string label;
};
void draw_bar(Canvas& c, const Box& bar, const Box& labels, const std::vector<BarTick>& ticks,
              const std::string& title, const std::function<Rgb(double)>& colour) {
  for (int i = 0; i < bar.h; ++i) c.fill_rect(bar.x, bar.y + i, bar.w, 1, colour(1.0 - double(i) / (bar.h - 1)));
  c.outline_rect(bar.x - 1, bar.y - 1, bar.w + 2, bar.h + 2, kFrame);
  const int lx = bar.x + bar.w + 1;
  for (const auto& t : ticks) {
    const double y = bar.y + (1.0 - t.frac) * (bar.h - 1) + 0.5;
    c.line(lx, y, lx + kTick, y, kFrame);
    c.text(lx + kTick + kLabelGap, y, t.label, kLabel);
  }
  c.text(labels.x + labels.w - kAxisH / 2.0, bar.y + bar.h / 2.0, title, kAxis, Align::centre, true);
}

Box bar_labels_box(Measure& m, const Box& bar, const std::vector<BarTick>& ticks) {
  int w = 0;
  for (const auto& t : ticks) w = std::max(w, m.width(t.label, kLabel));
  return {bar.x + bar.w + 1, bar.y - kLabelH / 2, kTick + kLabelGap + w + kAxisGap + kAxisH, bar.h + kLabelH};
}

std::vector<BarTick> score_ticks() { return {{0, "0"}, {0.25, "25"}, {0.5, "50"}, {0.75, "75"}, {1, "100"}}; }

std::vector<BarTick> decade_ticks() {
  std::vector<BarTick> t;
  for (int e = int(kLogFloor); e <= 0; ++e) t.push_back({(e - kLogFloor) / -kLogFloor, decade_label(e)});
  return t;
}

const char* kHeatBarTitle = "Accuracy (%)";
const char* kHeatXTitle = "Context length (tokens)";
const char* kAttnBarTitle = "Attention probability";
const char* kAttnXTitle = "Key position (tokens)";
const char* kAttnYTitle = "Query position (tokens)";
const char* kLegendKept = "kept by the index (outlined)";
const char* kLegendDropped = "dropped by the index (dimmed)";

}  // namespace

HeatmapLayout layout_heatmap(const HeatmapData& d) {
  if (d.lengths.empty() || d.rows.empty()) fail("heatmap needs at least one length and one row");
  if (d.score.size() != d.rows.size()) fail("heatmap has {} score rows for {} row labels", d.score.size(), d.rows.size());
  for (const auto& r : d.score)
    if (r.size() != d.lengths.size()) fail("heatmap score row has {} values for {} lengths", r.size(), d.lengths.size());
  Measure m;
  HeatmapLayout l;
  l.title = title_box(m, d.title, d.subtitle);
  const int nx = int(d.lengths.size()), ny = int(d.rows.size());
  int row_w = 0, col_w = 0;
  for (const auto& r : d.rows) row_w = std::max(row_w, m.width(r, kLabel));
  for (int64_t n : d.lengths) col_w = std::max(col_w, m.width(format_length(n), kLabel));
  l.cell_w = std::max({kMinCellW, col_w + 12, m.width("100", kCell) + 20});
  // Cells grow when few rows cannot hold the vertical axis title or the colour bar's ticks.
  const int min_grid_h = std::max(m.width(d.y_title, kAxis) + 8, kMinBarH);
  l.cell_h = std::max(kCellH, (min_grid_h + ny - 1) / ny);
  const int left = kPad + kAxisH + kAxisGap + row_w + kLabelGap + kTick;
  const int top = l.title.y + l.title.h + kTitleGap;
  l.grid = {left, top, nx * l.cell_w, ny * l.cell_h};
  l.y_labels = {left - kTick - kLabelGap - row_w, top, row_w + kLabelGap + kTick, l.grid.h};
  l.y_title = {kPad, top, kAxisH, l.grid.h};
  l.x_labels = {left, top + l.grid.h, l.grid.w, kTick + kLabelGap + kLabelH};
  l.bar = {l.grid.x + l.grid.w + kBarGap, top, kBarW, l.grid.h};
  l.bar_labels = bar_labels_box(m, l.bar, score_ticks());
  const int x_title_w = m.width(kHeatXTitle, kAxis);
  l.width = std::max({l.bar_labels.x + l.bar_labels.w + kPad, l.title.w + 2 * kPad, left + x_title_w + kPad});
  l.height = l.x_labels.y + l.x_labels.h + kAxisGap + kAxisH + kPad;
  return l;
}

Image accuracy_heatmap(const HeatmapData& d) {
  const HeatmapLayout l = layout_heatmap(d);
  Canvas c(l.width, l.height);
  draw_title(c, l.title, l.grid.x, l.grid.w, d.title, d.subtitle);
  const int nx = int(d.lengths.size()), ny = int(d.rows.size());
  for (int r = 0; r < ny; ++r)
    for (int x = 0; x < nx; ++x) {
      const double s = d.score[size_t(r)][size_t(x)];
      const int px = l.grid.x + x * l.cell_w, py = l.grid.y + r * l.cell_h;
      const Rgb fill = std::isnan(s) ? kNotRun : score_colour(s);
      c.fill_rect(px, py, l.cell_w, l.cell_h, fill);
      if (!std::isnan(s)) {
        TextStyle st = kCell;
        if (luminance(fill) < 0.5) st.colour = {255, 255, 255};
        c.text(px + l.cell_w / 2.0, py + l.cell_h / 2.0, fmt::format("{:.0f}", s * 100), st, Align::centre);
      }
    }
  for (int x = 1; x < nx; ++x)
    c.line(l.grid.x + x * l.cell_w + 0.5, l.grid.y, l.grid.x + x * l.cell_w + 0.5, l.grid.y + l.grid.h, kCellSeparator);
  for (int r = 1; r < ny; ++r)
    c.line(l.grid.x, l.grid.y + r * l.cell_h + 0.5, l.grid.x + l.grid.w, l.grid.y + r * l.cell_h + 0.5, kCellSeparator);
  // Ticks and labels: rows on the left, lengths below; axis titles beyond them.
  for (int r = 0; r < ny; ++r) {
    const double y = l.grid.y + (r + 0.5) * l.cell_h;
    c.line(l.grid.x - kTick, y, l.grid.x, y, kFrame);
    c.text(l.grid.x - kTick - kLabelGap, y, d.rows[size_t(r)], kLabel, Align::right);
  }
  for (int x = 0; x < nx; ++x) {
    const double cx = l.grid.x + (x + 0.5) * l.cell_w;
    const int y0 = l.grid.y + l.grid.h;
    c.line(cx, y0, cx, y0 + kTick, kFrame);
    c.text(cx, y0 + kTick + kLabelGap + kLabelH / 2.0, format_length(d.lengths[size_t(x)]), kLabel, Align::centre);
  }
  c.text(l.grid.x + l.grid.w / 2.0, l.x_labels.y + l.x_labels.h + kAxisGap + kAxisH / 2.0, kHeatXTitle, kAxis,
         Align::centre);
  c.text(l.y_title.x + kAxisH / 2.0, l.y_title.y + l.y_title.h / 2.0, d.y_title, kAxis, Align::centre, true);
  draw_bar(c, l.bar, l.bar_labels, score_ticks(), kHeatBarTitle, score_colour);
  return c.image();
}

AttentionMapLayout layout_attention_map(const AttentionMapData& d) {
  if (d.n_tokens <= 0) fail("attention map needs at least one token");
  if (d.size <= 0) fail("attention map size {} is not positive", d.size);
  Measure m;
  AttentionMapLayout l;
  l.title = title_box(m, d.title, d.subtitle);
  const int S = int(std::min<int64_t>(d.size, d.n_tokens));
  int tick_w = 0;
  for (int64_t v : position_ticks(d.n_tokens)) tick_w = std::max(tick_w, m.width(format_length(v), kLabel));
  const int left = kPad + kAxisH + kAxisGap + tick_w + kLabelGap + kTick;
  const int top = l.title.y + l.title.h + kTitleGap;
  // The plot area is as tall as the map, the colour bar's ticks and the vertical axis title need.
  const int plot_h = std::max({S, kMinBarH, m.width(kAttnYTitle, kAxis) + 8});
  l.map = {left, top, S, S};
  l.y_labels = {left - kTick - kLabelGap - tick_w, top - kLabelH / 2, tick_w + kLabelGap + kTick, S + kLabelH};
  l.y_title = {kPad, top, kAxisH, plot_h};
  l.x_labels = {left - tick_w / 2, top + S, S + tick_w, kTick + kLabelGap + kLabelH};
  l.bar = {left + S + kBarGap, top, kBarW, std::max(S, kMinBarH)};
  l.bar_labels = bar_labels_box(m, l.bar, decade_ticks());
  const int axis_bottom = std::max(top + plot_h, l.x_labels.y + l.x_labels.h + kAxisGap + kAxisH);
  int right = std::max({l.bar_labels.x + l.bar_labels.w, left + m.width(kAttnXTitle, kAxis)});
  if (d.kept) {
    const int w = kLegendH + m.width(kLegendKept, kLabel) + 3 * kLegendH + m.width(kLegendDropped, kLabel);
    l.legend = {left, axis_bottom + kAxisGap, w, kLegendH};
    right = std::max(right, left + w);
  }
  l.width = std::max(right + kPad, l.title.w + 2 * kPad);
  l.height = (d.kept ? l.legend.y + l.legend.h : axis_bottom) + kPad;
  return l;
}

Image attention_map(const AttentionMapData& d) {
  const AttentionMapLayout l = layout_attention_map(d);
  const int S = l.map.w;
  Image heat(S, S);
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
    std::fill(keep_state.begin(), keep_state.end(), -1);  // -1 not causal, 0 dropped, 1 kept, 2 mixed
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
      Rgb c = kNotCausal;
      if (k0 <= q) {
        const double lg = cell[size_t(x)] > 0 ? std::log10(cell[size_t(x)]) : kLogFloor;
        c = heat_colour((std::max(lg, kLogFloor) - kLogFloor) / -kLogFloor);
        if (d.kept && keep_state[size_t(x)] == 0) c = lerp(c, {0, 0, 0}, kDroppedDim);
      }
      heat.set(x, y, c);
    }
    if (d.kept) {  // outline: kept-state changes along the row and against the previous row
      for (int x = 0; x < S; ++x) {
        const int ks = keep_state[size_t(x)] >= 1 ? 1 : 0;
        const int kl = x > 0 ? (keep_state[size_t(x - 1)] >= 1 ? 1 : 0) : 0;
        const int ku = prev_state[size_t(x)] >= 1 ? 1 : 0;
        if (keep_state[size_t(x)] >= 0 && (ks != kl || (y > 0 && ks != ku))) heat.set(x, y, kIndexOutline);
      }
      prev_state = keep_state;
    }
  }
  Canvas c(l.width, l.height);
  draw_title(c, l.title, l.map.x, l.map.w, d.title, d.subtitle);
  c.put(l.map.x, l.map.y, heat);
  c.outline_rect(l.map.x - 1, l.map.y - 1, S + 2, S + 2, kFrame);
  // Position ticks on both axes, in tokens (a tick at v sits where key / query v is drawn).
  for (int64_t v : position_ticks(d.n_tokens)) {
    const double off = std::min(double(S), double(v) / col_per_px);
    const std::string t = format_length(v);
    const int x0 = l.map.x, y0 = l.map.y;
    c.line(x0 + off, y0 + S + 1, x0 + off, y0 + S + 1 + kTick, kFrame);
    c.text(x0 + off, y0 + S + 1 + kTick + kLabelGap + kLabelH / 2.0, t, kLabel, Align::centre);
    c.line(x0 - 1 - kTick, y0 + off, x0 - 1, y0 + off, kFrame);
    c.text(x0 - 1 - kTick - kLabelGap, y0 + off, t, kLabel, Align::right);
  }
  c.text(l.map.x + S / 2.0, l.x_labels.y + l.x_labels.h + kAxisGap + kAxisH / 2.0, kAttnXTitle, kAxis, Align::centre);
  c.text(l.y_title.x + kAxisH / 2.0, l.y_title.y + l.y_title.h / 2.0, kAttnYTitle, kAxis, Align::centre, true);
  draw_bar(c, l.bar, l.bar_labels, decade_ticks(), kAttnBarTitle, [](double t) { return heat_colour(t); });
  if (d.kept) {
    const Box& g = l.legend;
    const int sq = kLegendH - 6;
    const double cy = g.y + g.h / 2.0;
    int x = g.x;
    c.fill_rect(x, g.y + 3, sq, sq, heat_colour(0.5));
    c.outline_rect(x, g.y + 3, sq, sq, kIndexOutline);
    x += kLegendH;
    c.text(x, cy, kLegendKept, kLabel);
    x += int(std::ceil(c.text_width(kLegendKept, kLabel))) + 2 * kLegendH;
    c.fill_rect(x, g.y + 3, sq, sq, lerp(heat_colour(0.5), {0, 0, 0}, kDroppedDim));
    x += kLegendH;
    c.text(x, cy, kLegendDropped, kLabel);
  }
  return c.image();
}

}  // namespace longctx::eval

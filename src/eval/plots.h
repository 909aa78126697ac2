// plots.h: the eval pictures, drawn with cairo in DejaVu Sans (canvas.h).
//
// accuracy_heatmap: the needle plot of the papers. Rows are needle depths (0% at the top) or
// tasks, columns context lengths; each cell is coloured red (0%) -> yellow (50%) -> green (100%)
// (score_colour) with its score written in it; grey cells were not run. Title and subtitle on top,
// tick labels and axis titles on both axes, and a colour bar "Accuracy (%)" with ticks 0..100.
// attention_map: one head's attention as a log-scale heat map (rows = query positions, columns =
// key positions, max-pooled into at most `size` pixels per side so thin sinks and slashes stay
// visible; heat_colour over log10 p in [-6, 0]), positions ticked in tokens on both axes, a colour
// bar with one tick per decade, and the sparse index overlaid: kept regions outlined in cyan,
// dropped causal regions dimmed, the non-causal triangle light grey.
//
// layout_*() give the boxes each picture is drawn in (what the drawing and the tests share).
// Without picture support every function here throws the error of require_pictures() (image.h).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eval/image.h"

namespace longctx::eval {

struct Box {
  int x = 0, y = 0, w = 0, h = 0;  // pixels; top-left corner and size
};

struct HeatmapData {
  std::string title;                     // e.g. "niah: dense"
  std::string subtitle;                  // e.g. "SmolLM2-135M-Instruct, 3 samples per cell"; may be empty
  std::vector<int64_t> lengths;          // columns, tokens
  std::vector<std::string> rows;         // row labels, top to bottom ("0%", "50%" or task names)
  std::string y_title = "Needle depth";
  std::vector<std::vector<double>> score;  // [row][length] in [0, 1]; NaN = not run
};

struct HeatmapLayout {
  int width = 0, height = 0;
  Box title;     // title and subtitle
  Box grid;      // the cells: cell (r, c) is grid.x + c * cell_w, grid.y + r * cell_h
  int cell_w = 0, cell_h = 0;
  Box y_labels;  // row labels, left of the grid
  Box y_title;   // the vertical axis title, left of the row labels
  Box x_labels;  // length labels, under the grid
  Box bar;       // the colour bar: 100% at the top row, 0% at the bottom row
  Box bar_labels;  // its tick values and title
};
HeatmapLayout layout_heatmap(const HeatmapData& d);
Image accuracy_heatmap(const HeatmapData& d);

struct AttentionMapData {
  std::string title;     // e.g. "a_shape=64,1024: layer 6, head 1"
  std::string subtitle;  // e.g. "4080 tokens; relative error 0.120, recall 0.910"; may be empty
  int64_t n_tokens = 0;
  int size = 512;  // pixels per side of the map (<= n_tokens)
  // probs(q, p): dense attention of row q over keys [0, q] into p (size q + 1).
  std::function<void(int64_t q, std::vector<double>& p)> probs;
  // kept(q, k): keep flags of row q over keys [0, q] (size q + 1); empty function = no overlay.
  std::function<void(int64_t q, std::vector<uint8_t>& kept)> kept;
};

struct AttentionMapLayout {
  int width = 0, height = 0;
  Box title;
  Box map;       // map pixel (x, y): keys [x, x + 1) * n / size of query row ~(y + 1) * n / size
  Box y_labels;  // query positions
  Box y_title;   // the vertical axis title
  Box x_labels;  // key positions
  Box bar;       // colour bar: p = 1 at the top row, 1e-6 at the bottom row
  Box bar_labels;
  Box legend;    // the index overlay's key (empty without an overlay)
};
AttentionMapLayout layout_attention_map(const AttentionMapData& d);
Image attention_map(const AttentionMapData& d);

// The colours attention_map uses beside heat_colour (tests look for them).
inline constexpr Rgb kIndexOutline{0, 230, 255};
inline constexpr Rgb kNotCausal{228, 228, 228};
inline constexpr Rgb kNotRun{200, 200, 200};

}  // namespace longctx::eval

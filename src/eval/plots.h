// plots.h: the eval pictures.
//
// accuracy_heatmap: the needle plot of the papers: depth (rows, 0% at the top; or tasks) x context length
// (columns), each cell coloured red (0%) -> yellow (50%) -> green (100%) with its score written
// in it, labelled axes, a title and a colour bar.
// attention_map: one head's attention as a log-scale heat map (rows = queries, columns = keys,
// max-pooled into at most `size` pixels per side so thin sinks and slashes stay visible), with
// the sparse index overlaid: kept regions outlined in cyan and dropped causal regions dimmed.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eval/image.h"

namespace longctx::eval {

struct HeatmapData {
  std::string title;
  std::vector<int64_t> lengths;          // columns
  std::vector<std::string> rows;         // row labels, top to bottom ("0%", "50%" or task names)
  std::string y_title = "NEEDLE DEPTH";
  std::vector<std::vector<double>> score;  // [row][length] in [0, 1]; NaN = not run
};
Image accuracy_heatmap(const HeatmapData& d);

// Red -> yellow -> green for a score in [0, 1].
Rgb score_colour(double s);
// Dark blue -> purple -> orange -> pale yellow for t in [0, 1] (attention heat).
Rgb heat_colour(double t);

struct AttentionMapData {
  std::string title;
  int64_t n_tokens = 0;
  int size = 512;  // pixels per side of the map (<= n_tokens)
  // probs(q, p): dense attention of row q over keys [0, q] into p (size q + 1).
  std::function<void(int64_t q, std::vector<double>& p)> probs;
  // kept(q, k): keep flags of row q over keys [0, q] (size q + 1); empty function = no overlay.
  std::function<void(int64_t q, std::vector<uint8_t>& kept)> kept;
};
Image attention_map(const AttentionMapData& d);

}  // namespace longctx::eval

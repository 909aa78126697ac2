// no_pictures.cpp: the picture functions of a build without cairo (LONGCTX_PICTURES=OFF, or
// AUTO without libcairo2-dev). Each fails with one message; the runners call require_pictures()
// before loading a model, so `--out DIR` stops before any work.
#include "eval/image.h"
#include "eval/plots.h"
#include "util/error.h"

namespace longctx::eval {

bool pictures_built() { return false; }

void require_pictures() {
  fail("this build has no picture support (cairo): rebuild with -DLONGCTX_PICTURES=ON (Debian package "
       "libcairo2-dev), or leave out --out");
}

void write_png(const std::string&, const Image&) { require_pictures(); }
Image read_png(const std::string&) { require_pictures(); return {}; }
HeatmapLayout layout_heatmap(const HeatmapData&) { require_pictures(); return {}; }
Image accuracy_heatmap(const HeatmapData&) { require_pictures(); return {}; }
AttentionMapLayout layout_attention_map(const AttentionMapData&) { require_pictures(); return {}; }
Image attention_map(const AttentionMapData&) { require_pictures(); return {}; }

}  // namespace longctx::eval

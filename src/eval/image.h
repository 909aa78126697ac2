// image.h: an RGB raster (what the eval pictures are drawn into and what tests read back), PNG
// file I/O, and whether this build can draw pictures at all.
//
// Pictures are drawn with cairo (canvas.h) when the build has it (CMake LONGCTX_PICTURES, on when
// pkg-config finds cairo). Without it, require_pictures() and every picture function fail with
// the same message, so that `longctx eval --out DIR` stops before any work and the rest of eval
// still runs (GPU carry builds turn pictures off to keep cairo's shared libraries at home).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "eval/colour_maps.h"

namespace longctx::eval {

class Image {
 public:
  Image() = default;
  Image(int w, int h, Rgb fill = {255, 255, 255});  // throws Error when w or h is not positive
  int width() const { return w_; }
  int height() const { return h_; }
  Rgb get(int x, int y) const;  // black outside the image
  void set(int x, int y, Rgb c);  // ignores pixels outside the image
  const std::vector<uint8_t>& data() const { return px_; }

 private:
  int w_ = 0, h_ = 0;
  std::vector<uint8_t> px_;  // [h][w][3] RGB, row-major
};

// True when this build draws pictures (cairo).
bool pictures_built();
// Throws Error ("this build has no picture support ...") when !pictures_built().
void require_pictures();

// 8-bit RGB PNG through cairo. Throw Error naming the path when the file cannot be written or read.
void write_png(const std::string& path, const Image& img);
Image read_png(const std::string& path);

}  // namespace longctx::eval

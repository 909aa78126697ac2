// image.cpp: the RGB raster (see image.h). PNG I/O lives with the drawing library: canvas.cpp,
// or no_pictures.cpp in a build without cairo.
#include "eval/image.h"

#include "util/error.h"

namespace longctx::eval {

Image::Image(int w, int h, Rgb fill) : w_(w), h_(h) {
  if (w <= 0 || h <= 0) fail("image size {}x{} is not positive", w, h);
  px_.resize(size_t(w) * size_t(h) * 3);
  for (size_t i = 0; i < px_.size(); i += 3) {
    px_[i] = fill.r;
    px_[i + 1] = fill.g;
    px_[i + 2] = fill.b;
  }
}

Rgb Image::get(int x, int y) const {
  if (x < 0 || y < 0 || x >= w_ || y >= h_) return {};
  const size_t i = (size_t(y) * size_t(w_) + size_t(x)) * 3;
  return {px_[i], px_[i + 1], px_[i + 2]};
}

void Image::set(int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= w_ || y >= h_) return;
  const size_t i = (size_t(y) * size_t(w_) + size_t(x)) * 3;
  px_[i] = c.r;
  px_[i + 1] = c.g;
  px_[i + 2] = c.b;
}

}  // namespace longctx::eval

// image.cpp: RGB raster drawing and PNG read/write through libpng (see image.h).
#include "eval/image.h"

#include <png.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "util/error.h"

namespace longctx::eval {
namespace {
constexpr int kGlyphW = 5, kGlyphH = 7, kGlyphAdvance = 6;

struct FileCloser {
  void operator()(FILE* f) const { if (f) std::fclose(f); }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;
}  // namespace

Image::Image(int w, int h, Rgb fill) : w_(w), h_(h), px_(size_t(w) * size_t(h) * 3) {
  if (w <= 0 || h <= 0) fail("image size {}x{} is not positive", w, h);
  fill_rect(0, 0, w, h, fill);
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

void Image::blend(int x, int y, Rgb c, double a) {
  Rgb o = get(x, y);
  auto mix = [a](uint8_t u, uint8_t v) { return uint8_t(std::clamp(u * (1 - a) + v * a + 0.5, 0.0, 255.0)); };
  set(x, y, {mix(o.r, c.r), mix(o.g, c.g), mix(o.b, c.b)});
}

void Image::fill_rect(int x, int y, int w, int h, Rgb c) {
  for (int yy = std::max(y, 0); yy < std::min(y + h, h_); ++yy)
    for (int xx = std::max(x, 0); xx < std::min(x + w, w_); ++xx) set(xx, yy, c);
}

void Image::rect_outline(int x, int y, int w, int h, Rgb c) {
  line(x, y, x + w - 1, y, c);
  line(x, y + h - 1, x + w - 1, y + h - 1, c);
  line(x, y, x, y + h - 1, c);
  line(x + w - 1, y, x + w - 1, y + h - 1, c);
}

void Image::line(int x0, int y0, int x1, int y1, Rgb c) {
  const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
  const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  for (;;) {  // Bresenham
    set(x0, y0, c);
    if (x0 == x1 && y0 == y1) break;
    const int e2 = 2 * err;
    if (e2 >= dy) { err += dy; x0 += sx; }
    if (e2 <= dx) { err += dx; y0 += sy; }
  }
}

int Image::text_width(const std::string& s, int scale) {
  return s.empty() ? 0 : (int(s.size()) * kGlyphAdvance - 1) * scale;
}
int Image::text_height(int scale) { return kGlyphH * scale; }

int Image::text(int x, int y, const std::string& s, Rgb c, int scale) {
  int cx = x;
  for (char ch : s) {
    const uint8_t* g = glyph(ch);
    for (int r = 0; r < kGlyphH; ++r)
      for (int col = 0; col < kGlyphW; ++col)
        if (g[r] & (1 << (kGlyphW - 1 - col))) fill_rect(cx + col * scale, y + r * scale, scale, scale, c);
    cx += kGlyphAdvance * scale;
  }
  return cx - x;
}

void Image::text_vertical(int x, int y, const std::string& s, Rgb c, int scale) {
  int cy = y;  // baseline runs upwards from (x, y)
  for (char ch : s) {
    const uint8_t* g = glyph(ch);
    for (int r = 0; r < kGlyphH; ++r)
      for (int col = 0; col < kGlyphW; ++col)
        if (g[r] & (1 << (kGlyphW - 1 - col)))
          fill_rect(x + r * scale, cy - (col + 1) * scale, scale, scale, c);
    cy -= kGlyphAdvance * scale;
  }
}

void write_png(const std::string& path, const Image& img) {
  FilePtr f(std::fopen(path.c_str(), "wb"));
  if (!f) fail("cannot write picture {}: cannot open the file for writing", path);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info) {
    png_destroy_write_struct(&png, &info);
    fail("cannot write picture {}: libpng could not start", path);
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    fail("cannot write picture {}: libpng reported an error", path);
  }
  png_init_io(png, f.get());
  png_set_IHDR(png, info, png_uint_32(img.width()), png_uint_32(img.height()), 8, PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < img.height(); ++y)
    png_write_row(png, const_cast<png_bytep>(img.data().data() + size_t(y) * size_t(img.width()) * 3));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
}

Image read_png(const std::string& path) {
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) fail("cannot read picture {}: cannot open the file", path);
  png_byte sig[8];
  if (std::fread(sig, 1, 8, f.get()) != 8 || png_sig_cmp(sig, 0, 8) != 0)
    fail("cannot read picture {}: not a PNG file", path);
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info) {
    png_destroy_read_struct(&png, &info, nullptr);
    fail("cannot read picture {}: libpng could not start", path);
  }
  Image img;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    fail("cannot read picture {}: corrupt PNG data", path);
  }
  png_init_io(png, f.get());
  png_set_sig_bytes(png, 8);
  png_read_info(png, info);
  png_set_expand(png);
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_gray_to_rgb(png);
  png_read_update_info(png, info);
  const int w = int(png_get_image_width(png, info)), h = int(png_get_image_height(png, info));
  std::vector<uint8_t> row(png_get_rowbytes(png, info));
  img = Image(w, h);
  for (int y = 0; y < h; ++y) {
    png_read_row(png, row.data(), nullptr);
    for (int x = 0; x < w; ++x) img.set(x, y, {row[size_t(x) * 3], row[size_t(x) * 3 + 1], row[size_t(x) * 3 + 2]});
  }
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return img;
}

}  // namespace longctx::eval

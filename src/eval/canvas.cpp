// canvas.cpp: cairo drawing (see canvas.h) and PNG read/write through cairo (image.h).
#include "eval/canvas.h"

#include <algorithm>
#include <cstdint>
#include <numbers>

#include "util/error.h"

namespace longctx::eval {
namespace {

constexpr const char* kFontFamily = "DejaVu Sans";  // fonts-dejavu-core; fontconfig falls back to any sans

void set_colour(cairo_t* cr, Rgb c) { cairo_set_source_rgb(cr, c.r / 255.0, c.g / 255.0, c.b / 255.0); }

// The pixel at (x, y) of an RGB24 or ARGB32 surface (premultiplied alpha undone; alpha dropped).
Rgb surface_pixel(const unsigned char* data, int stride, int x, int y, bool has_alpha) {
  const uint32_t p = *reinterpret_cast<const uint32_t*>(data + size_t(y) * size_t(stride) + size_t(x) * 4);
  const uint32_t a = has_alpha ? p >> 24 : 255;
  auto ch = [&](int shift) {
    const uint32_t v = (p >> shift) & 0xff;
    return uint8_t(a == 0 ? 0 : a == 255 ? v : (v * 255 + a / 2) / a);
  };
  return {ch(16), ch(8), ch(0)};
}

void check(cairo_status_t st, const char* what, const std::string& path) {
  if (st != CAIRO_STATUS_SUCCESS) fail("cannot {} picture {}: {}", what, path, cairo_status_to_string(st));
}

}  // namespace

bool pictures_built() { return true; }
void require_pictures() {}

Canvas::Canvas(int w, int h, Rgb background) : w_(w), h_(h) {
  if (w <= 0 || h <= 0) fail("picture size {}x{} is not positive", w, h);
  surface_ = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
  cr_ = cairo_create(surface_);
  if (cairo_status(cr_) != CAIRO_STATUS_SUCCESS) {
    const std::string why = cairo_status_to_string(cairo_status(cr_));
    cairo_destroy(cr_);
    cairo_surface_destroy(surface_);
    fail("cannot draw a {}x{} picture: {}", w, h, why);
  }
  cairo_font_options_t* fo = cairo_font_options_create();
  cairo_font_options_set_antialias(fo, CAIRO_ANTIALIAS_GRAY);  // no colour fringes in a PNG
  cairo_set_font_options(cr_, fo);
  cairo_font_options_destroy(fo);
  fill_rect(0, 0, w, h, background);
}

Canvas::~Canvas() {
  cairo_destroy(cr_);
  cairo_surface_destroy(surface_);
}

void Canvas::fill_rect(double x, double y, double w, double h, Rgb c) {
  set_colour(cr_, c);
  cairo_rectangle(cr_, x, y, w, h);
  cairo_fill(cr_);
}

void Canvas::outline_rect(int x, int y, int w, int h, Rgb c) {
  set_colour(cr_, c);
  cairo_set_line_width(cr_, 1);
  cairo_rectangle(cr_, x + 0.5, y + 0.5, w - 1, h - 1);
  cairo_stroke(cr_);
}

void Canvas::line(double x0, double y0, double x1, double y1, Rgb c, double width) {
  set_colour(cr_, c);
  cairo_set_line_width(cr_, width);
  cairo_move_to(cr_, x0, y0);
  cairo_line_to(cr_, x1, y1);
  cairo_stroke(cr_);
}

void Canvas::select(const TextStyle& st) {
  cairo_select_font_face(cr_, kFontFamily, CAIRO_FONT_SLANT_NORMAL,
                         st.bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr_, st.size);
}

double Canvas::text_width(const std::string& s, const TextStyle& st) {
  select(st);
  cairo_text_extents_t e;
  cairo_text_extents(cr_, s.c_str(), &e);
  return e.x_advance;
}

void Canvas::text(double x, double y, const std::string& s, const TextStyle& st, Align a, bool vertical) {
  select(st);
  cairo_text_extents_t e, digit;
  cairo_text_extents(cr_, s.c_str(), &e);
  cairo_text_extents(cr_, "0", &digit);
  const double along = a == Align::left ? 0 : a == Align::centre ? -e.x_advance / 2 : -e.x_advance;
  const double baseline = -digit.y_bearing / 2;  // the baseline sits half a digit's height below the anchor
  cairo_save(cr_);
  cairo_translate(cr_, x, y);
  if (vertical) cairo_rotate(cr_, -std::numbers::pi / 2);
  set_colour(cr_, st.colour);
  cairo_move_to(cr_, along, baseline);
  cairo_show_text(cr_, s.c_str());
  cairo_restore(cr_);
}

void Canvas::put(int x0, int y0, const Image& img) {
  cairo_surface_flush(surface_);
  unsigned char* data = cairo_image_surface_get_data(surface_);
  const int stride = cairo_image_surface_get_stride(surface_);
  for (int y = std::max(0, -y0); y < img.height() && y0 + y < h_; ++y)
    for (int x = std::max(0, -x0); x < img.width() && x0 + x < w_; ++x) {
      const Rgb c = img.get(x, y);
      *reinterpret_cast<uint32_t*>(data + size_t(y0 + y) * size_t(stride) + size_t(x0 + x) * 4) =
          0xff000000u | uint32_t(c.r) << 16 | uint32_t(c.g) << 8 | c.b;
    }
  cairo_surface_mark_dirty(surface_);
}

Image Canvas::image() {
  cairo_surface_flush(surface_);
  const unsigned char* data = cairo_image_surface_get_data(surface_);
  const int stride = cairo_image_surface_get_stride(surface_);
  Image img(w_, h_);
  for (int y = 0; y < h_; ++y)
    for (int x = 0; x < w_; ++x) img.set(x, y, surface_pixel(data, stride, x, y, false));
  return img;
}

void Canvas::write_png(const std::string& path) {
  cairo_surface_flush(surface_);
  check(cairo_surface_write_to_png(surface_, path.c_str()), "write", path);
}

void write_png(const std::string& path, const Image& img) {
  Canvas c(img.width(), img.height());
  c.put(0, 0, img);
  c.write_png(path);
}

Image read_png(const std::string& path) {
  cairo_surface_t* s = cairo_image_surface_create_from_png(path.c_str());
  const cairo_status_t st = cairo_surface_status(s);
  const cairo_format_t format = cairo_image_surface_get_format(s);
  if (st != CAIRO_STATUS_SUCCESS || (format != CAIRO_FORMAT_RGB24 && format != CAIRO_FORMAT_ARGB32)) {
    cairo_surface_destroy(s);
    check(st, "read", path);
    fail("cannot read picture {}: pixel format {} is neither RGB nor RGBA", path, int(format));
  }
  const int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
  const int stride = cairo_image_surface_get_stride(s);
  const unsigned char* data = cairo_image_surface_get_data(s);
  Image img(w, h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) img.set(x, y, surface_pixel(data, stride, x, y, format == CAIRO_FORMAT_ARGB32));
  cairo_surface_destroy(s);
  return img;
}

}  // namespace longctx::eval

// image.h: a small RGB raster with the drawing the eval pictures need, and PNG file I/O (libpng).
//
// Drawing: filled rectangles, lines, and text in a built-in 5x7 bitmap font (font.cpp) scaled
// by an integer factor. write_png() writes 8-bit RGB; read_png() reads any PNG back as RGB
// (tests use it to check what was written).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace longctx::eval {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

class Image {
 public:
  Image() = default;
  Image(int w, int h, Rgb fill = {255, 255, 255});
  int width() const { return w_; }
  int height() const { return h_; }
  Rgb get(int x, int y) const;
  void set(int x, int y, Rgb c);  // ignores pixels outside the image
  void blend(int x, int y, Rgb c, double alpha);
  void fill_rect(int x, int y, int w, int h, Rgb c);
  void rect_outline(int x, int y, int w, int h, Rgb c);
  void line(int x0, int y0, int x1, int y1, Rgb c);
  // Text with its top-left corner at (x, y); returns the width drawn. Unknown characters are '?'.
  int text(int x, int y, const std::string& s, Rgb c, int scale = 2);
  // Text rotated 90 degrees counter-clockwise (reads bottom to top), its bottom-left at (x, y).
  void text_vertical(int x, int y, const std::string& s, Rgb c, int scale = 2);
  static int text_width(const std::string& s, int scale = 2);
  static int text_height(int scale = 2);
  const std::vector<uint8_t>& data() const { return px_; }

 private:
  int w_ = 0, h_ = 0;
  std::vector<uint8_t> px_;  // RGB, row-major
};

// Throws Error naming the path when the file cannot be written or read.
void write_png(const std::string& path, const Image& img);
Image read_png(const std::string& path);

// The 5x7 glyph rows of a character (bit 4 = leftmost pixel); lowercase maps to uppercase.
const uint8_t* glyph(char c);

}  // namespace longctx::eval

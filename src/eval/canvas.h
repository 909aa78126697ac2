// canvas.h: a cairo image surface with the drawing the eval pictures need: filled and outlined
// rectangles, lines, anti-aliased text in DejaVu Sans (found by fontconfig; any sans-serif where
// it is missing), horizontal or reading bottom-to-top, and raw pixel blocks (heat maps).
//
// Coordinates are pixels from the top-left corner. Rectangles on whole pixels fill whole pixels
// with exactly the colour asked (tests read cell colours back); 1-pixel lines are drawn on pixel
// centres so they stay crisp. Text is placed by an anchor: the x anchor is the left end, centre
// or right end of the text (Align), the y anchor is the middle of a digit's height, so labels line
// up with the ticks and cells they name.
// Built only with picture support (LONGCTX_PICTURES); see image.h.
#pragma once
#include <cairo.h>

#include <string>

#include "eval/image.h"

namespace longctx::eval {

enum class Align { left, centre, right };

struct TextStyle {
  double size = 13;  // pixels (the font's em size)
  bool bold = false;
  Rgb colour{30, 30, 30};
};

class Canvas {
 public:
  Canvas(int w, int h, Rgb background = {255, 255, 255});
  ~Canvas();
  Canvas(const Canvas&) = delete;
  Canvas& operator=(const Canvas&) = delete;

  int width() const { return w_; }
  int height() const { return h_; }
  void fill_rect(double x, double y, double w, double h, Rgb c);
  // A 1-pixel outline just inside the rectangle's whole pixels.
  void outline_rect(int x, int y, int w, int h, Rgb c);
  void line(double x0, double y0, double x1, double y1, Rgb c, double width = 1);
  // Text at the anchor (x, y) described above; vertical text reads bottom to top, its anchor's
  // Align runs along the text (centre: the text's middle at y) and y-middle becomes x-middle.
  void text(double x, double y, const std::string& s, const TextStyle& st, Align a = Align::left,
            bool vertical = false);
  double text_width(const std::string& s, const TextStyle& st);
  // Copies img's pixels 1:1 with its top-left corner at (x, y).
  void put(int x, int y, const Image& img);
  Image image();
  // PNG through cairo; throws Error naming the path when the file cannot be written.
  void write_png(const std::string& path);

 private:
  void select(const TextStyle& st);
  int w_, h_;
  cairo_surface_t* surface_;
  cairo_t* cr_;
};

}  // namespace longctx::eval

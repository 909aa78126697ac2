// colour_maps.cpp: the pictures' colour scales (see colour_maps.h).
#include "eval/colour_maps.h"

#include <algorithm>
#include <cmath>

namespace longctx::eval {

Rgb lerp(Rgb a, Rgb b, double t) {
  t = std::clamp(t, 0.0, 1.0);
  auto m = [t](uint8_t x, uint8_t y) { return uint8_t(std::lround(x + (y - x) * t)); };
  return {m(a.r, b.r), m(a.g, b.g), m(a.b, b.b)};
}

Rgb score_colour(double s) {
  constexpr Rgb red{215, 48, 39}, yellow{254, 224, 139}, green{26, 152, 80};
  s = std::clamp(s, 0.0, 1.0);
  return s < 0.5 ? lerp(red, yellow, s * 2) : lerp(yellow, green, (s - 0.5) * 2);
}

Rgb heat_colour(double t) {
  constexpr Rgb stops[] = {{10, 10, 40}, {80, 20, 120}, {190, 50, 90}, {250, 140, 40}, {252, 250, 190}};
  t = std::clamp(t, 0.0, 1.0) * 4.0;
  const int i = std::min(3, int(t));
  return lerp(stops[i], stops[i + 1], t - i);
}

}  // namespace longctx::eval

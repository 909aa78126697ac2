// colour_maps.h: the colour scales of the eval pictures, as plain functions (no drawing library)
// so that they are tested, and built, with or without picture support.
//
// score_colour: accuracy heatmaps, red (0) -> yellow (0.5) -> green (1), the needle plots' scale.
// heat_colour:  attention maps, dark blue -> purple -> orange -> pale yellow (a magma-like scale
//               that stays readable in print and for red-green colour blindness).
#pragma once
#include <cstdint>

namespace longctx::eval {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

// a + (b - a) * t per channel, t clamped to [0, 1], rounded.
Rgb lerp(Rgb a, Rgb b, double t);
// Red -> yellow -> green for a score in [0, 1] (clamped).
Rgb score_colour(double s);
// Dark blue -> purple -> orange -> pale yellow for t in [0, 1] (clamped).
Rgb heat_colour(double t);

}  // namespace longctx::eval

// haystack.h: the distractor text that needles are hidden in, as an indexable sequence of units.
//
// A haystack is an infinite, deterministic sequence of text units (a sentence or a line), each
// ending with its own separator, so a context of n units is their concatenation and a prompt's
// length is tuned one unit at a time. Kinds:
//   noise: the classic passkey filler "The grass is green. The sky is blue. ..." (RULER "noise");
//   essay: seeded synthetic English sentences (stands in for RULER's Paul Graham essays);
//   book:  lines of a real text file (--text), starting at a seeded offset and wrapping around.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace longctx::eval {

class Haystack {
 public:
  virtual ~Haystack() = default;
  virtual std::string kind() const = 0;
  virtual std::string unit(int64_t i) const = 0;  // deterministic; ends with a separator
};

// A text file split into units (lines; very long lines are split at sentence ends).
struct BookText {
  std::string path;
  std::vector<std::string> units;
  static std::shared_ptr<const BookText> load(const std::string& path);  // throws Error
  static std::shared_ptr<const BookText> from_string(const std::string& text, const std::string& name);
};

std::unique_ptr<Haystack> make_noise_haystack();
std::unique_ptr<Haystack> make_essay_haystack(uint64_t seed);
std::unique_ptr<Haystack> make_book_haystack(std::shared_ptr<const BookText> book, uint64_t seed);

// Something inserted into a haystack: `text` goes before the unit at round(depth * n_units).
struct Insert {
  double depth = 0;  // 0 = very start of the context, 1 = very end
  std::string text;  // a separator (" ") is appended unless it ends with whitespace
};

// Concatenates units [0, n_units) with the inserts placed at their depths (stable for ties).
std::string build_context(const Haystack& hay, int64_t n_units, const std::vector<Insert>& inserts);

}  // namespace longctx::eval

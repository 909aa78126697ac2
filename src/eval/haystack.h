// haystack.h: the distractor text that needles are hidden in, as an indexable sequence of words.
//
// A haystack is an endless, deterministic sequence of sentences (or lines), cut into words that
// keep their trailing whitespace, so a context of n words is their concatenation and a prompt's
// length can be tuned one word at a time (the context may end mid-sentence, as RULER's
// token-level truncation does). Needles only go between sentences. Kinds:
//   noise: the classic passkey filler "The grass is green. The sky is blue. ..." (RULER "noise");
//   essay: seeded synthetic English sentences (stands in for RULER's Paul Graham essays);
//   book:  lines of a real text file (--text), starting at a seeded line and wrapping around.
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
  // Word i (with its trailing whitespace). Not thread-safe: words are generated on demand.
  const std::string& word(int64_t i) const;
  // True when a needle may go before word i: i == 0, or word i - 1 ends a sentence or line.
  bool boundary(int64_t i) const;

 protected:
  // Sentence j, ending with its separator (" " or "\n").
  virtual std::string sentence(int64_t j) const = 0;

 private:
  void extend(int64_t i) const;
  mutable std::vector<std::string> words_;
  mutable std::vector<uint8_t> ends_sentence_;
  mutable int64_t next_sentence_ = 0;
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

// Something inserted into a haystack: `text` goes at the sentence boundary nearest to word
// round(depth * n_words).
struct Insert {
  double depth = 0;  // 0 = very start of the context, 1 = very end
  std::string text;  // a separator (" ") is appended unless it ends with whitespace
};

// Concatenates words [0, n_words) with the inserts placed at their depths (stable for ties).
std::string build_context(const Haystack& hay, int64_t n_words, const std::vector<Insert>& inserts);

}  // namespace longctx::eval

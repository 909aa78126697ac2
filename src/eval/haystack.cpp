// haystack.cpp: noise / essay / book haystacks and needle insertion (see haystack.h).
#include "eval/haystack.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "eval/rng.h"
#include "eval/words.h"
#include "util/error.h"
#include "util/mmap_file.h"

namespace longctx::eval {
namespace {

constexpr size_t kMaxUnitChars = 400;  // longer lines are split at sentence ends

class NoiseHaystack final : public Haystack {
 public:
  std::string kind() const override { return "noise"; }

 protected:
  std::string sentence(int64_t i) const override {
    static const char* const kSentences[] = {"The grass is green. ", "The sky is blue. ",
                                             "The sun is yellow. ", "Here we go. ",
                                             "There and back again. "};
    return kSentences[i % 5];
  }
};

class EssayHaystack final : public Haystack {
 public:
  explicit EssayHaystack(uint64_t seed) : seed_(seed) {}
  std::string kind() const override { return "essay"; }

 protected:
  std::string sentence(int64_t i) const override {
    Rng rng(mix_seed(seed_, uint64_t(i)));
    return essay_sentence(rng);
  }

 private:
  uint64_t seed_;
};

class BookHaystack final : public Haystack {
 public:
  BookHaystack(std::shared_ptr<const BookText> book, uint64_t seed) : book_(std::move(book)) {
    if (book_->units.empty()) fail("text file {} has no text to build a haystack from", book_->path);
    offset_ = int64_t(Rng(seed).below(book_->units.size()));
  }
  std::string kind() const override { return "book"; }

 protected:
  std::string sentence(int64_t i) const override {
    return book_->units[size_t((offset_ + i) % int64_t(book_->units.size()))];
  }

 private:
  std::shared_ptr<const BookText> book_;
  int64_t offset_ = 0;
};

void split_long(const std::string& line, std::vector<std::string>& out) {
  if (line.size() <= kMaxUnitChars) {
    out.push_back(line);
    return;
  }
  size_t start = 0;
  while (start < line.size()) {
    size_t end = std::min(line.size(), start + kMaxUnitChars);
    if (end < line.size()) {
      size_t dot = line.rfind(". ", end);
      if (dot != std::string::npos && dot > start) end = dot + 2;
      else {
        size_t sp = line.rfind(' ', end);
        if (sp != std::string::npos && sp > start) end = sp + 1;
      }
    }
    out.push_back(line.substr(start, end - start));
    start = end;
  }
}

}  // namespace

std::shared_ptr<const BookText> BookText::from_string(const std::string& text, const std::string& name) {
  auto book = std::make_shared<BookText>();
  book->path = name;
  std::string line;
  for (char c : text) {
    if (c == '\r') continue;
    line += c;
    if (c == '\n') {
      bool blank = line.find_first_not_of(" \t\n") == std::string::npos;
      if (blank && !book->units.empty()) book->units.back() += "\n";  // keep paragraph breaks
      else if (!blank) split_long(line, book->units);
      line.clear();
    }
  }
  if (line.find_first_not_of(" \t\n") != std::string::npos) split_long(line + "\n", book->units);
  return book;
}

std::shared_ptr<const BookText> BookText::load(const std::string& path) {
  return from_string(read_text_file(path), path);
}

std::unique_ptr<Haystack> make_noise_haystack() { return std::make_unique<NoiseHaystack>(); }
std::unique_ptr<Haystack> make_essay_haystack(uint64_t seed) { return std::make_unique<EssayHaystack>(seed); }
std::unique_ptr<Haystack> make_book_haystack(std::shared_ptr<const BookText> book, uint64_t seed) {
  return std::make_unique<BookHaystack>(std::move(book), seed);
}

const std::string& Haystack::word(int64_t i) const {
  extend(i);
  return words_[size_t(i)];
}

bool Haystack::boundary(int64_t i) const {
  if (i <= 0) return true;
  extend(i - 1);
  return ends_sentence_[size_t(i - 1)] != 0;
}

void Haystack::extend(int64_t i) const {
  while (int64_t(words_.size()) <= i) {
    const std::string s = sentence(next_sentence_++);
    if (s.empty()) fail("{} haystack produced an empty sentence", kind());
    // Cut after each run of whitespace that is followed by more text.
    size_t start = 0;
    for (size_t k = 1; k < s.size(); ++k)
      if (std::isspace(static_cast<unsigned char>(s[k - 1])) && !std::isspace(static_cast<unsigned char>(s[k]))) {
        words_.push_back(s.substr(start, k - start));
        ends_sentence_.push_back(0);
        start = k;
      }
    words_.push_back(s.substr(start));
    ends_sentence_.push_back(1);
  }
}

std::string build_context(const Haystack& hay, int64_t n_words, const std::vector<Insert>& inserts) {
  std::vector<std::pair<int64_t, size_t>> at;  // (word position, insert index)
  at.reserve(inserts.size());
  for (size_t j = 0; j < inserts.size(); ++j) {
    const int64_t want = std::llround(std::clamp(inserts[j].depth, 0.0, 1.0) * double(n_words));
    int64_t pos = 0;  // nearest sentence boundary in [0, n_words] (0 always is one)
    for (int64_t d = 0; d <= n_words; ++d) {
      if (want - d >= 0 && hay.boundary(want - d)) { pos = want - d; break; }
      if (want + d <= n_words && hay.boundary(want + d)) { pos = want + d; break; }
    }
    at.emplace_back(pos, j);
  }
  std::stable_sort(at.begin(), at.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::string out;
  size_t next = 0;
  auto emit_inserts = [&](int64_t pos) {
    while (next < at.size() && at[next].first == pos) {
      const std::string& t = inserts[at[next].second].text;
      if (!out.empty() && !std::isspace(static_cast<unsigned char>(out.back()))) out += ' ';
      out += t;
      if (!t.empty() && !std::isspace(static_cast<unsigned char>(t.back()))) out += ' ';
      ++next;
    }
  };
  for (int64_t i = 0; i < n_words; ++i) {
    emit_inserts(i);
    out += hay.word(i);
  }
  emit_inserts(n_words);
  return out;
}

}  // namespace longctx::eval

// text_stream.h: turns generated token bytes into text safe to show: complete UTF-8 only, and
// never the beginning of a stop string that may still complete (held back until decided).
#pragma once
#include <string>
#include <vector>

namespace longctx {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Appends a token's bytes. Returns true if a stop string now occurs (text() is cut before it).
  bool push(const std::string& bytes);
  // Text that can be released now and was not released before.
  std::string take_ready();
  // Everything, at the end (incomplete UTF-8 tail included as it is).
  std::string take_rest();
  const std::string& text() const { return text_; }

 private:
  std::vector<std::string> stops_;
  std::string text_;
  size_t emitted_ = 0;
  bool stopped_ = false;
};

// Length of the longest prefix of s that ends on a complete UTF-8 sequence.
size_t utf8_complete_prefix(const std::string& s);

}  // namespace longctx

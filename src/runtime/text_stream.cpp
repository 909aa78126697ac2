// text_stream.cpp: see text_stream.h.
#include "runtime/text_stream.h"

#include <algorithm>

namespace longctx {

size_t utf8_complete_prefix(const std::string& s) {
  // Walk back at most 3 continuation bytes to the last lead byte and check its length.
  size_t n = s.size();
  size_t i = n;
  int cont = 0;
  while (i > 0 && cont < 4) {
    const unsigned char c = static_cast<unsigned char>(s[i - 1]);
    if ((c & 0xC0) != 0x80) break;
    --i;
    ++cont;
  }
  if (i == 0) return cont ? 0 : n;
  const unsigned char lead = static_cast<unsigned char>(s[i - 1]);
  int need = 1;
  if (lead >= 0xF0) need = 4;
  else if (lead >= 0xE0) need = 3;
  else if (lead >= 0xC0) need = 2;
  else return n;  // ASCII lead (stray continuation bytes are released as they are)
  return (cont + 1 >= need) ? n : i - 1;
}

bool TextStream::push(const std::string& bytes) {
  if (stopped_) return true;
  const size_t old = text_.size();
  text_ += bytes;
  for (const auto& st : stops_) {
    if (st.empty()) continue;
    const size_t from = old >= st.size() ? old - st.size() + 1 : 0;
    const size_t at = text_.find(st, from);
    if (at != std::string::npos) {
      text_.resize(at);
      stopped_ = true;
    }
  }
  return stopped_;
}

std::string TextStream::take_ready() {
  size_t ready = utf8_complete_prefix(text_);
  if (!stopped_) {
    // Hold back a tail that is a prefix of some stop string.
    for (const auto& st : stops_) {
      for (size_t k = std::min(st.size() - 1, text_.size()); k > 0; --k) {
        if (text_.compare(text_.size() - k, k, st, 0, k) == 0) {
          ready = std::min(ready, text_.size() - k);
          break;
        }
      }
    }
  }
  if (ready <= emitted_) return {};
  std::string out = text_.substr(emitted_, ready - emitted_);
  emitted_ = ready;
  return out;
}

std::string TextStream::take_rest() {
  std::string out = text_.substr(std::min(emitted_, text_.size()));
  emitted_ = text_.size();
  return out;
}

}  // namespace longctx

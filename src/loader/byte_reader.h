// byte_reader.h: a bounds-checked little-endian cursor over an in-memory file image.
//
// Every read checks the remaining length first, so a truncated or corrupt file becomes an
// Error naming the file, the offset, what was being read and how many bytes are missing,
// never an out-of-bounds read. Used by the GGUF parser (safetensors needs only one u64).
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "util/error.h"

namespace longctx {

static_assert(std::endian::native == std::endian::little,
              "the loader reads little-endian files by reinterpreting bytes; add byte swaps first");

class ByteReader {
 public:
  ByteReader(std::span<const uint8_t> bytes, std::string_view file) : bytes_(bytes), file_(file) {}

  size_t offset() const { return pos_; }
  size_t size() const { return bytes_.size(); }
  size_t remaining() const { return bytes_.size() - pos_; }
  std::string_view file() const { return file_; }

  // Throws unless n more bytes are available.
  void need(uint64_t n, std::string_view what) const {
    if (n > remaining())
      fail("'{}' is truncated: reading {} at offset {} needs {} bytes but only {} remain ({} bytes missing)",
           file_, what, pos_, n, remaining(), n - remaining());
  }

  template <class T>
  T read(std::string_view what) {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // A view of the next n bytes (advances past them).
  std::span<const uint8_t> take(uint64_t n, std::string_view what) {
    need(n, what);
    auto s = bytes_.subspan(pos_, size_t(n));
    pos_ += size_t(n);
    return s;
  }

  // GGUF string: uint64 length, then that many bytes (not NUL-terminated, any encoding).
  std::string read_gguf_string(std::string_view what) {
    const uint64_t n = read<uint64_t>(what);
    auto s = take(n, what);
    return std::string(reinterpret_cast<const char*>(s.data()), s.size());
  }

 private:
  std::span<const uint8_t> bytes_;
  std::string_view file_;
  size_t pos_ = 0;
};

}  // namespace longctx

namespace longctx {

// Names and keys come from the file; a corrupt one may be megabytes long. Messages show at
// most this many bytes of it.
inline constexpr size_t kMaxShownNameBytes = 160;

inline std::string shown(std::string_view s) {
  if (s.size() <= kMaxShownNameBytes) return std::string(s);
  return std::string(s.substr(0, kMaxShownNameBytes)) + "...(" + std::to_string(s.size()) + " bytes)";
}

}  // namespace longctx

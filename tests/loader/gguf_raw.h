// gguf_raw.h: a byte-level GGUF builder for the corruption tests. Unlike GgufWriter it writes
// whatever it is told (bad counts, unknown types, misaligned or overlapping offsets), so each
// test can produce exactly one defect.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace longctx::test {

class RawBytes {
 public:
  template <class T>
  RawBytes& put(T v) {
    const size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
    return *this;
  }
  RawBytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  std::vector<uint8_t> b;
};

struct RawTensor {
  std::string name;
  std::vector<uint64_t> ne;  // innermost first, as in the file
  uint32_t type = 0;         // ggml type id
  uint64_t offset = 0;
};

struct RawGguf {
  char magic[4] = {'G', 'G', 'U', 'F'};
  uint32_t version = 3;
  std::optional<uint64_t> n_tensors, n_kv;  // override the real counts
  RawBytes kv;                              // encoded key/value entries
  uint64_t kv_count = 0;
  std::vector<RawTensor> tensors;
  uint64_t align = 32;
  uint64_t data_bytes = 0;  // zero bytes appended after the aligned header

  // Adds "key" of value type `type` whose encoded value is `value`.
  RawGguf& add_kv(const std::string& key, uint32_t type, const RawBytes& value) {
    kv.str(key).put<uint32_t>(type);
    kv.b.insert(kv.b.end(), value.b.begin(), value.b.end());
    ++kv_count;
    return *this;
  }

  std::vector<uint8_t> build() const {
    RawBytes r;
    r.b.insert(r.b.end(), magic, magic + 4);
    r.put<uint32_t>(version).put<uint64_t>(n_tensors.value_or(tensors.size())).put<uint64_t>(n_kv.value_or(kv_count));
    r.b.insert(r.b.end(), kv.b.begin(), kv.b.end());
    for (const auto& t : tensors) {
      r.str(t.name).put<uint32_t>(uint32_t(t.ne.size()));
      for (uint64_t d : t.ne) r.put<uint64_t>(d);
      r.put<uint32_t>(t.type).put<uint64_t>(t.offset);
    }
    r.b.resize((r.b.size() + align - 1) / align * align, 0);
    r.b.resize(r.b.size() + data_bytes, 0);
    return r.b;
  }
};

}  // namespace longctx::test

// gguf_reader.h: parse and validate a GGUF file (v2/v3) into a ModelFile.
//
//   auto mf = open_gguf_file("model.gguf");        // memory-maps the file
//   auto mf = open_gguf_bytes(bytes, "buf.gguf");  // parses a caller-owned buffer (fuzzing, tests)
// Everything is validated before use: magic, version, counts against the bytes left, string
// lengths, value types, array nesting, n_dims, dims and their products, tensor types, block
// multiples, alignment, offsets, overlaps, and that every tensor lies inside the file.
// Any problem throws longctx::Error naming the file and the key / tensor / offset involved.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "loader/gguf_format.h"
#include "loader/model_file.h"

namespace longctx {

class MappedFile;

class GgufFile : public ModelFile {
 public:
  std::string format() const override { return "gguf"; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the data section in the file
  // The GGUF value type of each metadata key, in file order (JSON alone loses uint8 vs int32);
  // for arrays, the element type is in array_types() under the same key.
  const std::vector<std::pair<std::string, gguf::ValueType>>& kv_types() const { return kv_types_; }
  gguf::ValueType array_type(const std::string& key) const;  // throws unless key is an array

  // Parses bytes as a GGUF file called `name` (used in messages). The GgufFile points into
  // bytes; keep them alive (and unchanged) while it is used. `owner` may hold them.
  static std::unique_ptr<GgufFile> parse(std::span<const uint8_t> bytes, std::string name,
                                         std::shared_ptr<const void> owner = nullptr);

 private:
  uint32_t version_ = 0;
  uint64_t alignment_ = gguf::kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, gguf::ValueType>> kv_types_;
  std::vector<std::pair<std::string, gguf::ValueType>> array_types_;
  std::shared_ptr<const void> owner_;
};

std::unique_ptr<GgufFile> open_gguf_file(const std::string& path);
std::unique_ptr<GgufFile> open_gguf_bytes(std::span<const uint8_t> bytes, std::string name);

}  // namespace longctx

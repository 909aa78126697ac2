// mmap_file.h: a read-only memory-mapped file (weights are never copied just to be read).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace longctx {

class MappedFile {
 public:
  // Maps the whole file read-only; throws Error naming the path on failure.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Reads a whole (small) text file; throws Error naming the path on failure.
std::string read_text_file(const std::string& path);

}  // namespace longctx

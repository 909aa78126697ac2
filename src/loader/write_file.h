// write_file.h: write a byte buffer to a file, throwing Error naming the path (used by the writers).
#pragma once
#include <cstddef>
#include <fstream>
#include <string>

#include "util/error.h"

namespace longctx {

inline void write_file_bytes(const std::string& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("cannot create '{}'", path);
  f.write(static_cast<const char*>(data), std::streamsize(n));
  if (!f) fail("cannot write {} bytes to '{}'", n, path);
}

}  // namespace longctx

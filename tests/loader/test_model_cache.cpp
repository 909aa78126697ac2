// test_model_cache.cpp: short model names (-m gemma3-270m) resolve to the fetch-model.sh cache
// under $LONGCTX_CACHE; an existing path wins; a known name not installed names the fetch command.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "loader/model_cache.h"
#include "loader/model_file.h"
#include "test_util.h"

namespace longctx {
namespace {

// Sets LONGCTX_CACHE for one test and restores it.
class CacheEnv {
 public:
  explicit CacheEnv(const std::string& dir) {
    if (const char* v = std::getenv("LONGCTX_CACHE")) old_ = v, had_ = true;
    ::setenv("LONGCTX_CACHE", dir.c_str(), 1);
  }
  ~CacheEnv() {
    if (had_) ::setenv("LONGCTX_CACHE", old_.c_str(), 1);
    else ::unsetenv("LONGCTX_CACHE");
  }

 private:
  std::string old_;
  bool had_ = false;
};

TEST(ModelCache, ShortNamesResolveToTheCache) {
  test::TempDir dir;
  CacheEnv env(dir.path().string());
  EXPECT_EQ(model_cache_dir(), (dir.path() / "models").string());
  EXPECT_FALSE(cached_model_path("no-such-model").has_value());
  test::expect_error([] { cached_model_path("gemma3-270m"); },
                     {"gemma3-270m", "not installed", "scripts/fetch-model.sh gemma3-270m"});
  test::expect_error([] { open_model_file("gemma3-270m"); }, {"scripts/fetch-model.sh gemma3-270m"});
  test::expect_error([] { open_model_file("no-such-model"); }, {"does not exist", "gemma3-270m"});
  // Installed: the short name opens the cached file (here a GGUF with a bad version: the GGUF
  // reader's error shows that the file was reached).
  std::filesystem::create_directories(dir.path() / "models");
  test::write_bytes((dir.path() / "models" / "gemma-3-270m-q4_k_m.gguf").string(), {'G', 'G', 'U', 'F', 99, 0, 0, 0});
  EXPECT_EQ(*cached_model_path("gemma3-270m"), (dir.path() / "models" / "gemma-3-270m-q4_k_m.gguf").string());
  test::expect_error([] { open_model_file("gemma3-270m"); }, {"gemma-3-270m-q4_k_m.gguf"});
}

}  // namespace
}  // namespace longctx

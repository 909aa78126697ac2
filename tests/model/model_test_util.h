// model_test_util.h (tests/model): helpers the model tests share: a fresh temporary folder per
// test process, the largest absolute difference of two logit vectors, and the default model
// loaded with an attention method (null when the model is absent: the test skips).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "longctx/engine.h"
#include "util/error.h"

namespace longctx::test {

// <tmp>/longctx-test-<name>-<pid>, emptied.
inline std::filesystem::path temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  fs::path p = fs::temp_directory_path() / ("longctx-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, double(std::abs(a[i] - b[i])));
  return m;
}

// The default model on 2 threads with --attn `attn` and prefill chunks of `chunk` tokens; null
// when the model is not in the cache.
inline std::unique_ptr<Engine> default_engine(const std::string& attn, int64_t chunk) {
  std::string path;
  try {
    path = default_model_path();
  } catch (const Error&) {
    return nullptr;
  }
  if (!std::filesystem::exists(path)) return nullptr;
  return Engine::load({.model_path = path, .n_threads = 2, .attn = attn, .prefill_chunk = chunk});
}

// A prompt of `repeats` numbered facts and a question about fact 3 (~11 tokens per fact), encoded
// by e's tokenizer: long enough to cross chunk and budget boundaries, with one answer to find.
inline std::vector<int32_t> facts_prompt(Engine& e, int repeats) {
  std::string text = "Here is a list of facts about the sea and the sky.";
  for (int i = 0; i < repeats; ++i)
    text += " Fact " + std::to_string(i) + ": the number of the day is " + std::to_string(i * 37 % 101) + ".";
  text += " Question: what is fact 3? Answer:";
  return e.tokenizer().encode(text, true, false);
}

// The default model's greedy tokens for ids with --attn `attn`, prefill chunks of `chunk` tokens,
// `max_tokens` new tokens (EOS ignored).
inline std::vector<int32_t> greedy_tokens(const std::string& attn, const std::vector<int32_t>& ids, int64_t chunk,
                                          int max_tokens) {
  LoadOptions o;  // the default model
  o.attn = attn;
  o.prefill_chunk = chunk;
  auto e = Engine::load(o);
  SamplingParams sp;
  sp.max_tokens = max_tokens;
  sp.stop_at_eos = false;
  return e->generate(ids, sp).tokens;
}

}  // namespace longctx::test

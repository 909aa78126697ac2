// task_registry.cpp: task names, "ruler" expansion, seeds and shared task helpers (see task.h).
#include <cmath>
#include <fmt/format.h>

#include "eval/rng.h"
#include "eval/task.h"
#include "util/error.h"

namespace longctx::eval {

const std::vector<std::string>& ruler_task_names() {
  static const std::vector<std::string> v = {"niah_single", "niah_multikey", "niah_multivalue",
                                             "niah_multiquery", "vt", "cwe", "fwe"};
  return v;
}

const std::vector<std::string>& retrieval_task_names() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> r = {"passkey", "niah"};
    r.insert(r.end(), ruler_task_names().begin(), ruler_task_names().end());
    return r;
  }();
  return v;
}

std::vector<std::string> all_task_names() {
  std::vector<std::string> r = {"passkey", "niah", "ruler"};
  r.insert(r.end(), ruler_task_names().begin(), ruler_task_names().end());
  r.push_back("ppl");
  r.push_back("attention");
  return r;
}

static std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::vector<std::string> expand_task(std::string_view name) {
  if (name == "ruler") return ruler_task_names();
  for (const auto& n : all_task_names())
    if (n == name) return {n};
  fail("unknown task \"{}\"; valid tasks: {}", name, join(all_task_names()));
}

std::unique_ptr<Task> make_task(std::string_view name) {
  if (name == "passkey") return make_passkey_task();
  if (name == "niah") return make_niah_task();
  if (name == "vt") return make_vt_task();
  if (name == "cwe") return make_cwe_task();
  if (name == "fwe") return make_fwe_task();
  if (name.starts_with("niah_")) return make_ruler_niah_task(name);
  fail("unknown retrieval task \"{}\"; valid tasks: {}", name, join(retrieval_task_names()));
}

uint64_t sample_seed(uint64_t seed, std::string_view task, int64_t length, double depth, int index) {
  const int64_t depth_key = depth < 0 ? -1 : std::llround(depth * 1000.0);
  return derive_seed(seed, task, length, depth_key, index);
}

std::string sample_id(std::string_view task, int64_t length, double depth, int index) {
  if (depth < 0) return fmt::format("{}/L{}/s{}", task, length, index);
  return fmt::format("{}/L{}/d{}/s{}", task, length, std::llround(depth * 100.0), index);
}

Sample make_sample(std::string_view task, const SampleSpec& spec, double id_depth, double depth,
                   FittedPrompt fitted, std::vector<std::string> expected) {
  Sample s;
  s.task = std::string(task);
  s.id = sample_id(task, spec.length, id_depth, spec.index);
  s.length = spec.length;
  s.depth = depth;
  s.prompt = std::move(fitted.text);
  s.tokens = std::move(fitted.tokens);
  s.prompt_tokens = int64_t(s.tokens.size());
  s.expected = std::move(expected);
  s.metric = Metric::MatchAll;
  return s;
}

std::unique_ptr<Haystack> essay_or_book(const TaskContext& ctx, uint64_t seed) {
  if (ctx.book) return make_book_haystack(ctx.book, seed);
  return make_essay_haystack(seed);
}

}  // namespace longctx::eval

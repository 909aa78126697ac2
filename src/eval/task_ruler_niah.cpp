// task_ruler_niah.cpp: RULER's needle-in-a-haystack family (Hsieh et al. 2024).
//
// Needles "One of the special magic numbers for <key> is: <7-digit value>." are hidden at random
// depths in an essay haystack. Variants (RULER's default configs):
//   niah_single      1 key, 1 value, asked for it;
//   niah_multikey    4 keys (3 distractors), asked for one;
//   niah_multivalue  1 key with 4 values, asked for all of them;
//   niah_multiquery  4 keys, asked for all four.
// Scored with string_match_all: the share of the queried values found in the answer.
#include <algorithm>
#include <fmt/format.h>
#include <unordered_set>

#include "eval/rng.h"
#include "eval/task.h"
#include "eval/words.h"
#include "util/error.h"

namespace longctx::eval {
namespace {

constexpr int kValueDigits = 7;

struct NiahVariant {
  const char* name;
  int n_keys, n_values, n_queries, max_new_tokens;
};
constexpr NiahVariant kVariants[] = {
    {"niah_single", 1, 1, 1, 64},
    {"niah_multikey", 4, 1, 1, 64},
    {"niah_multivalue", 1, 4, 1, 128},
    {"niah_multiquery", 4, 1, 4, 128},
};

std::string and_list(const std::vector<std::string>& v) {
  if (v.size() == 1) return v[0];
  std::string s;
  for (size_t i = 0; i < v.size(); ++i)
    s += (i == 0 ? "" : (i + 1 == v.size() ? ", and " : ", ")) + v[i];
  return s;
}

class RulerNiahTask final : public Task {
 public:
  explicit RulerNiahTask(const NiahVariant& v) : v_(v) {}
  std::string name() const override { return v_.name; }
  int default_max_new_tokens() const override { return v_.max_new_tokens; }

  Sample make(const TaskContext& ctx, const SampleSpec& spec) const override {
    Rng rng(spec.seed);
    std::vector<std::string> keys;
    std::unordered_set<std::string> used;
    while (int(keys.size()) < v_.n_keys) {
      std::string k = random_key(rng);
      if (used.insert(k).second) keys.push_back(k);
    }
    std::vector<std::vector<std::string>> values(keys.size());
    for (auto& vals : values)
      while (int(vals.size()) < v_.n_values) {
        std::string x = rng.digits(kValueDigits);
        if (used.insert(x).second) vals.push_back(x);
      }
    // Needles in a random order, each at a random depth.
    std::vector<Insert> needles;
    std::vector<double> depth_of_key(keys.size(), 0.0);
    for (size_t k = 0; k < keys.size(); ++k)
      for (const auto& x : values[k]) {
        double d = rng.uniform();
        if (x == values[k][0]) depth_of_key[k] = d;
        needles.push_back({d, fmt::format("One of the special magic numbers for {} is: {}.", keys[k], x)});
      }
    rng.shuffle(needles);
    const std::vector<std::string> queries(keys.begin(), keys.begin() + v_.n_queries);
    const std::string query = and_list(queries);
    auto hay = essay_or_book(ctx, rng.next());
    const std::string prefix =
        "Some special magic numbers are hidden within the following text. Make sure to memorize it. "
        "I will quiz you about the numbers afterwards.\n";
    const std::string question =
        fmt::format("\nWhat are all the special magic numbers for {} mentioned in the provided text?", query);
    const std::string answer_prefix =
        fmt::format(" The special magic numbers for {} mentioned in the provided text are", query);
    auto fitted = fit_prompt(
        ctx.renderer, spec.budget,
        [&](int64_t n) { return prefix + build_context(*hay, n, needles) + question; }, answer_prefix,
        ctx.fit,
        [&](int64_t n) { return hay->boundary(n); });
    std::vector<std::string> expected;
    for (int q = 0; q < v_.n_queries; ++q)
      expected.insert(expected.end(), values[size_t(q)].begin(), values[size_t(q)].end());
    return make_sample(name(), spec, -1, depth_of_key[0], std::move(fitted), std::move(expected));
  }

 private:
  NiahVariant v_;
};

}  // namespace

std::unique_ptr<Task> make_ruler_niah_task(std::string_view variant) {
  for (const auto& v : kVariants)
    if (variant == v.name) return std::make_unique<RulerNiahTask>(v);
  fail("unknown RULER NIAH variant \"{}\"; valid: niah_single, niah_multikey, niah_multivalue, niah_multiquery",
       variant);
}

}  // namespace longctx::eval

// task_vt.cpp: RULER variable tracking (multi-hop tracing).
//
// A chain "VAR ABCDE = 12345." "VAR FGHIJ = VAR ABCDE." ... (1 chain, 4 hops: RULER's default) is
// spread in order through the noise filler; the model must list every variable that ends up
// holding the value. Scored with string_match_all over the variable names.
#include <algorithm>
#include <fmt/format.h>
#include <unordered_set>

#include "eval/rng.h"
#include "eval/task.h"
#include "eval/words.h"

namespace longctx::eval {
namespace {

constexpr int kHops = 4;
constexpr int kNameLetters = 5;
constexpr int kValueDigits = 5;
constexpr int kMaxNewTokens = 32;

class VariableTrackingTask final : public Task {
 public:
  std::string name() const override { return "vt"; }
  int default_max_new_tokens() const override { return kMaxNewTokens; }

  Sample make(const TaskContext& ctx, const SampleSpec& spec) const override {
    Rng rng(spec.seed);
    std::vector<std::string> vars;
    std::unordered_set<std::string> used;
    while (int(vars.size()) < kHops + 1) {
      std::string v = random_upper(rng, kNameLetters);
      if (used.insert(v).second) vars.push_back(v);
    }
    const std::string value = rng.digits(kValueDigits);
    std::vector<double> depths;
    for (int i = 0; i <= kHops; ++i) depths.push_back(rng.uniform());
    std::sort(depths.begin(), depths.end());  // the chain stays in order
    std::vector<Insert> statements;
    statements.push_back({depths[0], fmt::format("VAR {} = {}.", vars[0], value)});
    for (int i = 1; i <= kHops; ++i)
      statements.push_back({depths[size_t(i)], fmt::format("VAR {} = VAR {}.", vars[size_t(i)], vars[size_t(i - 1)])});
    auto hay = make_noise_haystack();
    const std::string prefix =
        "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n";
    const std::string question =
        fmt::format("\nQuestion: Find all variables that are assigned the value {} in the text above.", value);
    const std::string answer_prefix = fmt::format(
        " Answer: According to the chain(s) of variable assignment in the text above, {} variables are "
        "assigned the value {}, they are: ", kHops + 1, value);
    auto fitted = fit_prompt(
        ctx.renderer, spec.budget,
        [&](int64_t n) { return prefix + build_context(*hay, n, statements) + question; }, answer_prefix,
        ctx.fit,
        [&](int64_t n) { return hay->boundary(n); });
    return make_sample(name(), spec, -1, depths[0], std::move(fitted), vars);
  }
};

}  // namespace

std::unique_ptr<Task> make_vt_task() { return std::make_unique<VariableTrackingTask>(); }

}  // namespace longctx::eval

// task_passkey.cpp: passkey retrieval (Mohtashami & Jaggi 2023; LongLoRA's prompt).
//
// A 5-7 digit pass key is hidden at a depth in the classic repeated filler ("The grass is green.
// The sky is blue. ..."); the model must repeat it. Scored by string match on the digits.
#include <fmt/format.h>

#include "eval/rng.h"
#include "eval/task.h"

namespace longctx::eval {
namespace {

constexpr int kMinDigits = 5, kMaxDigits = 7;
constexpr int kMaxNewTokens = 16;
constexpr const char* kPrefix =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there.\n\n";
constexpr const char* kQuestion = "\n\nWhat is the pass key?";
constexpr const char* kAnswerPrefix = " The pass key is";

class PasskeyTask final : public Task {
 public:
  std::string name() const override { return "passkey"; }
  bool depth_grid() const override { return true; }
  std::vector<double> default_depths() const override { return {0.0, 0.25, 0.5, 0.75, 1.0}; }
  int default_max_new_tokens() const override { return kMaxNewTokens; }

  Sample make(const TaskContext& ctx, const SampleSpec& spec) const override {
    Rng rng(spec.seed);
    const std::string key = rng.digits(int(rng.range(kMinDigits, kMaxDigits)));
    const double depth = spec.depth < 0 ? rng.uniform() : spec.depth;
    const std::vector<Insert> needle = {
        {depth, fmt::format("The pass key is {}. Remember it. {} is the pass key.", key, key)}};
    auto hay = make_noise_haystack();
    auto fitted = fit_prompt(
        ctx.renderer, spec.budget,
        [&](int64_t n) { return kPrefix + build_context(*hay, n, needle) + kQuestion; }, kAnswerPrefix,
        ctx.fit,
        [&](int64_t n) { return hay->boundary(n); });
    return make_sample(name(), spec, depth, depth, std::move(fitted), {key});
  }
};

}  // namespace

std::unique_ptr<Task> make_passkey_task() { return std::make_unique<PasskeyTask>(); }

}  // namespace longctx::eval

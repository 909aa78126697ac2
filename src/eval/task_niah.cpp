// task_niah.cpp: needle in a haystack over a depth x length grid (Kamradt's NIAH, scored
// automatically with a checkable needle in the style of LWM / Gemini: a city's magic number).
//
// Haystack: synthetic essay sentences, or lines of --text when given. Reported as a heatmap.
#include <fmt/format.h>

#include "eval/rng.h"
#include "eval/task.h"
#include "eval/words.h"

namespace longctx::eval {
namespace {

constexpr int kValueDigits = 7;
constexpr int kMaxNewTokens = 24;
constexpr int kDepthSteps = 10;  // default grid: 0%, 10%, ..., 100%

class NiahTask final : public Task {
 public:
  std::string name() const override { return "niah"; }
  bool depth_grid() const override { return true; }
  std::vector<double> default_depths() const override {
    std::vector<double> d;
    for (int i = 0; i <= kDepthSteps; ++i) d.push_back(double(i) / kDepthSteps);
    return d;
  }
  int default_max_new_tokens() const override { return kMaxNewTokens; }

  Sample make(const TaskContext& ctx, const SampleSpec& spec) const override {
    Rng rng(spec.seed);
    const std::string city = rng.pick(cities());
    const std::string value = rng.digits(kValueDigits);
    const double depth = spec.depth < 0 ? rng.uniform() : spec.depth;
    const std::vector<Insert> needle = {{depth, fmt::format("The special magic {} number is: {}.", city, value)}};
    auto hay = essay_or_book(ctx, rng.next());
    const std::string prefix =
        "A special magic number is hidden within the following text. Make sure to memorize it. "
        "I will quiz you about the number afterwards.\n\n";
    const std::string question = fmt::format("\n\nWhat is the special magic {} number?", city);
    const std::string answer_prefix = fmt::format(" The special magic {} number is:", city);
    auto fitted = fit_prompt(
        ctx.renderer, spec.budget,
        [&](int64_t n) { return prefix + build_context(*hay, n, needle) + question; }, answer_prefix,
        ctx.fit,
        [&](int64_t n) { return hay->boundary(n); });
    return make_sample(name(), spec, depth, depth, std::move(fitted), {value});
  }
};

}  // namespace

std::unique_ptr<Task> make_niah_task() { return std::make_unique<NiahTask>(); }

}  // namespace longctx::eval

// task_cwe.cpp: RULER common-words extraction (aggregation).
//
// A numbered list of words where 10 "common" words appear freq_cw times (30, RULER's default)
// and every other word 3 times, shuffled; the model must name the 10 common words. The list
// grows with the number of uncommon words until the prompt fills the budget; at short lengths
// freq_cw steps down (20, 10, 5) so the common words still fit. Scored with string_match_all.
#include <fmt/format.h>

#include "eval/rng.h"
#include "eval/task.h"
#include "eval/words.h"
#include "util/error.h"

namespace longctx::eval {
namespace {

constexpr int kCommonWords = 10;
constexpr int kFreqUncommon = 3;
constexpr int kFreqCommonSteps[] = {30, 20, 10, 5};
constexpr int kMaxNewTokens = 120;

class CommonWordsTask final : public Task {
 public:
  std::string name() const override { return "cwe"; }
  int default_max_new_tokens() const override { return kMaxNewTokens; }

  Sample make(const TaskContext& ctx, const SampleSpec& spec) const override {
    const std::string prefix =
        "Below is a numbered list of words. In these words, some appear more often than others. "
        "Memorize the ones that appear most often.\n";
    const std::string question = fmt::format(
        "\nQuestion: What are the {} most common words in the above list?", kCommonWords);
    const std::string answer_prefix = fmt::format(
        " Answer: The top {} words that appear most often in the list are:", kCommonWords);
    std::vector<std::string> common;
    auto list_of = [&](int freq_cw, int64_t n_uncommon) {
      Rng rng(spec.seed);
      auto words = distinct_words(rng, size_t(kCommonWords + n_uncommon));
      common.assign(words.begin(), words.begin() + kCommonWords);
      std::vector<std::string> list;
      for (size_t i = 0; i < words.size(); ++i)
        for (int r = 0; r < (int(i) < kCommonWords ? freq_cw : kFreqUncommon); ++r) list.push_back(words[i]);
      rng.shuffle(list);
      std::string text;
      for (size_t i = 0; i < list.size(); ++i) text += fmt::format("{}{}. {}", i ? " " : "", i + 1, list[i]);
      return prefix + text + question;
    };
    FittedPrompt fitted;
    for (size_t step = 0;; ++step) {
      const int freq_cw = kFreqCommonSteps[step];
      try {
        fitted = fit_prompt(
            ctx.renderer, spec.budget, [&](int64_t n) { return list_of(freq_cw, n); }, answer_prefix, ctx.fit);
        (void)list_of(freq_cw, fitted.n_units);  // leaves `common` as in the chosen prompt
        break;
      } catch (const Error&) {
        if (step + 1 == std::size(kFreqCommonSteps)) throw;
      }
    }
    return make_sample(name(), spec, -1, -1, std::move(fitted), common);
  }
};

}  // namespace

std::unique_ptr<Task> make_cwe_task() { return std::make_unique<CommonWordsTask>(); }

}  // namespace longctx::eval

// task_fwe.cpp: RULER frequent-words extraction (aggregation).
//
// Coded words (6 random letters) drawn with Zipf frequencies (alpha = 2, RULER's default) are
// joined by " .... "; the model must name the 3 most frequent. Counts are set deterministically
// (floor(n * p_k) for the 100 ranked words, then singletons), so the top 3 are always strictly
// ranked. Scored with string_match_all over the 3 words.
#include <cmath>
#include <fmt/format.h>
#include <unordered_set>

#include "eval/rng.h"
#include "eval/task.h"
#include "eval/words.h"
#include "util/error.h"

namespace longctx::eval {
namespace {

constexpr int kTop = 3;
constexpr int kRanked = 100;       // words with Zipf counts; the rest of the text is singletons
constexpr double kAlpha = 2.0;
constexpr int kWordLetters = 6;
constexpr int64_t kMinWords = 64;  // below this the top 3 are not clearly ranked
constexpr int kMaxNewTokens = 50;

std::string coded_word(Rng& rng) {
  std::string w;
  for (int i = 0; i < kWordLetters; ++i) w += char('a' + rng.below(26));
  return w;
}

class FrequentWordsTask final : public Task {
 public:
  std::string name() const override { return "fwe"; }
  int default_max_new_tokens() const override { return kMaxNewTokens; }

  Sample make(const TaskContext& ctx, const SampleSpec& spec) const override {
    const std::string prefix =
        "Read the following coded text and track the frequency of each coded word. Find the three most "
        "frequently appeared coded words. ";
    const std::string question =
        "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the three "
        "most frequently appeared words in the above coded text?";
    const std::string answer_prefix =
        " Answer: According to the coded text above, the three most frequently appeared words are:";
    double norm = 0;
    for (int k = 1; k <= kRanked; ++k) norm += std::pow(double(k), -kAlpha);
    std::vector<std::string> top;
    auto text_of = [&](int64_t n) {
      Rng rng(spec.seed);
      std::vector<std::string> vocab;
      std::unordered_set<std::string> seen;
      auto fresh = [&] {
        for (;;) {
          std::string w = coded_word(rng);
          if (seen.insert(w).second) return w;
        }
      };
      std::vector<std::string> words;
      for (int k = 1; k <= kRanked; ++k) {
        std::string w = fresh();
        if (k <= kTop) vocab.push_back(w);
        int64_t c = int64_t(std::floor(double(n) * std::pow(double(k), -kAlpha) / norm));
        for (int64_t i = 0; i < c; ++i) words.push_back(w);
      }
      while (int64_t(words.size()) < n) words.push_back(fresh());
      top = vocab;
      Rng order(mix_seed(spec.seed, uint64_t(n)));
      order.shuffle(words);
      std::string text;
      for (size_t i = 0; i < words.size(); ++i) text += (i ? " .... " : "") + words[i];
      return prefix + text + question;
    };
    auto fitted = fit_prompt(ctx.renderer, spec.budget, text_of, answer_prefix, ctx.fit);
    if (fitted.n_units < kMinWords)
      fail("fwe needs room for at least {} words; the budget of {} tokens holds only {}: use a larger --lengths "
           "value", kMinWords, spec.budget, fitted.n_units);
    (void)text_of(fitted.n_units);  // `top` as in the chosen prompt
    return make_sample(name(), spec, -1, -1, std::move(fitted), top);
  }
};

}  // namespace

std::unique_ptr<Task> make_fwe_task() { return std::make_unique<FrequentWordsTask>(); }

}  // namespace longctx::eval

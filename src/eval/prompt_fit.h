// prompt_fit.h: render task text as the model's prompt and fit it to a token budget.
//
// Lengths are counted in tokens of the model's own tokenizer, on the final prompt: the user
// message goes through the chat template (when the model has one; otherwise the plain text is
// used), the answer prefix ("The pass key is") is appended after the generation prompt, and
// the result is encoded with BOS as the model wants it. fit_prompt() searches the number of
// haystack units n (secant steps, then bisection) for the largest n whose prompt is at most
// `budget` tokens, stopping once it lands within the tolerance below the budget. A prompt never
// exceeds its budget.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace longctx::eval {

struct FitParams {
  double tolerance_frac = 0.005;  // accept a prompt this share of the budget below it ...
  int64_t tolerance_min = 32;     // ... or this many tokens, whichever is larger
  bool use_chat_template = true;  // false: always the plain prompt
  int max_probes = 48;            // tokenizer calls per fit before settling for the best found
};

int64_t length_tolerance(int64_t budget, const FitParams& p);

// Renders a user message (chat template when available) plus the answer prefix, and encodes it.
class PromptRenderer {
 public:
  PromptRenderer(const Tokenizer& tok, bool use_chat_template);
  std::string render(const std::string& user_text, const std::string& answer_prefix) const;
  std::vector<int32_t> encode(const std::string& prompt) const;
  bool has_chat_template() const { return chat_; }
  const Tokenizer& tokenizer() const { return tok_; }

 private:
  const Tokenizer& tok_;
  bool chat_ = false;
};

struct FittedPrompt {
  std::string text;             // the full prompt as the model sees it
  std::vector<int32_t> tokens;  // its encoding (<= budget)
  int64_t n_units = 0;          // the n that was chosen
};

// user_text(n): the user message with n haystack units. Throws Error if even n = 0 exceeds the
// budget (the message says how many tokens the task needs at least). clean_end(n), when given,
// says whether n units end cleanly (a whole sentence): the fit then steps back to the nearest
// clean end when that still lands within the tolerance.
FittedPrompt fit_prompt(const PromptRenderer& r, int64_t budget,
                        const std::function<std::string(int64_t n)>& user_text,
                        const std::string& answer_prefix, const FitParams& p,
                        const std::function<bool(int64_t n)>& clean_end = {});

}  // namespace longctx::eval

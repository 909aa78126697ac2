// prompt_fit.cpp: chat-template rendering and token-budget fitting (see prompt_fit.h).
#include "eval/prompt_fit.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace longctx::eval {
namespace {
constexpr int64_t kFirstProbeUnits = 64;  // units in the probe that estimates tokens per unit
}

int64_t length_tolerance(int64_t budget, const FitParams& p) {
  return std::max<int64_t>(p.tolerance_min, int64_t(std::ceil(double(budget) * p.tolerance_frac)));
}

PromptRenderer::PromptRenderer(const Tokenizer& tok, bool use_chat_template) : tok_(tok) {
  if (!use_chat_template) return;
  try {
    std::vector<ChatMessage> m{{"user", "hi"}};
    (void)tok_.apply_chat_template(m, true);
    chat_ = true;
  } catch (const std::exception&) {
    chat_ = false;  // no usable template: plain prompts
  }
}

std::string PromptRenderer::render(const std::string& user_text, const std::string& answer_prefix) const {
  if (chat_) {
    std::vector<ChatMessage> m{{"user", user_text}};
    std::string s = tok_.apply_chat_template(m, true);
    // After a generation prompt the answer starts a fresh line: drop the prefix's leading space.
    size_t skip = answer_prefix.find_first_not_of(' ');
    return s + (skip == std::string::npos ? std::string() : answer_prefix.substr(skip));
  }
  return user_text + answer_prefix;
}

std::vector<int32_t> PromptRenderer::encode(const std::string& prompt) const {
  return tok_.encode(prompt, tok_.adds_bos(), /*parse_special=*/chat_);
}

FittedPrompt fit_prompt(const PromptRenderer& r, int64_t budget,
                        const std::function<std::string(int64_t n)>& user_text,
                        const std::string& answer_prefix, const FitParams& p,
                        const std::function<bool(int64_t n)>& clean_end) {
  const int64_t tol = length_tolerance(budget, p);
  int probes = 0;
  auto make = [&](int64_t n) {
    ++probes;
    FittedPrompt f;
    f.text = r.render(user_text(n), answer_prefix);
    f.tokens = r.encode(f.text);
    f.n_units = n;
    return f;
  };
  FittedPrompt best = make(0);
  const int64_t t0 = int64_t(best.tokens.size());
  if (t0 > budget)
    fail("the task's prompt needs at least {} tokens without any haystack, more than the budget of {} "
         "tokens: use a larger --lengths value", t0, budget);
  if (budget - t0 <= tol) return best;

  FittedPrompt probe = make(kFirstProbeUnits);
  int64_t lo = 0, t_lo = t0, hi = -1, t_hi = 0;
  auto take = [&](FittedPrompt&& f) {
    int64_t t = int64_t(f.tokens.size());
    if (t <= budget) {
      if (f.n_units > lo) { lo = f.n_units; t_lo = t; best = std::move(f); }
    } else if (hi < 0 || f.n_units < hi) {
      hi = f.n_units; t_hi = t;
    }
  };
  take(std::move(probe));
  const int64_t aim = budget - tol / 3;  // land in the upper part of the tolerance window
  for (int step = 0; probes < p.max_probes; ++step) {
    if (budget - t_lo <= tol) break;
    if (hi >= 0 && hi - lo <= 1) break;
    // Tokens per unit from the bracket when we have one, else from the origin.
    double rate = hi >= 0 ? double(t_hi - t_lo) / double(hi - lo)
                          : double(std::max<int64_t>(t_lo - t0, 1)) / double(std::max<int64_t>(lo, 1));
    rate = std::max(rate, 1e-3);
    int64_t guess = lo + int64_t(std::floor(double(aim - t_lo) / rate));
    if (step % 4 == 3 && hi >= 0) guess = lo + (hi - lo) / 2;  // guaranteed progress
    guess = std::max(guess, lo + 1);
    if (hi >= 0) guess = std::min(guess, hi - 1);
    take(make(guess));
  }
  if (clean_end && best.n_units > 0 && !clean_end(best.n_units)) {
    int64_t n = best.n_units - 1;
    while (n > 0 && !clean_end(n)) --n;
    if (n > 0) {
      FittedPrompt c = make(n);
      if (int64_t(c.tokens.size()) >= budget - tol) best = std::move(c);
    }
  }
  return best;
}

}  // namespace longctx::eval

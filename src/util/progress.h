// progress.h: how long work reports how far it is (prefill, scoring, pattern search).
//
// What: done out of total units (tokens, prompts, layers: the caller says which) and the time
// since the work started. The public API (include/longctx/engine.h) re-exports it; layers below
// the runtime use it without including the API.
#pragma once
#include <cstdint>
#include <functional>

namespace longctx {

struct Progress {
  int64_t done = 0, total = 0;
  double elapsed_s = 0;
};
using ProgressFn = std::function<void(const Progress&)>;

}  // namespace longctx

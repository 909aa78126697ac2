// progress.h: a one-line progress report on stderr for long work (tokens done, rate, ETA).
// On a terminal the line is redrawn in place; otherwise a line is printed at most every
// kPrintInterval seconds, so logs stay short.
#pragma once
#include <cstdio>
#include <string>
#include <unistd.h>

#include "longctx/engine.h"

namespace longctx::cli {

class ProgressLine {
 public:
  explicit ProgressLine(std::string what, bool enabled = true) : what_(std::move(what)), enabled_(enabled) {
    tty_ = isatty(fileno(stderr));
  }
  void operator()(const Progress& p) {
    if (!enabled_) return;
    const bool last = p.done >= p.total;
    if (!tty_ && !last && p.elapsed_s - last_print_ < kPrintInterval) return;
    last_print_ = p.elapsed_s;
    const double rate = p.elapsed_s > 0 ? double(p.done) / p.elapsed_s : 0;
    const double eta = rate > 0 ? double(p.total - p.done) / rate : 0;
    std::fprintf(stderr, "%s%s: %lld/%lld tokens, %.1f tok/s, elapsed %.1fs, ETA %.1fs%s", tty_ ? "\r" : "",
                 what_.c_str(), (long long)p.done, (long long)p.total, rate, p.elapsed_s, eta,
                 tty_ ? (last ? "\n" : "") : "\n");
    std::fflush(stderr);
  }

 private:
  static constexpr double kPrintInterval = 2.0;
  std::string what_;
  bool enabled_, tty_;
  double last_print_ = -1e9;
};

}  // namespace longctx::cli

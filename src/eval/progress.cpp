// progress.cpp: eval progress lines with a token-weighted ETA (see progress.h).
#include "eval/progress.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>

namespace longctx::eval {

std::string format_duration(double s) {
  if (s < 60) return fmt::format("{:.1f}s", s);
  const int64_t t = int64_t(std::llround(s));
  if (t < 3600) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
}

ProgressReport::ProgressReport(std::string prefix, int64_t total_units, int64_t total_weight, bool enabled)
    : prefix_(std::move(prefix)), total_units_(total_units), total_weight_(total_weight), enabled_(enabled),
      start_(std::chrono::steady_clock::now()) {}

double ProgressReport::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressReport::done(int64_t weight, const std::string& detail) {
  ++units_;
  weight_ += weight;
  if (!enabled_) return;
  const double el = elapsed();
  const double eta = weight_ > 0 ? el * double(total_weight_ - weight_) / double(weight_) : 0.0;
  std::fprintf(stderr, "%s %lld/%lld %s | elapsed %s, ETA %s\n", prefix_.c_str(), (long long)units_,
               (long long)total_units_, detail.c_str(), format_duration(el).c_str(), format_duration(eta).c_str());
  std::fflush(stderr);
}

}  // namespace longctx::eval

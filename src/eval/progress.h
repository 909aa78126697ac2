// progress.h: one stderr line per finished unit of eval work: what, i/N, elapsed and ETA.
//
// ETA weighs work by tokens (prefill cost grows with length), so a 2K sample counts less than
// an 8K one. Lines, not carriage returns: eval runs are long and usually logged.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace longctx::eval {

class ProgressReport {
 public:
  ProgressReport(std::string prefix, int64_t total_units, int64_t total_weight, bool enabled);
  // Marks one unit of `weight` done and prints "prefix i/N detail | elapsed 12s, ETA 1m05s".
  void done(int64_t weight, const std::string& detail);
  double elapsed() const;

 private:
  std::string prefix_;
  int64_t total_units_, total_weight_, units_ = 0, weight_ = 0;
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
};

// 75 -> "1m15s", 3.2 -> "3.2s", 4000 -> "1h06m".
std::string format_duration(double seconds);

}  // namespace longctx::eval

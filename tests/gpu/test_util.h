// test_util.h (tests/gpu): helpers shared by the GPU model tests: temp dirs, GPU presence,
// logit comparisons with a stated bf16 tolerance.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "util/error.h"

#ifdef LONGCTX_WITH_GPU
#include "gpu/device_probe.h"
#endif

namespace longctx::test {

inline std::filesystem::path temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("longctx-gpu-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

// n token ids uniform in [0, vocab), reproducible from seed.
inline std::vector<int32_t> random_ids(int64_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = d(rng);
  return ids;
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The message of the longctx::Error that f throws ("" when it throws none).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline bool have_usable_gpu() {
#ifdef LONGCTX_WITH_GPU
  static const bool ok = gpu::probe_device().usable;
  return ok;
#else
  return false;
#endif
}

#define REQUIRE_GPU() \
  if (!::longctx::test::have_usable_gpu()) GTEST_SKIP() << "no usable (Hopper) GPU"

// bf16 tolerance for logits: the GPU keeps activations (and the residual stream) in bf16, 8
// significant bits, rounded after every op; fp32 inside each op. Relative to the logits' scale,
// a few roundings of 2^-9 per layer accumulate to ~1e-2; 3e-2 of the largest |logit| (plus 0.05
// absolute for near-zero rows) bounds it with margin. The CPU reference runs on the same
// (bf16-valued) weights, so this measures activation rounding only.
inline constexpr double kLogitRelTol = 3e-2;
inline constexpr double kLogitAbsFloor = 0.05;

struct LogitDiff {
  double max_abs = 0, scale = 0, rel_l2 = 0;
  int argmax_a = -1, argmax_b = -1;
  double margin_a = 0;  // top1 - top2 of a (the reference)
  double tol() const { return kLogitRelTol * scale + kLogitAbsFloor; }
};

// Row r of [n, V] logits: a = reference (CPU), b = GPU.
inline LogitDiff compare_row(const float* a, const float* b, int64_t V) {
  LogitDiff d;
  double num = 0, den = 0;
  for (int64_t j = 0; j < V; ++j) {
    d.max_abs = std::max(d.max_abs, double(std::abs(a[j] - b[j])));
    d.scale = std::max(d.scale, double(std::abs(a[j])));
    num += double(a[j] - b[j]) * double(a[j] - b[j]);
    den += double(a[j]) * double(a[j]);
  }
  d.rel_l2 = std::sqrt(num / std::max(den, 1e-30));
  d.argmax_a = int(std::max_element(a, a + V) - a);
  d.argmax_b = int(std::max_element(b, b + V) - b);
  double second = -1e30;
  for (int64_t j = 0; j < V; ++j)
    if (j != d.argmax_a) second = std::max(second, double(a[j]));
  d.margin_a = double(a[d.argmax_a]) - second;
  return d;
}

}  // namespace longctx::test

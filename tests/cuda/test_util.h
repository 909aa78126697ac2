// test_util.h (tests/cuda): helpers shared by the GPU tests: skip without a Hopper GPU, RAII
// device buffers, random bf16 inputs (fresh seed per run, printed for reproduction), fp64
// references and error summaries.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/runtime.h"
#include "util/half.h"

namespace longctx::cuda::test {

// GTEST_SKIP unless a Hopper GPU is visible (CI's CPU machine skips every GPU test).
#define LC_REQUIRE_GPU()                                                                  \
  do {                                                                                    \
    if (::longctx::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";           \
    const auto lc_info_ = ::longctx::cuda::device_info(0);                               \
    if (lc_info_.sm_major != 9) GTEST_SKIP() << "not a Hopper GPU: " << lc_info_.name;    \
  } while (0)

struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t n) : p(dev_malloc(n)), bytes(n) {}
  ~DevBuf() { dev_free(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p); }
  template <class T>
  void upload(const std::vector<T>& v) { copy_h2d(p, v.data(), v.size() * sizeof(T)); }
  template <class T>
  std::vector<T> download(size_t n) const {
    std::vector<T> v(n);
    copy_d2h(v.data(), p, n * sizeof(T));
    return v;
  }
  void poison() { memset_async(p, 0xff, bytes); }  // bf16/fp32 NaN everywhere
};

inline std::mt19937_64& rng() {
  static std::mt19937_64 gen = [] {
    const uint64_t seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    std::printf("[test_cuda] random seed %llu\n", (unsigned long long)seed);
    return std::mt19937_64(seed);
  }();
  return gen;
}

// n bf16 values ~ N(0, scale^2); `vals` gets the same values as doubles (the bf16-rounded inputs).
inline std::vector<uint16_t> random_bf16(size_t n, double scale, std::vector<double>& vals) {
  std::normal_distribution<float> dist(0.f, float(scale));
  std::vector<uint16_t> h(n);
  vals.resize(n);
  for (size_t i = 0; i < n; ++i) {
    h[i] = f32_to_bf16(dist(rng()));
    vals[i] = bf16_to_f32(h[i]);
  }
  return h;
}

inline std::vector<double> to_double(const std::vector<uint16_t>& h) {
  std::vector<double> v(h.size());
  for (size_t i = 0; i < h.size(); ++i) v[i] = bf16_to_f32(h[i]);
  return v;
}

// Error summary of got vs ref; tolerance |got - ref| <= atol + rtol * |ref| per element.
struct ErrStats {
  double max_abs = 0, max_rel = 0, rel_l2 = 0;
  int64_t n_bad = 0, n_nan = 0;
  std::string str() const {
    char b[200];
    std::snprintf(b, sizeof b, "max_abs=%.3g max_rel=%.3g rel_l2=%.3g bad=%lld nan=%lld", max_abs, max_rel, rel_l2,
                  (long long)n_bad, (long long)n_nan);
    return b;
  }
};

inline ErrStats compare(const std::vector<double>& got, const std::vector<double>& ref, double atol, double rtol) {
  ErrStats s;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i]) && std::isfinite(ref[i])) {
      ++s.n_nan;
      continue;
    }
    if (std::isinf(ref[i]) && got[i] == ref[i]) continue;
    const double e = std::fabs(got[i] - ref[i]);
    s.max_abs = std::max(s.max_abs, e);
    if (std::fabs(ref[i]) > 1e-3) s.max_rel = std::max(s.max_rel, e / std::fabs(ref[i]));
    if (e > atol + rtol * std::fabs(ref[i])) ++s.n_bad;
    num += e * e;
    den += ref[i] * ref[i];
  }
  s.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return s;
}

inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

}  // namespace longctx::cuda::test

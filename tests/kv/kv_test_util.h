// kv_test_util.h (tests/kv): a random generator with a fresh seed per run (printed, so a failure
// can be replayed) and random fp32 rows.
#pragma once
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace longctx::kv::test {

inline std::mt19937_64& rng() {
  static std::mt19937_64 gen = [] {
    const uint64_t seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    std::printf("[test_kv] random seed %llu\n", (unsigned long long)seed);
    return std::mt19937_64(seed);
  }();
  return gen;
}

inline std::vector<float> random_floats(size_t n, float sigma = 1.f) {
  std::normal_distribution<float> d(0.f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng());
  return v;
}

inline int64_t uniform(int64_t lo, int64_t hi) {  // [lo, hi]
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng());
}

}  // namespace longctx::kv::test

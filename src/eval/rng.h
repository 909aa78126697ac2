// rng.h: a small deterministic PRNG (SplitMix64) and helpers for generating eval prompts.
//
// Why: task prompts must be identical for the same seed on every platform and standard library,
// so nothing here uses std::rand, std::*_distribution or std::shuffle (their outputs are
// implementation-defined). Everything is integer arithmetic on uint64_t.
// Use: Rng r(derive_seed(seed, "passkey", length, i)); r.below(10); r.shuffle(vec);
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace longctx::eval {

// SplitMix64 (Steele, Lea, Flood 2014): tiny, full-period, good enough for test-data generation.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) for n > 0 (rejection sampling: no modulo bias).
  uint64_t below(uint64_t n) {
    if (n <= 1) return 0;
    const uint64_t limit = ~uint64_t(0) - (~uint64_t(0) % n);
    uint64_t x;
    do { x = next(); } while (x >= limit);
    return x % n;
  }
  // Uniform in [lo, hi] (inclusive).
  int64_t range(int64_t lo, int64_t hi) { return lo + int64_t(below(uint64_t(hi - lo) + 1)); }
  // Uniform double in [0, 1) with 53 random bits.
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }
  // Fisher-Yates shuffle.
  template <class T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[below(v.size())]; }
  // A number with exactly n_digits decimal digits (no leading zero), as text.
  std::string digits(int n_digits) {
    std::string s(size_t(n_digits), '0');
    s[0] = char('1' + below(9));
    for (int i = 1; i < n_digits; ++i) s[size_t(i)] = char('0' + below(10));
    return s;
  }

 private:
  uint64_t state_;
};

// FNV-1a 64-bit hash of a string (stable across platforms, unlike std::hash).
inline uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) { h ^= c; h *= 0x100000001b3ull; }
  return h;
}

// Mixes values into a seed so each (task, length, cell, sample) gets its own independent stream:
// a sample's prompt does not depend on which other lengths or samples are requested.
inline uint64_t mix_seed(uint64_t a, uint64_t b) {
  Rng r(a ^ (b * 0xd1b54a32d192ed03ull));
  r.next();
  return r.next();
}
inline uint64_t derive_seed(uint64_t seed, std::string_view tag, int64_t a = 0, int64_t b = 0,
                            int64_t c = 0) {
  uint64_t s = mix_seed(seed, fnv1a(tag));
  s = mix_seed(s, uint64_t(a));
  s = mix_seed(s, uint64_t(b));
  return mix_seed(s, uint64_t(c));
}

}  // namespace longctx::eval

// sampler.h: picks the next token from logits: greedy, or temperature + top-k + top-p with a
// seeded generator (xoshiro256**, so the same seed gives the same tokens on every platform).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "longctx/engine.h"

namespace longctx {

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  int32_t sample(std::span<const float> logits);
  double uniform();  // [0, 1), 53 random bits

 private:
  SamplingParams p_;
  uint64_t s_[4];
  std::vector<std::pair<float, int32_t>> cand_;  // scratch: (logit or prob, id)
};

}  // namespace longctx

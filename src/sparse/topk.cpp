// topk.cpp: see topk.h.
#include "sparse/topk.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace longctx {

void top_k_indices(std::span<const float> score, int64_t k, std::vector<int32_t>& out) {
  const int64_t n = int64_t(score.size());
  k = std::clamp<int64_t>(k, 0, n);
  out.resize(size_t(n));
  std::iota(out.begin(), out.end(), 0);
  auto key = [&](int32_t i) {
    const float s = score[size_t(i)];
    return std::isnan(s) ? -std::numeric_limits<float>::infinity() : s;
  };
  auto before = [&](int32_t a, int32_t b) {
    const float sa = key(a), sb = key(b);
    return sa != sb ? sa > sb : a < b;
  };
  if (k < n) std::nth_element(out.begin(), out.begin() + k, out.end(), before);
  out.resize(size_t(k));
  std::sort(out.begin(), out.end());
}

}  // namespace longctx

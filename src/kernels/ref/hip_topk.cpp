// hip_topk.cpp: see hip_topk.h.
#include "kernels/ref/hip_topk.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/error.h"

namespace longctx {

void check_hip_topk_params(const HipTopkParams& p, const char* method) {
  if (p.b_q < 1 || p.b_sq < 1 || p.b_k < 1 || p.b_sk < 1 || p.k < 1)
    fail("{}: k, b_q, b_sq, b_k, b_sk must be >= 1 (got k={} b_q={} b_sq={} b_k={} b_sk={})", method, p.k, p.b_q,
         p.b_sq, p.b_k, p.b_sk);
  if (p.b_q % p.b_sq) fail("{}: b_sq={} must divide b_q={}", method, p.b_sq, p.b_q);
  if (p.b_k % p.b_sk) fail("{}: b_sk={} must divide b_k={}", method, p.b_sk, p.b_k);
  if (p.k % p.b_k) fail("{}: b_k={} must divide k={}", method, p.b_k, p.k);
}

std::vector<int> hip_sample_rows(int rows, int b_sq) {
  std::vector<int> r;
  for (int t = 0; t * b_sq < rows; ++t) r.push_back(std::min(t * b_sq + b_sq - 1, rows - 1));
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

float hip_dot(const float* a, const float* b, int d) {
  constexpr int kLanes = 8, kChunk = 8;
  float lane[kLanes] = {};
  for (int c = 0; c * kChunk < d; ++c) {
    float& acc = lane[c % kLanes];
    for (int e = c * kChunk; e < std::min(d, c * kChunk + kChunk); ++e) acc = std::fma(a[e], b[e], acc);
  }
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

namespace {

struct Branch {
  int64_t a = 0, g = 0;  // first block, blocks
};

float branch_score(const HipTopkParams& p, const HipSearch& s, int64_t u) {
  float best = -std::numeric_limits<float>::infinity();
  for (int t = 0; t < p.b_k / p.b_sk; ++t) {
    const int64_t key = u * p.b_k + int64_t(t) * p.b_sk + p.b_sk - 1;
    if (key >= s.key_end) break;
    const float* kv = s.k + key * s.k_stride;
    for (int i = 0; i < s.n_qs; ++i) {
      if (key > s.q_pos[i]) continue;
      const float v = hip_dot(s.q + i * s.q_stride, kv, s.head_dim);
      if (v > best) best = v;  // NaN never wins
    }
  }
  return best;
}

}  // namespace

void hip_topk_blocks(const HipTopkParams& p, const HipSearch& s, std::vector<int32_t>& out) {
  out.clear();
  const int64_t n = std::max<int64_t>(0, s.block_end - s.block_begin);
  const int64_t m = p.budget_blocks();
  if (n <= m) {
    for (int64_t b = s.block_begin; b < s.block_end; ++b) out.push_back(int32_t(b));
    return;
  }
  std::vector<Branch> chunks(static_cast<size_t>(m)), br;
  for (int64_t c = 0; c < m; ++c) {
    const int64_t lo = n * c / m, hi = n * (c + 1) / m;
    chunks[size_t(c)] = {s.block_begin + lo, hi - lo};
  }
  std::vector<float> score;
  std::vector<int32_t> order;
  for (;;) {
    const bool done = std::all_of(chunks.begin(), chunks.end(), [](const Branch& b) { return b.g <= 1; });
    if (done) break;
    br.clear();
    for (const Branch& c : chunks) {
      const int64_t h = c.g / 2;
      if (h > 0) br.push_back({c.a, h});
      br.push_back({c.a + h, c.g - h});
    }
    score.resize(br.size());
    for (size_t i = 0; i < br.size(); ++i) score[i] = branch_score(p, s, br[i].a + br[i].g / 2);
    // Keep the M best: larger score first, then the earlier branch (the GPU ranks the same way).
    order.resize(br.size());
    for (size_t i = 0; i < br.size(); ++i) order[i] = int32_t(i);
    auto before = [&](int32_t x, int32_t y) {
      const float sx = score[size_t(x)], sy = score[size_t(y)];
      return sx != sy ? sx > sy : x < y;  // scores are never NaN (branch_score skips NaN dots)
    };
    std::nth_element(order.begin(), order.begin() + m, order.end(), before);
    order.resize(size_t(m));
    std::sort(order.begin(), order.end());
    for (int64_t c = 0; c < m; ++c) chunks[size_t(c)] = br[size_t(order[size_t(c)])];
  }
  for (const Branch& c : chunks) out.push_back(int32_t(c.a));
}

}  // namespace longctx

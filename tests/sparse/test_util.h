// test_util.h: shared helpers of the sparse tests: seeded random tensors, an fp64 dense
// attention oracle with an explicit boolean mask, the mask an index implies, and the fp64 oracle
// of pre-RoPE compacted attention (methods/run_cpu.h; TokenSelect, InfiniteHiP).
//
// Every sparse kernel is tested as "dense reference with the same mask": the oracle computes
// softmax attention in double over exactly the (query, key) pairs the mask allows.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "kernels/params/attention.h"
#include "methods/method.h"
#include "sparse/sparse_index.h"

namespace longctx::test {

// A problem: Q/K/V tensors plus the AttnParams pointing at them and output buffers.
struct Problem {
  std::vector<float> q, k, v, o, lse;
  AttnParams p;
};

// Fresh random values from N(0, sigma), fixed seed; never all-zero.
inline std::vector<float> randn(size_t n, uint64_t seed, float sigma = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, sigma);
  std::vector<float> x(n);
  for (auto& e : x) e = dist(rng);
  return x;
}

// n_q queries at q_pos0.. against n_kv = q_pos0 + n_q keys (the cache prefix), causal.
inline Problem make_problem(int64_t n_q, int64_t q_pos0, int n_head, int n_kv_head, int d, uint64_t seed,
                            float q_sigma = 1.f) {
  Problem pr;
  const int64_t n_kv = q_pos0 + n_q;
  pr.q = randn(size_t(n_q * n_head * d), seed * 3 + 1, q_sigma);
  pr.k = randn(size_t(n_kv * n_kv_head * d), seed * 3 + 2);
  pr.v = randn(size_t(n_kv * n_kv_head * d), seed * 3 + 3);
  pr.o.assign(size_t(n_q * n_head * d), std::nanf(""));
  pr.lse.assign(size_t(n_q * n_head), std::nanf(""));
  auto& p = pr.p;
  p.q = pr.q.data();
  p.k = pr.k.data();
  p.v = pr.v.data();
  p.o = pr.o.data();
  p.lse = pr.lse.data();
  p.n_q = n_q;
  p.n_kv = n_kv;
  p.n_head = n_head;
  p.n_kv_head = n_kv_head;
  p.head_dim = d;
  p.q_pos0 = q_pos0;
  p.scale = 1.f / std::sqrt(float(d));
  p.causal = true;
  return pr;
}

// mask(h, i, j): may query row i (chunk-relative) of head h attend key j? (causal not implied)
using MaskFn = std::function<bool(int h, int64_t i, int64_t j)>;

struct OracleOut {
  std::vector<double> o;    // [n_q, n_head, d]
  std::vector<double> lse;  // [n_head, n_q]
};

// fp64 softmax attention over the keys j < n_kv with mask(h, i, j) && (!causal || j <= pos(i)).
inline OracleOut oracle_attention(const AttnParams& p, const MaskFn& mask) {
  OracleOut out;
  const int d = p.head_dim, group = p.n_head / p.n_kv_head;
  out.o.assign(size_t(p.n_q * p.n_head * d), 0.0);
  out.lse.assign(size_t(p.n_q * p.n_head), -std::numeric_limits<double>::infinity());
  std::vector<double> s(size_t(p.n_kv));
  for (int h = 0; h < p.n_head; ++h) {
    const int hk = h / group;
    for (int64_t i = 0; i < p.n_q; ++i) {
      const float* q = p.q + (i * p.n_head + h) * d;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < p.n_kv; ++j) {
        const bool ok = mask(h, i, j) && (!p.causal || j <= p.q_pos0 + i);
        if (!ok) {
          s[size_t(j)] = -std::numeric_limits<double>::infinity();
          continue;
        }
        const float* k = p.k + (j * p.n_kv_head + hk) * d;
        double dot = 0;
        for (int t = 0; t < d; ++t) dot += double(q[t]) * double(k[t]);
        s[size_t(j)] = dot * double(p.scale);
        mx = std::max(mx, s[size_t(j)]);
      }
      if (mx == -std::numeric_limits<double>::infinity()) continue;  // empty row: O = 0, LSE = -inf
      double sum = 0;
      double* o = out.o.data() + (i * p.n_head + h) * d;
      for (int64_t j = 0; j < p.n_kv; ++j) {
        if (s[size_t(j)] == -std::numeric_limits<double>::infinity()) continue;
        const double w = std::exp(s[size_t(j)] - mx);
        sum += w;
        const float* v = p.v + (j * p.n_kv_head + hk) * d;
        for (int t = 0; t < d; ++t) o[t] += w * double(v[t]);
      }
      for (int t = 0; t < d; ++t) o[t] /= sum;
      out.lse[size_t(h * p.n_q + i)] = mx + std::log(sum);
    }
  }
  return out;
}

// The mask an index implies: key j is in the union of the ranges/columns of row i's block.
inline MaskFn index_mask(const SparseIndex& idx, int n_head) {
  const int share = n_head / int(idx.heads.size());
  return [&idx, share](int h, int64_t i, int64_t j) {
    const HeadIndex& hi = idx.heads[size_t(h / share)];
    const int64_t b = i / kSparseBlockQ;
    for (const auto& r : hi.block_ranges(b))
      if (j >= r.start && j < r.end) return true;
    for (const int32_t c : hi.block_cols(b))
      if (c == j) return true;
    return false;
  };
}

inline MaskFn all_keys() {
  return [](int, int64_t, int64_t) { return true; };
}

// Max |a - b| over O, and over LSE (both -inf counts as equal; one -inf only is +inf error).
struct Errors {
  double o = 0, lse = 0;
};
inline Errors compare(const std::vector<float>& o, const std::vector<float>& lse, const OracleOut& ref) {
  Errors e;
  for (size_t i = 0; i < o.size(); ++i) e.o = std::max(e.o, std::abs(double(o[i]) - ref.o[i]));
  for (size_t i = 0; i < lse.size(); ++i) {
    const bool a_inf = std::isinf(lse[i]) && lse[i] < 0, b_inf = std::isinf(ref.lse[i]) && ref.lse[i] < 0;
    if (a_inf && b_inf) continue;
    if (a_inf != b_inf) return {e.o, std::numeric_limits<double>::infinity()};
    e.lse = std::max(e.lse, std::abs(double(lse[i]) - ref.lse[i]));
  }
  if (std::any_of(o.begin(), o.end(), [](float x) { return std::isnan(x); })) e.o = std::numeric_limits<double>::infinity();
  return e;
}

// fp64 oracle of pre-RoPE compacted attention: gather K/V of the set, rotate key j at j and the
// chunk's query i at L - C + i (rotate-half, in double), causal softmax attention in double.
inline std::vector<double> compacted_oracle(const AttnParams& p, const KeySegment& s, const std::vector<float>& inv_freq) {
  const int D = p.head_dim, half = D / 2, g = p.n_head / p.n_kv_head;
  const int64_t L = int64_t(s.keys.size()), C = s.q_end - s.q_begin;
  auto rot = [&](const float* x, int64_t pos, double* out) {
    for (int i = 0; i < half; ++i) {
      const double a = double(pos) * double(inv_freq[size_t(i)]), c = std::cos(a), sn = std::sin(a);
      out[i] = x[i] * c - x[i + half] * sn;
      out[i + half] = x[i + half] * c + x[i] * sn;
    }
  };
  std::vector<double> out(size_t(C * p.n_head * D), 0.0), qr(static_cast<size_t>(D)), kr(static_cast<size_t>(L * p.n_kv_head * D));
  for (int64_t j = 0; j < L; ++j)
    for (int kh = 0; kh < p.n_kv_head; ++kh)
      rot(p.k + (int64_t(s.keys[size_t(j)]) * p.n_kv_head + kh) * D, j, kr.data() + (j * p.n_kv_head + kh) * D);
  for (int64_t i = 0; i < C; ++i)
    for (int h = 0; h < p.n_head; ++h) {
      rot(p.q + ((s.q_begin + i) * p.n_head + h) * D, L - C + i, qr.data());
      const int64_t last = L - C + i;  // causal in compacted positions
      std::vector<double> w(static_cast<size_t>(last + 1));
      double mx = -1e300;
      for (int64_t j = 0; j <= last; ++j) {
        double d = 0;
        for (int e = 0; e < D; ++e) d += qr[size_t(e)] * kr[size_t((j * p.n_kv_head + h / g) * D + e)];
        w[size_t(j)] = d * p.scale;
        mx = std::max(mx, w[size_t(j)]);
      }
      double z = 0;
      for (auto& x : w) z += (x = std::exp(x - mx));
      double* o = out.data() + (i * p.n_head + h) * D;
      for (int64_t j = 0; j <= last; ++j)
        for (int e = 0; e < D; ++e) o[e] += w[size_t(j)] / z * p.v[(int64_t(s.keys[size_t(j)]) * p.n_kv_head + h / g) * D + e];
    }
  return out;
}

inline std::vector<float> inv_freq_of(int D, double base) {
  std::vector<float> f(static_cast<size_t>(D / 2));
  for (int i = 0; i < D / 2; ++i) f[size_t(i)] = float(std::pow(base, -2.0 * i / D));
  return f;
}

// fp32 vs fp64 tolerance for O (V ~ N(0,1)) and LSE.
inline constexpr double kTolO = 5e-5;
inline constexpr double kTolLse = 5e-5;

}  // namespace longctx::test

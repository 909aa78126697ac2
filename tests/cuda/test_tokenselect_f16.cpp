// test_tokenselect_f16.cpp (tests/cuda): TokenSelect's per-head scores stored as fp16
// (cuda::ScoreElem::f16: half the bytes paged_dot writes and soft_vote reads).
//   - paged_dot's fp16 scores equal the fp64 gather-then-matmul within the fp32 accumulation's
//     error plus one fp16 rounding (2^-11 relative), bf16 and e4m3 keys, fp32 queries (the
//     step's), d 64/128/256, GQA groups 1/3/4/8, ragged M; the fused (max, sum exp) parts fold to
//     the fp64 max and normaliser of the fp16 values as stored;
//   - soft_vote over fp16 scores equals the fp64 soft vote of the same stored values, with its own
//     first pass and with the fused stats.
// The selection made from fp16 scores (vs fp64 with near-ties, and its overlap with the fp32
// scores' selection): test_tokenselect_step.cpp's F16Scores* tests.
// Run: build-gpu/tests/cuda/test_cuda --gtest_filter='TokenSelectF16*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/paged_dot.h"
#include "kernels/cuda/soft_vote.h"
#include "kernels/ref/fp8_e4m3.h"
#include "test_util.h"
#include "util/half.h"

namespace longctx::cuda::test {
namespace {

constexpr double kF16Rel = 1.0 / 2048;  // one round-to-nearest to fp16: half an ulp, 2^-11 relative

struct F16Case {
  int n_head, n_kv_head, head_dim;
  int64_t n_rows, n_slot;
  bool fp8_keys;
};

struct F16Run {
  std::vector<double> q, k, scores;  // q, k: the values the kernel sees (k dequantized); scores: as stored
  std::vector<int32_t> slots;
  std::vector<float> stats;          // fp32 [n_head, parts, 2]
  int parts = 0;
};

F16Run run_f16(const F16Case& c) {
  F16Run r;
  const size_t nq = size_t(c.n_head * c.head_dim), nk = size_t(c.n_rows * c.n_kv_head * c.head_dim);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> qf(nq);
  r.q.resize(nq);
  for (size_t i = 0; i < nq; ++i) r.q[i] = qf[i] = dist(rng());
  std::vector<uint16_t> kb;
  std::vector<uint8_t> k8;
  float k_scale = 1.f;
  if (c.fp8_keys) {  // N(0, 1) stored with the fp8 cache's rule (scale = amax / 448)
    std::vector<float> x(nk);
    float amax = 0.f;
    for (auto& v : x) amax = std::max(amax, std::fabs(v = dist(rng())));
    k_scale = fp8_scale_for_amax(amax);
    k8.resize(nk);
    r.k.resize(nk);
    for (size_t i = 0; i < nk; ++i) {
      k8[i] = f32_to_e4m3(x[i] / k_scale);
      r.k[i] = double(e4m3_to_f32(k8[i])) * k_scale;
    }
  } else {
    kb = random_bf16(nk, 1.0, r.k);
  }
  std::uniform_int_distribution<int32_t> pick(0, int32_t(c.n_rows - 1));
  r.slots.resize(size_t(c.n_slot));
  for (auto& s : r.slots) s = pick(rng());
  r.parts = paged_dot_stats_parts(c.n_slot, c.n_kv_head);
  DevBuf dq(nq * 4), dk(c.fp8_keys ? nk : nk * 2), ds(r.slots.size() * 4), dsc(size_t(c.n_head * c.n_slot) * 2),
      dst(size_t(c.n_head * r.parts) * 8);
  dq.upload(qf);
  if (c.fp8_keys) dk.upload(k8);
  else dk.upload(kb);
  ds.upload(r.slots);
  paged_dot({.q_f32 = dq.as<float>(), .k_pool = dk.p, .slots = ds.as<int32_t>(), .scores = dsc.p, .n_slot = c.n_slot,
             .n_head = c.n_head, .n_kv_head = c.n_kv_head, .head_dim = c.head_dim,
             .k_elem = c.fp8_keys ? PagedDotKeys::fp8_e4m3 : PagedDotKeys::bf16, .k_scale = k_scale,
             .head_stats = dst.as<float>(), .score_elem = ScoreElem::f16});
  const auto got = dsc.download<uint16_t>(size_t(c.n_head * c.n_slot));
  r.scores.resize(got.size());
  for (size_t i = 0; i < got.size(); ++i) r.scores[i] = f16_to_f32(got[i]);
  r.stats = dst.download<float>(size_t(c.n_head * r.parts) * 2);
  return r;
}

std::vector<double> dot_ref(const F16Case& c, const F16Run& r) {  // fp64 gather-then-matmul
  const int g = c.n_head / c.n_kv_head, D = c.head_dim;
  std::vector<double> ref(size_t(c.n_head * c.n_slot));
  for (int h = 0; h < c.n_head; ++h)
    for (int64_t j = 0; j < c.n_slot; ++j) {
      const double* kr = r.k.data() + (int64_t(r.slots[size_t(j)]) * c.n_kv_head + h / g) * D;
      double d = 0;
      for (int e = 0; e < D; ++e) d += r.q[size_t(h * D + e)] * kr[e];
      ref[size_t(h * c.n_slot + j)] = d;
    }
  return ref;
}

TEST(TokenSelectF16Scores, PagedDotEqualsFp64AndStatsDescribeStored) {
  LC_REQUIRE_GPU();
  for (int D : {64, 128, 256})
    // GQA groups 1, 3, 4, 8 (fp64 references: 12 s on an H100 machine's host for 90 cases, so fewer)
    for (auto [H, Hkv] : std::vector<std::pair<int, int>>{{8, 8}, {9, 3}, {32, 8}, {4, 1}})
      for (int64_t n : {int64_t(33), int64_t(4099)})
        for (bool fp8 : {false, true}) {
          const F16Case c{H, Hkv, D, 5000, n, fp8};
          const F16Run r = run_f16(c);
          // fp32 accumulation (as the fp32 scores: ~2e-4 sqrt(D) at |q|, |k| ~ 1), then one fp16 rounding.
          const double atol = 2e-4 * std::sqrt(double(D));
          const auto e = compare(r.scores, dot_ref(c, r), atol * (1 + kF16Rel), kF16Rel);
          const std::string what = "D " + std::to_string(D) + " heads " + std::to_string(H) + "/" +
                                   std::to_string(Hkv) + " n " + std::to_string(n) + (fp8 ? " fp8 keys" : " bf16 keys");
          EXPECT_EQ(e.n_bad, 0) << what << ": " << e.str();
          for (int h = 0; h < H; ++h) {  // the stats of the stored fp16 values, folded in fp64
            const double* row = r.scores.data() + int64_t(h) * n;
            const double m = *std::max_element(row, row + n);
            double z = 0;
            for (int64_t j = 0; j < n; ++j) z += std::exp(row[j] - m);
            double gm = -INFINITY, gz = 0;
            for (int i = 0; i < r.parts; ++i) gm = std::max(gm, double(r.stats[size_t((h * r.parts + i) * 2)]));
            for (int i = 0; i < r.parts; ++i) {
              const double pm = r.stats[size_t((h * r.parts + i) * 2)], ps = r.stats[size_t((h * r.parts + i) * 2 + 1)];
              if (pm != -INFINITY) gz += ps * std::exp(pm - gm);
            }
            EXPECT_EQ(gm, m) << what << " head " << h << ": max";
            EXPECT_NEAR(gz, z, 1e-4 * z) << what << " head " << h << ": sum of exp";
          }
        }
}

// The fp64 soft vote of scores [H, M] (the stored values).
std::vector<double> vote_ref(const std::vector<double>& s, int H, int64_t M) {
  std::vector<double> v(size_t(M), 0.0);
  for (int h = 0; h < H; ++h) {
    const double* row = s.data() + int64_t(h) * M;
    const double mx = *std::max_element(row, row + M);
    double z = 0;
    for (int64_t j = 0; j < M; ++j) z += std::exp(row[j] - mx);
    for (int64_t j = 0; j < M; ++j) v[size_t(j)] += std::exp(row[j] - mx) / z;
  }
  return v;
}

TEST(TokenSelectF16Scores, SoftVoteEqualsFp64OfStoredScores) {
  LC_REQUIRE_GPU();
  std::normal_distribution<float> dist(0.f, 4.f);
  for (auto [H, M] : std::vector<std::pair<int, int64_t>>{{1, 1}, {4, 63}, {28, 4097}, {32, 200003}}) {
    std::vector<uint16_t> s16(size_t(H * M));
    std::vector<double> s(s16.size());
    for (size_t i = 0; i < s16.size(); ++i) s[i] = f16_to_f32(s16[i] = f32_to_f16(dist(rng())));
    DevBuf ds(s16.size() * 2), dv(size_t(M) * 4), ws(soft_vote_workspace_bytes(H));
    ds.upload(s16);
    soft_vote({.scores = ds.p, .vote = dv.as<float>(), .n_head = H, .M = M, .workspace = ws.p,
               .score_elem = ScoreElem::f16});
    const auto got = dv.download<float>(size_t(M));
    const auto e = compare(std::vector<double>(got.begin(), got.end()), vote_ref(s, H, M), 1e-6, 1e-4);
    EXPECT_EQ(e.n_bad, 0) << "H " << H << " M " << M << ": " << e.str();
  }
  // Fed paged_dot's fused stats over its fp16 scores: the same vote.
  const F16Case c{32, 8, 128, 70000, 60000, true};
  const F16Run r = run_f16(c);
  std::vector<uint16_t> s16(r.scores.size());
  for (size_t i = 0; i < s16.size(); ++i) s16[i] = f32_to_f16(float(r.scores[i]));  // exact: they are fp16 values
  DevBuf ds(s16.size() * 2), dst(r.stats.size() * 4), dv(size_t(c.n_slot) * 4), ws(soft_vote_workspace_bytes(c.n_head));
  ds.upload(s16);
  dst.upload(r.stats);
  soft_vote({.scores = ds.p, .vote = dv.as<float>(), .n_head = c.n_head, .M = c.n_slot, .workspace = ws.p,
             .head_stats = dst.as<float>(), .stats_parts = r.parts, .score_elem = ScoreElem::f16});
  const auto got = dv.download<float>(size_t(c.n_slot));
  const auto e = compare(std::vector<double>(got.begin(), got.end()), vote_ref(r.scores, c.n_head, c.n_slot), 1e-6, 1e-4);
  EXPECT_EQ(e.n_bad, 0) << "fused stats: " << e.str();
}

}  // namespace
}  // namespace longctx::cuda::test

// test_tokenselect_fp8.cpp (tests/cuda): TokenSelect's scoring over fp8 e4m3 keys and the soft
// vote's per-head max / sum fused into the scoring pass.
//   - paged_dot over e4m3 keys (an fp8 cache's: one scale) equals the fp64 gather-then-matmul of
//     the dequantized keys (the CPU twin: kernels/ref/paged_dot.h over keys widened by
//     kernels/ref/fp8_e4m3.h), bf16 and fp32 queries, GQA groups 1/2/3/4/7/8, d 64/128/256, ragged M;
//   - the fused per-CTA (max, sum exp) parts fold to the fp64 per-head max and normaliser of the
//     scores paged_dot wrote, also with the count read from the device (parts past it empty);
//   - soft_vote fed those parts equals the fp64 soft vote, and the top-k of the whole fp8 pipeline
//     equals the fp64 brute force on the dequantized keys away from near-ties at the k-th place.
// Run: build/tests/cuda/test_cuda --gtest_filter='TokenSelectFp8*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cuda/paged_dot.h"
#include "kernels/cuda/soft_vote.h"
#include "kernels/ref/fp8_e4m3.h"
#include "test_util.h"

namespace longctx::cuda::test {
namespace {

struct Fp8Case {
  int n_head, n_kv_head, head_dim;
  int64_t n_rows, n_slot;
  bool q_f32;
};

// Random keys ~ N(0, 2^2) stored as e4m3 with the fp8 cache's rule (scale = amax / 448); k gets
// the dequantized values (stored * scale), the ones the kernel must use.
struct Fp8Keys {
  std::vector<uint8_t> bytes;
  std::vector<double> k;
  float scale = 1.f;
};
Fp8Keys random_fp8_keys(size_t n) {
  std::normal_distribution<float> dist(0.f, 2.f);
  std::vector<float> x(n);
  float amax = 0.f;
  for (auto& v : x) amax = std::max(amax, std::fabs(v = dist(rng())));
  Fp8Keys r;
  r.scale = fp8_scale_for_amax(amax);
  r.bytes.resize(n);
  r.k.resize(n);
  for (size_t i = 0; i < n; ++i) {
    r.bytes[i] = f32_to_e4m3(x[i] / r.scale);
    r.k[i] = double(e4m3_to_f32(r.bytes[i])) * r.scale;
  }
  return r;
}

struct Fp8Run {
  std::vector<double> q, k, scores;  // q, k: the values the kernel sees; scores: its output
  std::vector<int32_t> slots;
  std::vector<float> stats;          // [n_head, parts, 2]
  int parts = 0;
};

Fp8Run run_fp8(const Fp8Case& c) {
  Fp8Run r;
  const size_t nq = size_t(c.n_head * c.head_dim);
  std::vector<uint16_t> qb;
  std::vector<float> qf(nq);
  if (c.q_f32) {
    std::normal_distribution<float> dist(0.f, 1.f);
    r.q.resize(nq);
    for (size_t i = 0; i < nq; ++i) r.q[i] = qf[i] = dist(rng());
  } else {
    qb = random_bf16(nq, 1.0, r.q);
  }
  const Fp8Keys keys = random_fp8_keys(size_t(c.n_rows * c.n_kv_head * c.head_dim));
  r.k = keys.k;
  std::uniform_int_distribution<int32_t> pick(0, int32_t(c.n_rows - 1));
  r.slots.resize(size_t(c.n_slot));
  for (auto& s : r.slots) s = pick(rng());
  r.parts = paged_dot_stats_parts(c.n_slot, c.n_kv_head);
  DevBuf dq(nq * 4), dk(keys.bytes.size()), ds(r.slots.size() * 4), dsc(size_t(c.n_head * c.n_slot) * 4),
      dst(size_t(c.n_head * r.parts) * 8);
  if (c.q_f32) dq.upload(qf);
  else dq.upload(qb);
  dk.upload(keys.bytes);
  ds.upload(r.slots);
  paged_dot({.q = c.q_f32 ? nullptr : dq.p, .q_f32 = c.q_f32 ? dq.as<float>() : nullptr, .k_pool = dk.p,
             .slots = ds.as<int32_t>(), .scores = dsc.as<float>(), .n_slot = c.n_slot, .n_head = c.n_head,
             .n_kv_head = c.n_kv_head, .head_dim = c.head_dim, .k_elem = PagedDotKeys::fp8_e4m3,
             .k_scale = keys.scale, .head_stats = dst.as<float>()});
  const auto got = dsc.download<float>(size_t(c.n_head * c.n_slot));
  r.scores.assign(got.begin(), got.end());
  r.stats = dst.download<float>(size_t(c.n_head * r.parts) * 2);
  return r;
}

std::vector<double> dot_ref(const Fp8Case& c, const Fp8Run& r) {  // fp64 gather-then-matmul
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

// The parts of head h folded in fp64: (max, sum exp(x - max)).
std::pair<double, double> fold(const std::vector<float>& stats, int parts, int h) {
  double m = -INFINITY;
  for (int i = 0; i < parts; ++i) m = std::max(m, double(stats[size_t((h * parts + i) * 2)]));
  double z = 0;
  for (int i = 0; i < parts; ++i) {
    const double pm = stats[size_t((h * parts + i) * 2)], ps = stats[size_t((h * parts + i) * 2 + 1)];
    if (pm != -INFINITY) z += ps * std::exp(pm - m);
  }
  return {m, z};
}

void expect_stats_match(const Fp8Case& c, const Fp8Run& r, int64_t n, const std::string& what) {
  for (int h = 0; h < c.n_head; ++h) {
    const double* row = r.scores.data() + int64_t(h) * c.n_slot;
    const double m = *std::max_element(row, row + n);
    double z = 0;
    for (int64_t j = 0; j < n; ++j) z += std::exp(row[j] - m);
    const auto [gm, gz] = fold(r.stats, r.parts, h);
    EXPECT_EQ(gm, m) << what << " head " << h << ": max";
    // fp32 sums of up to M terms in [0, 1] with __expf: relative error well under 1e-4.
    EXPECT_NEAR(gz, z, 1e-4 * z) << what << " head " << h << ": sum of exp";
  }
}

TEST(TokenSelectFp8PagedDot, EqualsDequantizedGatherThenMatmul) {
  LC_REQUIRE_GPU();
  for (int D : {64, 128, 256})
    for (auto [H, Hkv] : std::vector<std::pair<int, int>>{{8, 8}, {8, 4}, {9, 3}, {16, 4}, {28, 4}, {64, 8}, {4, 1}})
      for (int64_t n : {int64_t(1), int64_t(33), int64_t(4099)})
        for (bool qf : {false, true}) {
          const Fp8Case c{H, Hkv, D, 5000, n, qf};
          const Fp8Run r = run_fp8(c);
          // The keys are exact in fp16, the query's hi + lo fp16 parts carry ~22 bits: the error is
          // the fp32 accumulation's, as for bf16 keys (|q| ~ 1, |k| ~ 2).
          const auto e = compare(r.scores, dot_ref(c, r), 2e-4 * std::sqrt(double(D)), 1e-5);
          const std::string what = "D " + std::to_string(D) + " heads " + std::to_string(H) + "/" +
                                   std::to_string(Hkv) + " n " + std::to_string(n) + (qf ? " q fp32" : " q bf16");
          EXPECT_EQ(e.n_bad, 0) << what << ": " << e.str();
          expect_stats_match(c, r, n, what);
        }
}

// Fused stats with the count read from the device: parts of CTAs past the device count are
// empty, the rest fold to the stats of the first n scores; a set skip flag writes nothing.
TEST(TokenSelectFp8PagedDot, FusedStatsFollowTheDeviceCount) {
  LC_REQUIRE_GPU();
  const int H = 32, Hkv = 8, D = 128;
  const int64_t rows = 9000, bound = 8000, n = 301;
  constexpr int32_t kSub = 640;
  std::vector<double> qd, kd;
  const auto qb = random_bf16(size_t(H * D), 1.0, qd), kb = random_bf16(size_t(rows * Hkv * D), 1.0, kd);
  std::vector<int32_t> slots(static_cast<size_t>(bound));
  std::uniform_int_distribution<int32_t> pick(0, int32_t(rows - 1));
  for (auto& x : slots) x = pick(rng());
  const int parts = paged_dot_stats_parts(bound, Hkv);
  DevBuf dq(qb.size() * 2), dk(kb.size() * 2), ds(slots.size() * 4), dsc(size_t(H * bound) * 4), dn(4),
      dst(size_t(H * parts) * 8), dskip(4);
  dq.upload(qb);
  dk.upload(kb);
  ds.upload(slots);
  dn.upload(std::vector<int32_t>{int32_t(n) + kSub});
  dst.poison();
  PagedDotParams dp{.q = dq.p, .k_pool = dk.p, .slots = ds.as<int32_t>(), .scores = dsc.as<float>(), .n_slot = bound,
                    .n_head = H, .n_kv_head = Hkv, .head_dim = D, .n_dev = dn.as<int32_t>(), .n_sub = kSub,
                    .head_stats = dst.as<float>()};
  paged_dot(dp);
  Fp8Run r;
  const auto got = dsc.download<float>(size_t(H * n));  // the device count: rows of length n
  r.scores.assign(got.begin(), got.end());
  r.stats = dst.download<float>(size_t(H * parts) * 2);
  r.parts = parts;
  const Fp8Case c{H, Hkv, D, rows, n, false};
  expect_stats_match(c, r, n, "device count");
  for (int h = 0; h < H; ++h)
    for (int i = int((n + 15) / 16); i < parts; ++i) {
      EXPECT_EQ(r.stats[size_t((h * parts + i) * 2)], -INFINITY) << "head " << h << " part " << i;
      EXPECT_EQ(r.stats[size_t((h * parts + i) * 2 + 1)], 0.f) << "head " << h << " part " << i;
    }
  dskip.upload(std::vector<int32_t>{1});
  const std::vector<float> marker(size_t(H * parts) * 2, 3.f);
  dst.upload(marker);
  dp.skip = dskip.as<int32_t>();
  paged_dot(dp);
  EXPECT_TRUE(dst.download<float>(marker.size()) == marker) << "stats written on a set skip flag";
}

// fp8 scoring + the fused stats + soft vote + top-k vs the fp64 soft vote of the dequantized
// keys; near-ties at the k-th place may go either way.
TEST(TokenSelectFp8Selection, PipelineEqualsFp64OnDequantizedKeys) {
  LC_REQUIRE_GPU();
  const Fp8Case c{32, 8, 128, 70000, 60000, true};
  const int64_t k = 2048, M = c.n_slot;
  const Fp8Run r = run_fp8(c);
  const std::vector<double> s64 = dot_ref(c, r);
  std::vector<double> want_vote(size_t(M), 0.0);
  for (int h = 0; h < c.n_head; ++h) {
    const double* row = s64.data() + int64_t(h) * M;
    const double mx = *std::max_element(row, row + M);
    double z = 0;
    for (int64_t j = 0; j < M; ++j) z += std::exp(row[j] - mx);
    for (int64_t j = 0; j < M; ++j) want_vote[size_t(j)] += std::exp(row[j] - mx) / z;
  }
  const std::vector<float> s32(r.scores.begin(), r.scores.end());
  DevBuf dsc(s32.size() * 4), dst(r.stats.size() * 4), dv(size_t(M) * 4), ws(soft_vote_workspace_bytes(c.n_head)),
      dout(size_t(k) * 4);
  dsc.upload(s32);
  dst.upload(r.stats);
  soft_vote({.scores = dsc.as<float>(), .vote = dv.as<float>(), .n_head = c.n_head, .M = M, .workspace = ws.p,
             .head_stats = dst.as<float>(), .stats_parts = r.parts});
  const auto got_vote = dv.download<float>(size_t(M));
  const auto e = compare(std::vector<double>(got_vote.begin(), got_vote.end()), want_vote, 1e-6, 2e-4);
  EXPECT_EQ(e.n_bad, 0) << "fused soft vote: " << e.str();
  const size_t wb = top_k_workspace_bytes(M, k);
  DevBuf tws(wb);
  top_k_sorted({.vote = dv.as<float>(), .M = M, .k = k, .out = dout.as<int32_t>(), .workspace = tws.p,
                .workspace_bytes = wb});
  const auto got = dout.download<int32_t>(size_t(k));
  std::vector<int32_t> order(static_cast<size_t>(M));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return want_vote[size_t(a)] > want_vote[size_t(b)]; });
  // Entries whose fp64 vote is within the fp32 error of the k-th are the near-ties: they may
  // swap with each other, every other entry must agree.
  const double kth = want_vote[size_t(order[size_t(k - 1)])], tol = 1e-4 * kth;
  std::vector<int32_t> sure;  // certainly in
  int64_t n_tie = 0;
  for (int64_t i = 0; i < M; ++i) {
    const double v = want_vote[size_t(order[size_t(i)])];
    if (v > kth + tol) sure.push_back(order[size_t(i)]);
    else if (v >= kth - tol) ++n_tie;
    else break;
  }
  std::sort(sure.begin(), sure.end());
  std::vector<int32_t> common;
  std::set_intersection(got.begin(), got.end(), sure.begin(), sure.end(), std::back_inserter(common));
  EXPECT_EQ(common.size(), sure.size()) << "a clearly selected token is missing (" << n_tie << " near-ties)";
  EXPECT_LE(int64_t(sure.size()), k);
  EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
}

}  // namespace
}  // namespace longctx::cuda::test

// test_tokenselect.cpp (tests/cuda): TokenSelect's selection kernels against fp64 / brute-force
// twins of the CPU references (kernels/ref/paged_dot.h, kernels/ref/soft_vote.h, sparse/topk.h's
// tie rule): the paged dot product on random slots, ragged sizes and GQA groups 1/3/4/7/8 equals
// gather-then-matmul; the soft (and naive) vote equals the fp64 per-head softmax sum; the top-k
// equals a stable brute force on the same votes, ties included; the whole selection step equals
// the fp64 brute force away from ties.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "kernels/cuda/paged_dot.h"
#include "kernels/cuda/soft_vote.h"
#include "test_util.h"

namespace longctx::cuda::test {
namespace {

struct DotCase {
  int n_head, n_kv_head, head_dim;
  int64_t n_rows, n_slot;
};

// fp64 gather-then-matmul: ref[h][j] = q[h] . k[slots[j]][h / g].
std::vector<double> dot_ref(const DotCase& c, const std::vector<double>& q, const std::vector<double>& k,
                            const std::vector<int32_t>& slots) {
  const int g = c.n_head / c.n_kv_head, D = c.head_dim;
  std::vector<double> ref(size_t(c.n_head * c.n_slot));
  for (int h = 0; h < c.n_head; ++h)
    for (int64_t j = 0; j < c.n_slot; ++j) {
      const double* kr = k.data() + (int64_t(slots[size_t(j)]) * c.n_kv_head + h / g) * D;
      double d = 0;
      for (int e = 0; e < D; ++e) d += q[size_t(h * D + e)] * kr[e];
      ref[size_t(h * c.n_slot + j)] = d;
    }
  return ref;
}

struct DevDot {
  std::vector<double> q, k, scores;
  std::vector<int32_t> slots;
};
DevDot run_paged_dot(const DotCase& c) {
  DevDot r;
  const auto qb = random_bf16(size_t(c.n_head * c.head_dim), 1.0, r.q);
  const auto kb = random_bf16(size_t(c.n_rows * c.n_kv_head * c.head_dim), 1.0, r.k);
  std::uniform_int_distribution<int32_t> pick(0, int32_t(c.n_rows - 1));
  r.slots.resize(size_t(c.n_slot));
  for (auto& s : r.slots) s = pick(rng());  // random, repeats allowed
  DevBuf dq(qb.size() * 2), dk(kb.size() * 2), ds(std::max<size_t>(r.slots.size() * 4, 4)),
      dsc(std::max<size_t>(size_t(c.n_head * c.n_slot) * 4, 4));
  dq.upload(qb);
  dk.upload(kb);
  if (!r.slots.empty()) ds.upload(r.slots);
  paged_dot({.q = dq.p, .k_pool = dk.p, .slots = ds.as<int32_t>(), .scores = dsc.as<float>(), .n_slot = c.n_slot,
             .n_head = c.n_head, .n_kv_head = c.n_kv_head, .head_dim = c.head_dim});
  const auto got = dsc.download<float>(size_t(c.n_head * c.n_slot));
  r.scores.assign(got.begin(), got.end());
  return r;
}

TEST(TokenSelectPagedDot, EqualsGatherThenMatmul) {
  LC_REQUIRE_GPU();
  for (int D : {64, 128, 256})  // 256: Gemma 3's global layers (4 query / 1 KV head)
    for (auto [H, Hkv] : std::vector<std::pair<int, int>>{{8, 8}, {9, 3}, {16, 4}, {28, 4}, {32, 4}, {64, 8}, {4, 1}})
      for (int64_t n : {int64_t(1), int64_t(31), int64_t(33), int64_t(1000), int64_t(4099)}) {
        const DotCase c{H, Hkv, D, 5000, n};
        const DevDot r = run_paged_dot(c);
        // fp32 products and sums of bf16 inputs: error ~ sqrt(D) * |q||k| * 2^-24 per term.
        const auto e = compare(r.scores, dot_ref(c, r.q, r.k, r.slots), 1e-4 * std::sqrt(double(D)), 1e-5);
        EXPECT_EQ(e.n_bad, 0) << "D " << D << " heads " << H << "/" << Hkv << " n " << n << ": " << e.str();
      }
}

std::vector<double> vote_ref(const std::vector<float>& s, int H, int64_t M, bool naive) {
  std::vector<double> v(size_t(M), 0.0);
  for (int h = 0; h < H; ++h) {
    const float* row = s.data() + int64_t(h) * M;
    const double mx = *std::max_element(row, row + M);
    double z = 0;
    for (int64_t j = 0; j < M; ++j) z += std::exp(row[j] - mx);
    for (int64_t j = 0; j < M; ++j) v[size_t(j)] += naive ? double(row[j]) : std::exp(row[j] - mx) / z;
  }
  return v;
}

std::vector<float> random_scores(size_t n, float sigma) {
  std::normal_distribution<float> dist(0.f, sigma);
  std::vector<float> s(n);
  for (auto& x : s) x = dist(rng());
  return s;
}

std::vector<float> run_vote(const std::vector<float>& s, int H, int64_t M, bool naive) {
  DevBuf ds(s.size() * 4), dv(size_t(M) * 4), ws(soft_vote_workspace_bytes(H));
  ds.upload(s);
  soft_vote({.scores = ds.as<float>(), .vote = dv.as<float>(), .n_head = H, .M = M, .naive = naive, .workspace = ws.p});
  return dv.download<float>(size_t(M));
}

TEST(TokenSelectSoftVote, EqualsFp64HeadSoftmaxSum) {
  LC_REQUIRE_GPU();
  for (bool naive : {false, true})
    for (auto [H, M] : std::vector<std::pair<int, int64_t>>{
             {1, 1}, {4, 63}, {8, 100}, {28, 4097}, {16, 65536}, {32, 200003}, {32, 262144}}) {
      const auto s = random_scores(size_t(H * M), 4.f);
      const auto got = run_vote(s, H, M, naive);
      const auto e = compare(std::vector<double>(got.begin(), got.end()), vote_ref(s, H, M, naive),
                             naive ? 1e-4 : 1e-6, 1e-4);
      EXPECT_EQ(e.n_bad, 0) << (naive ? "naive" : "soft") << " H " << H << " M " << M << ": " << e.str();
    }
}

// Brute force with sparse/topk.h's rule: larger vote first, then smaller index; ascending.
std::vector<int32_t> brute_top_k(const std::vector<float>& v, int64_t k, int32_t offset) {
  std::vector<int32_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return v[size_t(a)] > v[size_t(b)]; });
  order.resize(size_t(std::min<int64_t>(k, int64_t(v.size()))));
  std::sort(order.begin(), order.end());
  for (auto& i : order) i += offset;
  return order;
}

std::vector<int32_t> run_top_k(const std::vector<float>& v, int64_t k, int32_t offset) {
  const int64_t M = int64_t(v.size()), kk = std::min(k, M);
  DevBuf dv(std::max<size_t>(v.size() * 4, 4)), dout(std::max<size_t>(size_t(kk) * 4, 4));
  const size_t wb = top_k_workspace_bytes(M, kk);
  DevBuf ws(std::max<size_t>(wb, 4));
  if (!v.empty()) dv.upload(v);
  top_k_sorted({.vote = dv.as<float>(), .M = M, .k = k, .offset = offset, .out = dout.as<int32_t>(), .workspace = ws.p,
                .workspace_bytes = wb});
  return dout.download<int32_t>(size_t(kk));
}

TEST(TokenSelectTopK, EqualsStableBruteForceWithTies) {
  LC_REQUIRE_GPU();
  for (auto [M, k] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {100, 100}, {100, 300}, {1000, 1}, {5000, 2048}, {300001, 2048}}) {
    auto v = random_scores(size_t(M), 1.f);
    for (auto& x : v) x = std::abs(x);
    EXPECT_EQ(run_top_k(v, k, 128), brute_top_k(v, k, 128)) << "M " << M << " k " << k;
    for (auto& x : v) x = std::round(x * 4.f) / 4.f;  // many exact ties
    EXPECT_EQ(run_top_k(v, k, 0), brute_top_k(v, k, 0)) << "ties, M " << M << " k " << k;
  }
}

// The whole selection step on the device vs fp64 brute force over the same bf16 inputs (ties
// and near-ties at the k-th place excluded: fp32 may order them either way).
TEST(TokenSelectSelection, DevicePipelineEqualsFp64) {
  LC_REQUIRE_GPU();
  const DotCase c{32, 8, 128, 70000, 60000};
  const int64_t k = 2048;
  const DevDot r = run_paged_dot(c);
  std::vector<double> s64 = dot_ref(c, r.q, r.k, r.slots);
  std::vector<float> s32(s64.begin(), s64.end());
  const std::vector<double> want_vote = vote_ref(s32, c.n_head, c.n_slot, false);
  const auto got_vote = run_vote(std::vector<float>(r.scores.begin(), r.scores.end()), c.n_head, c.n_slot, false);
  const auto got = run_top_k(got_vote, k, 0);
  std::vector<int32_t> order(size_t(c.n_slot));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return want_vote[size_t(a)] > want_vote[size_t(b)]; });
  const double gap = want_vote[size_t(order[size_t(k - 1)])] - want_vote[size_t(order[size_t(k)])];
  std::vector<int32_t> want(order.begin(), order.begin() + k);
  std::sort(want.begin(), want.end());
  if (gap > 1e-5 * want_vote[size_t(order[size_t(k - 1)])]) {
    EXPECT_EQ(got, want);
  } else {  // a near-tie: all but the boundary entries agree
    std::vector<int32_t> common;
    std::set_intersection(got.begin(), got.end(), want.begin(), want.end(), std::back_inserter(common));
    EXPECT_GE(int64_t(common.size()), k - 2);
  }
}

// The decode step's graph-replayable forms: the count read from device memory (launched for a
// larger bound) gives bit for bit what the host count gives, and a set skip flag writes nothing.
TEST(TokenSelectDeviceCounts, PagedDotAndVoteFollowTheDeviceCountAndSkip) {
  LC_REQUIRE_GPU();
  const int H = 32, Hkv = 8, D = 128;
  const int64_t rows = 6000, bound = 5000, n = 3777;
  constexpr int32_t kSub = 640;  // as TokenSelect: n_init + n_local subtracted from the kv length
  std::vector<double> qd, kd;
  const auto qb = random_bf16(size_t(H * D), 1.0, qd), kb = random_bf16(size_t(rows * Hkv * D), 1.0, kd);
  std::vector<int32_t> slots(static_cast<size_t>(bound));
  std::uniform_int_distribution<int32_t> pick(0, int32_t(rows - 1));
  for (auto& x : slots) x = pick(rng());
  DevBuf dq(qb.size() * 2), dk(kb.size() * 2), ds(slots.size() * 4), dsc(size_t(H * bound) * 4), dn(4), dskip(4),
      dv(size_t(bound) * 4), ws(soft_vote_workspace_bytes(H));
  dq.upload(qb);
  dk.upload(kb);
  ds.upload(slots);
  dn.upload(std::vector<int32_t>{int32_t(n) + kSub});
  PagedDotParams dp{.q = dq.p, .k_pool = dk.p, .slots = ds.as<int32_t>(), .scores = dsc.as<float>(), .n_slot = n,
                    .n_head = H, .n_kv_head = Hkv, .head_dim = D};
  paged_dot(dp);
  const auto want_scores = dsc.download<float>(size_t(H * n));
  SoftVoteParams vp{.scores = dsc.as<float>(), .vote = dv.as<float>(), .n_head = H, .M = n, .workspace = ws.p};
  soft_vote(vp);
  const auto want_vote = dv.download<float>(size_t(n));
  dsc.poison();
  dv.poison();
  dp.n_slot = bound, dp.n_dev = dn.as<int32_t>(), dp.n_sub = kSub;
  paged_dot(dp);
  EXPECT_TRUE(dsc.download<float>(size_t(H * n)) == want_scores) << "paged_dot with the device count";
  vp.M = bound, vp.m_dev = dn.as<int32_t>(), vp.m_sub = kSub;
  soft_vote(vp);
  EXPECT_TRUE(dv.download<float>(size_t(n)) == want_vote) << "soft_vote with the device count";
  // A hit: both return at once (the buffers keep a marker).
  dskip.upload(std::vector<int32_t>{1});
  const std::vector<float> marker_s(size_t(H * bound), 3.f), marker_v(size_t(bound), 5.f);
  dsc.upload(marker_s);
  dv.upload(marker_v);
  dp.skip = vp.skip = dskip.as<int32_t>();
  paged_dot(dp);
  soft_vote(vp);
  EXPECT_TRUE(dsc.download<float>(marker_s.size()) == marker_s) << "paged_dot ran on a set skip flag";
  EXPECT_TRUE(dv.download<float>(marker_v.size()) == marker_v) << "soft_vote ran on a set skip flag";
}

}  // namespace
}  // namespace longctx::cuda::test

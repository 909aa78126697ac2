// test_hip.cpp: HiP (methods/hip): the hierarchical top-k core, the masks' invariants, the sparse
// prefill and decode against the fp64 oracle with the same mask, GQA, the decode mask cache
// (refresh vs cached steps), estimator recall vs random selection, spec parsing and errors.
// Run: build/tests/sparse/test_sparse --gtest_filter='Hip*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "kernels/ref/hip_topk.h"
#include "methods/hip/hip_mask.h"
#include "methods/hip/hip_method.h"
#include "methods/method.h"
#include "methods/run_cpu.h"
#include "test_util.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {
namespace {

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

MethodContext ctx(int n_layer = 4) {
  return {.n_layer = n_layer, .n_head = 4, .n_kv_head = 2, .head_dim = 32, .model_name = "tiny-test"};
}

// Small budgets so that short problems prune: k=64 (32 blocks of 2), window 64, 8 sinks.
HipParams small_params() {
  HipParams hp;
  hp.topk.k = 64;
  hp.window = 64;
  hp.sinks = 8;
  hp.refresh = 4;
  hp.dense_layers = 0;
  return hp;
}

const char* kSmallSpec = "hip=k=64,window=64,sinks=8,refresh=4,dense_layers=0";

// Keys with locality (an AR(1) walk along positions, as attention keys have): HiP's premise.
void make_local_keys(test::Problem& pr, float rho, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t row = int64_t(pr.p.n_kv_head) * pr.p.head_dim;
  for (int64_t j = 0; j < pr.p.n_kv; ++j)
    for (int64_t e = 0; e < row; ++e) {
      const float prev = j ? pr.k[size_t((j - 1) * row + e)] : nd(rng);
      pr.k[size_t(j * row + e)] = rho * prev + std::sqrt(1 - rho * rho) * nd(rng);
    }
}

TEST(HipTopk, OneIterationIsTheExactTopBlocks) {
  // N = 2M blocks: every chunk is 2 blocks, one split, each branch is one block, so the result
  // is the exact top M blocks by max over (sampled query, key) score.
  const int d = 32, n_qs = 4, M = 16, b_k = 2, N = 2 * M;
  const auto q = test::randn(size_t(n_qs * d), 11), k = test::randn(size_t(N * b_k * d), 12);
  std::vector<int64_t> pos(n_qs, N * b_k + 100);
  HipTopkParams tp;
  tp.k = M * b_k;
  tp.b_k = b_k;
  const HipSearch s{.q = q.data(), .q_stride = d, .q_pos = pos.data(), .n_qs = n_qs, .k = k.data(), .k_stride = d,
                    .head_dim = d, .block_begin = 0, .block_end = N, .key_end = N * b_k};
  std::vector<int32_t> got;
  hip_topk_blocks(tp, s, got);
  // Representative of a one-block branch is the block; its score is the max over its 2 keys.
  std::vector<std::pair<double, int>> sc;
  for (int b = 0; b < N; ++b) {
    double best = -1e300;
    for (int t = 0; t < b_k; ++t)
      for (int i = 0; i < n_qs; ++i) {
        double dot = 0;
        for (int e = 0; e < d; ++e) dot += double(q[size_t(i * d + e)]) * double(k[size_t((b * b_k + t) * d + e)]);
        best = std::max(best, dot);
      }
    sc.push_back({-best, b});
  }
  std::sort(sc.begin(), sc.end());
  std::vector<int32_t> want;
  for (int i = 0; i < M; ++i) want.push_back(sc[size_t(i)].second);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
}

// The authors' code (hip-attention attention2_draft_prefetch.py, sample_method 'center', branch
// method 'half') scores a branch (a, g) by its middle block a + floor(g/2); the paper's text and
// the authors' code agree here (unlike InfiniteHiP's SelectRep). Ties keep the earlier branch
// (ours: a total order the GPU twin follows; the authors' bitonic argsort has no fixed tie rule).
TEST(HipTopk, BranchesAreScoredByTheirMiddleBlockAndTiesKeepTheEarlier) {
  // N = 8 blocks of 2 keys, M = 2: chunks [0,4) and [4,8); iteration 1 scores the branches
  // (0,2) (2,2) (4,2) (6,2) by blocks 1 3 5 7, iteration 2 scores single blocks.
  const int d = 8, N = 8, b_k = 2;
  HipTopkParams tp;
  tp.k = 2 * b_k;
  tp.b_k = b_k;
  const std::vector<float> q = {1, 0, 0, 0, 0, 0, 0, 0};
  const int64_t pos = 1000;
  auto search = [&](const std::vector<float>& block_score, std::vector<float>& k) {
    k.assign(size_t(N * b_k * d), 0.25f);  // other coordinates: any value (q ignores them)
    for (int b = 0; b < N; ++b)
      for (int t = 0; t < b_k; ++t) k[size_t((b * b_k + t) * d)] = block_score[size_t(b)];
    return HipSearch{.q = q.data(), .q_stride = d, .q_pos = &pos, .n_qs = 1, .k = k.data(), .k_stride = d,
                     .head_dim = d, .block_begin = 0, .block_end = N, .key_end = N * b_k};
  };
  std::vector<float> k;
  std::vector<int32_t> got;
  // Middle blocks 3 and 5 lead; a first-block rule would keep the branches of blocks 0 and 6.
  hip_topk_blocks(tp, search({7, 1, 0, 8, 0, 9, 7, 1}, k), got);
  EXPECT_EQ(got, (std::vector<int32_t>{3, 5}));
  // All equal: every step keeps the earliest branches.
  hip_topk_blocks(tp, search({2, 2, 2, 2, 2, 2, 2, 2}, k), got);
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1}));
}

TEST(HipTopk, DotOrderAndSampling) {
  const auto a = test::randn(128, 1), b = test::randn(128, 2);
  double ref = 0;
  for (int e = 0; e < 128; ++e) ref += double(a[size_t(e)]) * double(b[size_t(e)]);
  EXPECT_NEAR(hip_dot(a.data(), b.data(), 128), ref, 1e-4);
  EXPECT_NEAR(hip_dot(a.data(), b.data(), 20), [&] {
    double r = 0;
    for (int e = 0; e < 20; ++e) r += double(a[size_t(e)]) * double(b[size_t(e)]);
    return r;
  }(), 1e-5);
  EXPECT_EQ(hip_sample_rows(64, 2).size(), 32u);
  EXPECT_EQ(hip_sample_rows(64, 2).front(), 1);
  EXPECT_EQ(hip_sample_rows(64, 2).back(), 63);
  EXPECT_EQ(hip_sample_rows(1, 2), std::vector<int>{0});  // one decode query samples itself
  EXPECT_EQ(hip_sample_rows(5, 2), (std::vector<int>{1, 3, 4}));
}

TEST(HipMask, InvariantsCountSortedUniqueInsideTheRegion) {
  const HipParams hp = small_params();
  auto pr = test::make_problem(200, 2900, 4, 2, 32, 7);  // ragged: 200 rows = 3 full blocks + 8
  const HipMask m = hip_estimate(hp, pr.p, pool());
  ASSERT_EQ(m.n_qblk, 4);
  const int64_t M = hp.topk.budget_blocks();
  for (int h = 0; h < 4; ++h)
    for (int64_t b = 0; b < m.n_qblk; ++b) {
      const HipRegion r = hip_region(hp, pr.p.q_pos0 + b * 64);
      const int64_t e = h * m.n_qblk + b;
      std::vector<int32_t> sel(m.blocks.begin() + m.ptr[size_t(e)], m.blocks.begin() + m.ptr[size_t(e + 1)]);
      EXPECT_EQ(int64_t(sel.size()), std::min(M, r.block_end - r.block_begin));
      EXPECT_TRUE(std::is_sorted(sel.begin(), sel.end()));
      EXPECT_EQ(std::set<int32_t>(sel.begin(), sel.end()).size(), sel.size());
      EXPECT_GE(sel.front(), r.block_begin);
      EXPECT_LT(sel.back(), r.block_end);
      EXPECT_EQ(r.key_end, pr.p.q_pos0 + b * 64 - hp.window + 1);
    }
  // The shared index: sorted ranges, sinks first, window last.
  const SparseIndex idx = hip_sparse_index(hp, m, pr.p);
  validate_sparse_index(idx, pr.p.n_q, pr.p.n_kv, 4);
  for (const HeadIndex& hi : idx.heads)
    for (int64_t b = 0; b < hi.n_blocks(); ++b) {
      const auto rs = hi.block_ranges(b);
      EXPECT_EQ(rs.front().start, 0);
      EXPECT_GE(rs.front().end, hp.sinks);  // the sinks (with an adjacent selected block merged in)
      EXPECT_EQ(rs.back().end, std::min<int64_t>(pr.p.q_pos0 + (b + 1) * 64, pr.p.n_kv));
    }
}

TEST(HipMask, ShortContextIsExactlyDense) {
  HipParams hp = small_params();
  // T <= k + window (+ sinks): the region holds at most k/b_k blocks: every key is attended.
  auto pr = test::make_problem(100, 36, 4, 2, 32, 3);  // n_kv = 136 = k + window + sinks
  const SparseIndex idx = hip_sparse_index(hp, hip_estimate(hp, pr.p, pool()), pr.p);
  const auto mask = test::index_mask(idx, 4);
  for (int h = 0; h < 4; ++h)
    for (int64_t i = 0; i < pr.p.n_q; ++i)
      for (int64_t j = 0; j <= pr.p.q_pos0 + i; ++j) ASSERT_TRUE(mask(h, i, j)) << h << " " << i << " " << j;
  // And the method routes such steps dense (the model's dense kernel: identical to dense).
  const auto m = make_attention_method(kSmallSpec, ctx());
  EXPECT_EQ(m->route({.layer = 1, .phase = Phase::prefill, .n_q = 100, .q_pos0 = 36, .n_kv = 136}), Route::dense);
  EXPECT_EQ(m->route({.layer = 1, .phase = Phase::prefill, .n_q = 100, .q_pos0 = 37, .n_kv = 137}), Route::sparse);
  const auto def = make_attention_method("hip", ctx());
  EXPECT_EQ(def->route({.layer = 2, .phase = Phase::decode, .n_q = 1, .q_pos0 = 9999, .n_kv = 10000}), Route::dense);
  EXPECT_EQ(def->route({.layer = 3, .phase = Phase::decode, .n_q = 1, .q_pos0 = 784, .n_kv = 785}), Route::sparse);
  EXPECT_EQ(def->route({.layer = 3, .phase = Phase::decode, .n_q = 1, .q_pos0 = 783, .n_kv = 784}), Route::dense);
}

TEST(HipMethod, PrefillMatchesOracleWithItsMask) {
  const auto m = make_attention_method(kSmallSpec, ctx());
  auto st = m->start_sequence();
  for (const auto& [n_q, pos0] : {std::pair<int64_t, int64_t>{300, 0}, {131, 1500}, {64, 4000}}) {
    auto pr = test::make_problem(n_q, pos0, 4, 2, 32, uint64_t(n_q + pos0));
    pr.p.layer = 1;
    const SparseIndex idx = m->build_index(pr.p, Phase::prefill, *st, pool());
    attend_cpu({.method = *m, .state = *st, .phase = Phase::prefill}, pr.p, pool());
    const auto e = test::compare(pr.o, pr.lse, test::oracle_attention(pr.p, test::index_mask(idx, 4)));
    EXPECT_LT(e.o, test::kTolO) << n_q << "@" << pos0;
    EXPECT_LT(e.lse, test::kTolLse) << n_q << "@" << pos0;
    if (pos0 >= 1500) {  // really sparse: far fewer keys than dense
      EXPECT_LT(index_kernel_pairs(idx, n_q, pos0, pr.p.n_kv, 4), dense_causal_pairs(n_q, pos0, 4) / 4);
    }
  }
}

TEST(HipMethod, GqaMasksArePerQueryHeadOverTheSharedKvHead) {
  const HipParams hp = small_params();
  auto pr = test::make_problem(64, 2000, 4, 2, 32, 21);
  const HipMask m = hip_estimate(hp, pr.p, pool());
  // Head 3 alone (its queries, KV head 1 alone) gives the same blocks.
  for (int h = 0; h < 4; ++h) {
    auto one = test::make_problem(64, 2000, 1, 1, 32, 21);
    for (int64_t i = 0; i < 64; ++i) std::copy_n(&pr.q[size_t((i * 4 + h) * 32)], 32, &one.q[size_t(i * 32)]);
    for (int64_t j = 0; j < pr.p.n_kv; ++j) std::copy_n(&pr.k[size_t((j * 2 + h / 2) * 32)], 32, &one.k[size_t(j * 32)]);
    const HipMask m1 = hip_estimate(hp, one.p, pool());
    EXPECT_TRUE(std::equal(m1.blocks.begin(), m1.blocks.end(), m.blocks.begin() + m.ptr[size_t(h)])) << h;
  }
  // Heads 0 and 1 share KV head 0 but pick their own blocks.
  EXPECT_FALSE(std::equal(m.blocks.begin() + m.ptr[0], m.blocks.begin() + m.ptr[1], m.blocks.begin() + m.ptr[1]));
}

TEST(HipMethod, DecodeRefreshesEveryRSteps) {
  const auto m = make_attention_method(kSmallSpec, ctx());
  auto st = m->start_sequence();
  auto& hs = static_cast<HipState&>(*st);
  const int64_t T0 = 1200, steps = 10;
  auto full = test::make_problem(1, T0 + steps - 1, 4, 2, 32, 5);  // keys of every step
  SparseIndex first;
  for (int64_t t = 0; t < steps; ++t) {
    AttnParams p = full.p;
    p.q_pos0 = T0 + t - 1;
    p.n_kv = T0 + t;
    p.layer = 2;
    auto q = test::randn(4 * 32, uint64_t(100 + t));
    p.q = q.data();
    const int64_t before = hs.estimates;
    const SparseIndex idx = m->build_index(p, Phase::decode, *st, pool());
    const bool refreshed = hs.estimates > before;
    EXPECT_EQ(refreshed, t % 4 == 0) << t;
    validate_sparse_index(idx, 1, p.n_kv, 4);
    if (t % 4 == 0) first = idx;
    for (int h = 0; h < 4; ++h) {  // cached steps: the refresh's blocks, the window grown to the end
      const auto a = first.heads[size_t(h)].block_ranges(0), b = idx.heads[size_t(h)].block_ranges(0);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i + 1 < a.size(); ++i) EXPECT_TRUE(a[i].start == b[i].start && a[i].end == b[i].end);
      EXPECT_EQ(a.back().start, b.back().start);
      EXPECT_EQ(b.back().end, p.n_kv);
    }
    // The step's output equals the oracle over exactly that index.
    std::vector<float> o(4 * 32), lse(4);
    p.o = o.data();
    p.lse = lse.data();
    attend_cpu({.method = *m, .state = *st, .phase = Phase::decode}, p, pool());
    const auto e = test::compare(o, lse, test::oracle_attention(p, test::index_mask(idx, 4)));
    EXPECT_LT(e.o, test::kTolO) << t;
    EXPECT_LT(e.lse, test::kTolLse) << t;
  }
  EXPECT_EQ(hs.estimates, 3);  // steps 0, 4, 8 (attend_cpu's second build of a step reuses it)
  // A new request (the position goes back) re-estimates at once.
  AttnParams p = full.p;
  p.q_pos0 = T0 - 1;
  p.n_kv = T0;
  p.layer = 2;
  m->build_index(p, Phase::decode, *st, pool());
  EXPECT_EQ(hs.estimates, 4);
}

TEST(HipMethod, EstimatorRecallBeatsRandomSelection) {
  // One decode query against keys with locality; recall of the true top-M blocks (by the block's
  // best key score) for HiP vs the expected recall of a random choice of M blocks.
  HipParams hp = small_params();
  hp.topk.k = 128;  // M = 64 blocks of 2
  const int64_t T = 8192;
  double hip_recall = 0, random_recall = 0;
  const int trials = 8;
  for (int tr = 0; tr < trials; ++tr) {
    auto pr = test::make_problem(1, T - 1, 1, 1, 64, uint64_t(40 + tr));
    make_local_keys(pr, 0.98f, uint64_t(77 + tr));
    const HipMask m = hip_estimate(hp, pr.p, pool());
    const HipRegion r = hip_region(hp, T - 1);
    std::vector<std::pair<float, int32_t>> sc;
    for (int64_t b = r.block_begin; b < r.block_end; ++b) {
      float best = -1e30f;
      for (int t = 0; t < 2; ++t)
        if (b * 2 + t < r.key_end) best = std::max(best, hip_dot(pr.q.data(), &pr.k[size_t((b * 2 + t) * 64)], 64));
      sc.push_back({-best, int32_t(b)});
    }
    std::sort(sc.begin(), sc.end());
    const size_t M = size_t(hp.topk.budget_blocks());
    std::set<int32_t> truth;
    for (size_t i = 0; i < M; ++i) truth.insert(sc[i].second);
    int hit = 0;
    for (const int32_t b : m.blocks) hit += truth.count(b) ? 1 : 0;
    hip_recall += double(hit) / double(M);
    random_recall += double(M) / double(sc.size());
  }
  hip_recall /= trials;
  random_recall /= trials;
  std::printf("HiP top-%lld block recall %.3f vs random %.3f (T=%lld, locality rho=0.98)\n",
              (long long)hp.topk.k, hip_recall, random_recall, (long long)T);
  RecordProperty("hip_recall", std::to_string(hip_recall));
  RecordProperty("random_recall", std::to_string(random_recall));
  EXPECT_GT(hip_recall, 3 * random_recall);
}

TEST(HipMethod, SpecsAndErrors) {
  const auto def = make_attention_method("hip", ctx());
  EXPECT_EQ(def->name(), "hip=k=512,b_q=64,b_sq=2,b_k=2,b_sk=1,window=256,sinks=16,refresh=8,dense_layers=3");
  EXPECT_EQ(make_attention_method(def->name(), ctx())->name(), def->name());
  EXPECT_EQ(make_attention_method("hip=k=1024,b_k=4", ctx())->name(),
            "hip=k=1024,b_q=64,b_sq=2,b_k=4,b_sk=1,window=256,sinks=16,refresh=8,dense_layers=3");
  const auto composed = make_attention_method("prefill:a_shape;decode:hip=refresh=4", ctx());
  EXPECT_EQ(composed->name(),
            "prefill:a_shape=1024,4096;decode:hip=k=512,b_q=64,b_sq=2,b_k=2,b_sk=1,window=256,sinks=16,refresh=4,dense_layers=3");
  EXPECT_EQ(composed->route({.layer = 3, .phase = Phase::decode, .n_q = 1, .q_pos0 = 5000, .n_kv = 5001}), Route::sparse);
  auto err = [](const std::string& spec) {
    try {
      make_attention_method(spec, ctx());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err("hip=q=3").find("unknown key 'q'"), std::string::npos);
  EXPECT_NE(err("hip=k").find("expected KEY=VALUE"), std::string::npos);
  EXPECT_NE(err("hip=refresh=300").find("refresh=300 must be in [1, window=256]"), std::string::npos);
  EXPECT_NE(err("hip=b_q=32").find("b_q must be 64"), std::string::npos);
  EXPECT_NE(err("hip=b_k=3").find("b_k=3 must divide k=512"), std::string::npos);
  EXPECT_NE(err("hip=b_sk=2,b_k=1").find("b_sk=2 must divide b_k=1"), std::string::npos);
  EXPECT_NE(err("hip=k=-1").find("non-negative"), std::string::npos);
  EXPECT_NE(err("hip=dense_layers=9").find("exceeds the model's 4 layers"), std::string::npos);
}

}  // namespace
}  // namespace longctx

// test_tokenselect.cpp: TokenSelect (methods/tokenselect) against brute-force and fp64 oracles:
// the vote top-k (soft, hard, naive; edge cases M = k, k > M, n_kv = budget +- 1), the paged dot
// product, compacted-position attention over pre-RoPE keys vs explicitly gathered and re-rotated
// K/V, rotated-key selection through the sparse mainloop (chunked prefill, causal safety), the
// decode selection cache (theta > 1 == no cache), the fp8-scoring audit (keys rounded through
// e4m3 with one scale, the overlap bookkeeping), and the spec (options, errors, composition).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/ref/attention.h"
#include "kernels/ref/fp8_e4m3.h"
#include "kernels/ref/ops.h"
#include "kernels/ref/paged_dot.h"
#include "kernels/ref/soft_vote.h"
#include "methods/method.h"
#include "methods/run_cpu.h"
#include "methods/tokenselect/tokenselect_method.h"
#include "test_util.h"
#include "util/error.h"
#include "util/half.h"
#include "util/thread_pool.h"
#include "../common/error_of.h"

namespace longctx {
namespace {

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

using test_common::error_of;

MethodContext ctx() { return {.n_layer = 2, .n_head = 4, .n_kv_head = 2, .head_dim = 32, .model_name = "tiny-test"}; }

const TokenSelectMethod& ts(const AttentionMethod& m) { return dynamic_cast<const TokenSelectMethod&>(m); }

// fp64 brute force: the indices of the k largest votes (ties: smaller index), ascending; and
// the gap between the k-th and (k+1)-th vote (how far the case is from a tie).
struct Brute {
  std::vector<int32_t> top;
  double gap = 1e300;
};
Brute brute_top_k(const std::vector<double>& vote, int64_t k) {
  std::vector<int32_t> order(vote.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return vote[size_t(a)] > vote[size_t(b)]; });
  Brute b;
  const size_t kk = size_t(std::min<int64_t>(k, int64_t(vote.size())));
  b.top.assign(order.begin(), order.begin() + kk);
  std::sort(b.top.begin(), b.top.end());
  if (kk > 0 && kk < order.size()) b.gap = vote[size_t(order[kk - 1])] - vote[size_t(order[kk])];
  return b;
}

std::vector<double> brute_vote(const std::vector<float>& s, int H, int64_t M, int64_t k, VoteMode mode) {
  std::vector<double> vote(size_t(M), 0.0);
  for (int h = 0; h < H; ++h) {
    const float* row = s.data() + int64_t(h) * M;
    if (mode == VoteMode::soft) {
      const double mx = *std::max_element(row, row + M);
      double z = 0;
      for (int64_t j = 0; j < M; ++j) z += std::exp(double(row[j]) - mx);
      for (int64_t j = 0; j < M; ++j) vote[size_t(j)] += std::exp(double(row[j]) - mx) / z;
    } else if (mode == VoteMode::naive) {
      for (int64_t j = 0; j < M; ++j) vote[size_t(j)] += row[j];
    } else {
      std::vector<double> r(row, row + M);
      for (int32_t j : brute_top_k(r, k).top) vote[size_t(j)] += 1;
    }
  }
  return vote;
}

TEST(TokenSelectVote, TopKEqualsBruteForce) {
  int checked = 0;
  for (VoteMode mode : {VoteMode::soft, VoteMode::naive, VoteMode::hard})
    for (auto [H, M, k] : std::vector<std::tuple<int, int64_t, int64_t>>{
             {8, 1000, 37}, {4, 300, 300}, {4, 200, 500}, {32, 5000, 700}, {1, 65, 1}, {7, 129, 64}}) {
      const auto s = test::randn(size_t(H * M), uint64_t(H * 131 + M * 7 + k), 3.f);
      const std::vector<int32_t> got = vote_top_k(s.data(), H, M, k, mode, pool());
      const Brute want = brute_top_k(brute_vote(s, H, M, k, mode), k);
      // Ties excluded: a near-tie at the k-th place may fall either way in fp32 (hard votes are
      // integers: ties are resolved by the smaller index on both sides).
      if (mode != VoteMode::hard && want.gap < 1e-5) continue;
      EXPECT_EQ(got, want.top) << "mode " << int(mode) << " H " << H << " M " << M << " k " << k;
      ++checked;
    }
  EXPECT_GE(checked, 15);
}

TEST(TokenSelectVote, SoftVoteSumsPerHeadSoftmax) {
  const int H = 6;
  const int64_t M = 3000;
  const auto s = test::randn(size_t(H * M), 5, 4.f);
  std::vector<float> vote(static_cast<size_t>(M));
  soft_vote_ref(s.data(), H, M, vote.data(), pool());
  const auto want = brute_vote(s, H, M, 0, VoteMode::soft);
  double sum = 0, err = 0;
  for (int64_t j = 0; j < M; ++j) sum += vote[size_t(j)], err = std::max(err, std::abs(vote[size_t(j)] - want[size_t(j)]));
  EXPECT_LT(err, 1e-6);
  EXPECT_NEAR(sum, H, 1e-3);  // each head's softmax sums to 1
}

TEST(TokenSelectVote, PagedDotGathersBySlot) {
  for (auto [H, Hkv] : std::vector<std::pair<int, int>>{{4, 4}, {8, 2}, {28, 4}, {32, 4}}) {
    const int D = 64;
    const int64_t rows = 700, n = 333;
    const auto q = test::randn(size_t(H * D), 1), k = test::randn(size_t(rows * Hkv * D), 2);
    std::vector<int32_t> slots(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) slots[size_t(j)] = int32_t((j * 389 + 11) % rows);  // scattered
    std::vector<float> sc(size_t(H * n));
    paged_dot_ref({.q = q.data(), .k = k.data(), .slots = slots.data(), .scores = sc.data(), .n_slot = n, .n_head = H,
                   .n_kv_head = Hkv, .head_dim = D},
                  pool());
    double err = 0;
    for (int h = 0; h < H; ++h)
      for (int64_t j = 0; j < n; ++j) {
        double d = 0;
        for (int t = 0; t < D; ++t) d += double(q[size_t(h * D + t)]) * k[size_t((slots[size_t(j)] * Hkv + h / (H / Hkv)) * D + t)];
        err = std::max(err, std::abs(d - sc[size_t(h * n + j)]));
      }
    EXPECT_LT(err, 1e-4) << H << "/" << Hkv;
  }
}

// The budget layout and its edges: n_kv = budget - 1, budget (dense), budget + 1 (one candidate
// dropped), and the selection stays within the candidates.
TEST(TokenSelectSelect, BudgetEdgesAndCandidates) {
  TokenSelectParams t{.n_init = 16, .k = 40, .n_local = 64, .chunk = 64};
  const int B = int(t.budget());
  for (int n_kv : {B - 1, B}) {
    const auto keys = budget_keys(t, n_kv, {});
    ASSERT_EQ(int(keys.size()), n_kv);
    EXPECT_EQ(keys.back(), n_kv - 1);
  }
  for (int n_kv : {B + 1, B + 2, 5 * B}) {
    const int H = 4, Hkv = 2, D = 16;
    const auto q = test::randn(size_t(H * D), uint64_t(n_kv)), k = test::randn(size_t(n_kv * Hkv * D), uint64_t(n_kv + 1));
    const auto sel = select_tokens(t, {q.data(), k.data(), n_kv, H, Hkv, D}, pool());
    ASSERT_EQ(int64_t(sel.size()), t.k);
    EXPECT_TRUE(std::is_sorted(sel.begin(), sel.end()));
    EXPECT_GE(sel.front(), t.n_init);
    EXPECT_LT(sel.back(), n_kv - t.n_local);
    // Against brute force over the candidates' raw scores.
    const int64_t M = n_kv - t.n_init - t.n_local;
    std::vector<float> s(size_t(H * M));
    for (int h = 0; h < H; ++h)
      for (int64_t j = 0; j < M; ++j) {
        double d = 0;
        for (int e = 0; e < D; ++e) d += double(q[size_t(h * D + e)]) * k[size_t(((t.n_init + j) * Hkv + h / 2) * D + e)];
        s[size_t(h * M + j)] = float(d);
      }
    Brute want = brute_top_k(brute_vote(s, H, M, t.k, VoteMode::soft), t.k);
    for (int32_t& j : want.top) j += int32_t(t.n_init);
    if (want.gap > 1e-5) {
      EXPECT_EQ(sel, want.top) << n_kv;
    }
    const auto keys = budget_keys(t, n_kv, sel);
    EXPECT_EQ(int64_t(keys.size()), t.budget());
    EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
    EXPECT_EQ(keys.back(), n_kv - 1);
  }
}

TEST(TokenSelectPreRope, CompactedAttentionEqualsGatheredReRotatedOracle) {
  const int H = 8, Hkv = 2, D = 32;
  const auto inv = test::inv_freq_of(D, 10000.0);
  const LayerRope rope{inv.data(), 1.f};
  auto pr = test::make_problem(100, 900, H, Hkv, D, 3);  // 100 queries at 900.. over 1000 keys
  // A scattered set: 0..9, every 7th key of 10..899, then the chunk's own 100 rows.
  KeySegment s{0, 100, {}};
  for (int j = 0; j < 10; ++j) s.keys.push_back(j);
  for (int j = 10; j < 900; j += 7) s.keys.push_back(j);
  for (int j = 900; j < 1000; ++j) s.keys.push_back(j);
  attend_compacted_ref(pr.p, {&s, 1}, rope, pool());
  const auto want = test::compacted_oracle(pr.p, s, inv);
  double err = 0;
  for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(want[i] - pr.o[i]));
  EXPECT_LT(err, 2e-5);
  // A set that does not end with the chunk's rows is refused.
  s.keys.erase(s.keys.end() - 1);
  EXPECT_NE(error_of([&] { attend_compacted_ref(pr.p, {&s, 1}, rope, pool()); }), "");
}

// The method on pre-RoPE keys: chunked prefill (3 sub-chunks of 64 rows) matches the oracle over
// the sets it selected, and a step that fits the budget equals dense attention on keys rotated at
// their own positions.
TEST(TokenSelectPreRope, MethodPrefillMatchesOracleAndDenseBelowBudget) {
  const int H = 4, Hkv = 2, D = 32;
  const auto inv = test::inv_freq_of(D, 10000.0);
  const LayerRope rope{inv.data(), 1.f};
  const auto m = make_tokenselect_method("n_init=8,k=32,n_local=64,chunk=64", ctx());
  auto st = m->start_sequence();
  auto pr = test::make_problem(150, 500, H, Hkv, D, 4);
  pr.p.layer = 0;
  const auto segs = m->select_keys(pr.p, Phase::prefill, rope, *st, pool());
  ASSERT_EQ(segs.size(), 3u);
  attend_cpu({.method = *m, .state = *st, .phase = Phase::prefill, .rope = &rope}, pr.p, pool());
  double err = 0;
  for (const KeySegment& s : segs) {
    EXPECT_EQ(int64_t(s.keys.size()), ts(*m).params().budget());
    const auto want = test::compacted_oracle(pr.p, s, inv);
    for (size_t i = 0; i < want.size(); ++i)
      err = std::max(err, std::abs(want[i] - pr.o[size_t(s.q_begin * H * D) + i]));
  }
  EXPECT_LT(err, 2e-5);

  // Fits the budget: exact dense attention at natural positions.
  auto small = test::make_problem(40, 60, H, Hkv, D, 5);  // 100 keys <= 104
  attend_cpu({.method = *m, .state = *st, .phase = Phase::prefill, .rope = &rope}, small.p, pool());
  std::vector<float> q = small.q, k = small.k, o(small.o.size());
  AttnParams pd = small.p;
  rope_apply_ref(q.data(), 40, H, D, 60, inv.data(), pool(), 1.f);
  rope_apply_ref(k.data(), 100, Hkv, D, 0, inv.data(), pool(), 1.f);
  pd.q = q.data(), pd.k = k.data(), pd.o = o.data(), pd.lse = nullptr;
  attention_dense_ref(pd, pool());
  double e2 = 0;
  for (size_t i = 0; i < o.size(); ++i) e2 = std::max(e2, double(std::abs(o[i] - small.o[i])));
  EXPECT_LT(e2, 1e-5);
}

// fp8_roundtrip: one scale (amax / 448), every value the e4m3 neighbour of x / scale times scale
// (relative error <= 2^-4 for normal codes), the largest magnitude kept; the method's fp8 audit
// selects over exactly those keys and averages |fp8 ∩ exact| / |exact| per prefill sub-chunk.
TEST(TokenSelectFp8Audit, RoundtripAndOverlapBookkeeping) {
  const auto x = test::randn(4096, 77, 3.f);
  float amax = 0.f;
  for (float v : x) amax = std::max(amax, std::abs(v));
  const auto y = fp8_roundtrip(x.data(), int64_t(x.size()));
  const float scale = amax / 448.f;
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(y[i], e4m3_to_f32(f32_to_e4m3(x[i] / scale)) * scale) << i;
    if (std::abs(x[i]) / scale >= 0x1p-6f) {
      EXPECT_LE(std::abs(y[i] - x[i]), 0x1p-4 * std::abs(x[i]) * (1 + 1e-6)) << i;
    }
  }
  EXPECT_NEAR(*std::max_element(y.begin(), y.end(), [](float a, float b) { return std::abs(a) < std::abs(b); }),
              x[size_t(std::max_element(x.begin(), x.end(), [](float a, float b) { return std::abs(a) < std::abs(b); }) -
                       x.begin())],
              1e-6 * amax);

  const int H = 4, Hkv = 2, D = 32;
  const auto inv = test::inv_freq_of(D, 10000.0);
  const LayerRope rope{inv.data(), 1.f};
  const auto m = make_tokenselect_method("n_init=8,k=32,n_local=64,chunk=64", ctx());
  auto st = m->start_sequence();
  auto& s = static_cast<TokenSelectMethod::State&>(*st);
  s.audit_fp8 = true;
  auto pr = test::make_problem(150, 500, H, Hkv, D, 4);
  pr.p.layer = 0;
  const auto segs = m->select_keys(pr.p, Phase::prefill, rope, *st, pool());
  ASSERT_EQ(segs.size(), 3u);
  EXPECT_EQ(s.fp8_selections[0], 3);
  EXPECT_EQ(s.fp8_selections[1], 0);
  // The same overlaps recomputed: each sub-chunk's exact selection vs the one over rounded keys.
  const TokenSelectParams& t = ts(*m).params();
  double want = 0;
  for (const KeySegment& g : segs) {
    const int64_t n_kv = pr.p.q_pos0 + g.q_end, Q = int64_t(H) * D, C = g.q_end - g.q_begin;
    std::vector<float> rows(pr.p.q + g.q_begin * Q, pr.p.q + g.q_end * Q), qs(size_t(Q), 0.f);
    rope_apply_ref(rows.data(), C, H, D, t.n_local, inv.data(), pool(), 1.f);
    for (int64_t i = 0; i < C; ++i)
      for (int64_t e = 0; e < Q; ++e) qs[size_t(e)] += rows[size_t(i * Q + e)];
    for (float& v : qs) v /= float(C);
    const std::vector<int32_t> exact(g.keys.begin() + t.n_init, g.keys.end() - t.n_local);
    const auto k8 = fp8_roundtrip(pr.p.k, n_kv * Hkv * D);
    const auto sel8 = select_tokens(t, {qs.data(), k8.data(), n_kv, H, Hkv, D}, pool());
    std::vector<int32_t> common;
    std::set_intersection(sel8.begin(), sel8.end(), exact.begin(), exact.end(), std::back_inserter(common));
    want += double(common.size()) / double(exact.size());
  }
  EXPECT_NEAR(s.fp8_overlap_sum[0], want, 1e-12);
  EXPECT_GT(s.fp8_overlap_sum[0] / 3, 0.5);  // e4m3 keeps most of a selection of random keys
}

// fp16 scores (SelectInput::scores_f16, the GPU step's cuda::ScoreElem::f16): the selection equals
// the vote over the scores rounded to fp16 by util/half.h, huge scores are clamped to +-65504 (no
// inf in the vote), and the method's f16 audit counts and averages |f16 ∩ fp32| / |fp32|.
TEST(TokenSelectF16Scores, SelectionVotesOverRoundedScoresAndAuditCounts) {
  const int H = 4, Hkv = 2, D = 32;
  const TokenSelectParams t{.n_init = 8, .k = 32, .n_local = 64, .chunk = 64};
  auto pr = test::make_problem(1, 400, H, Hkv, D, 5);
  for (float scale : {1.f, 1e4f}) {  // 1e4: scores past fp16's range
    std::vector<float> q(pr.p.q, pr.p.q + H * D);
    for (float& v : q) v *= scale;
    const SelectInput in{.q = q.data(), .k = pr.p.k, .n_kv = 400, .n_head = H, .n_kv_head = Hkv, .head_dim = D,
                         .scores_f16 = true};
    const int64_t M = 400 - t.n_init - t.n_local;
    std::vector<int32_t> slots(static_cast<size_t>(M));
    std::iota(slots.begin(), slots.end(), int32_t(t.n_init));
    std::vector<float> sc(size_t(H * M));
    paged_dot_ref({.q = q.data(), .k = pr.p.k, .slots = slots.data(), .scores = sc.data(), .n_slot = M, .n_head = H,
                   .n_kv_head = Hkv, .head_dim = D},
                  pool());
    bool clamped = false;
    for (float& x : sc) {
      clamped |= std::abs(x) > 65504.f;
      x = f16_to_f32(f32_to_f16(std::clamp(x, -65504.f, 65504.f)));
    }
    std::vector<int32_t> want = vote_top_k(sc.data(), H, M, t.k, VoteMode::soft, pool());
    for (int32_t& j : want) j += int32_t(t.n_init);
    EXPECT_EQ(select_tokens(t, in, pool()), want) << "scale " << scale;
    EXPECT_EQ(clamped, scale > 1.f) << "the large query must reach past fp16's range";
  }
  const auto inv = test::inv_freq_of(D, 10000.0);
  const auto m = make_tokenselect_method("n_init=8,k=32,n_local=64,chunk=64", ctx());
  auto st = m->start_sequence();
  auto& s = static_cast<TokenSelectMethod::State&>(*st);
  s.audit_f16 = true;
  auto pp = test::make_problem(150, 500, H, Hkv, D, 4);
  pp.p.layer = 0;
  m->select_keys(pp.p, Phase::prefill, LayerRope{inv.data(), 1.f}, *st, pool());
  EXPECT_EQ(s.f16_selections[0], 3);
  EXPECT_EQ(s.fp8_selections[0], 0);  // the fp8 audit stays off
  EXPECT_GT(s.f16_overlap_sum[0] / 3, 0.9);  // one fp16 rounding moves near-ties only
  EXPECT_LE(s.f16_overlap_sum[0], 3.0);
  // scores=f16: the method's own selections are the fp16 ones (the audit finds them all again).
  const auto m16 = make_tokenselect_method("n_init=8,k=32,n_local=64,chunk=64,scores=f16", ctx());
  auto st16 = m16->start_sequence();
  auto& s16 = static_cast<TokenSelectMethod::State&>(*st16);
  s16.audit_f16 = true;
  m16->select_keys(pp.p, Phase::prefill, LayerRope{inv.data(), 1.f}, *st16, pool());
  EXPECT_EQ(s16.f16_selections[0], 3);
  EXPECT_EQ(s16.f16_overlap_sum[0], 3.0);
}

// Rotated keys: the index (initial and local ranges + selected columns, per sub-chunk) run by the
// sparse mainloop equals the fp64 oracle with the mask of the method's own key sets, and no
// query attends a later key.
TEST(TokenSelectRotated, PrefillIndexMatchesOracle) {
  const int H = 4, Hkv = 2, D = 32;
  const auto m = make_tokenselect_method("n_init=8,k=32,n_local=128,chunk=128,keys=rotated", ctx());
  auto st = m->start_sequence();
  auto pr = test::make_problem(300, 400, H, Hkv, D, 6);
  pr.p.layer = 1;
  EXPECT_EQ(m->route(step_of(pr.p, Phase::prefill)), Route::sparse);
  const SparseIndex idx = m->build_index(pr.p, Phase::prefill, *st, pool());
  validate_sparse_index(idx, pr.p.n_q, pr.p.n_kv, H);
  attend_cpu({.method = *m, .state = *st, .phase = Phase::prefill}, pr.p, pool());
  const auto want = test::oracle_attention(pr.p, test::index_mask(idx, H));
  const auto e = test::compare(pr.o, pr.lse, want);
  EXPECT_LT(e.o, 2e-5);
  EXPECT_LT(e.lse, 2e-5);
  // Each sub-chunk's rows see exactly: the initial keys, its selection, its local window.
  const auto sets = m->select_keys(pr.p, Phase::prefill, LayerRope{}, *st, pool());  // rotated: no rope used
  ASSERT_EQ(sets.size(), 3u);
  const auto mask = test::index_mask(idx, H);
  for (const auto& s : sets)
    for (int64_t i = s.q_begin; i < s.q_end; i += 37)
      for (int64_t j = 0; j < pr.p.n_kv; ++j) {
        const bool in = std::binary_search(s.keys.begin(), s.keys.end(), int32_t(j));
        EXPECT_EQ(mask(0, i, j), in) << i << " " << j;
      }
}

// Decode: theta > 1 (never a hit) gives the same outputs as selecting afresh every step; theta
// below every cosine reuses the first selection; hits and misses are counted per request.
TEST(TokenSelectDecode, SelectionCache) {
  const int H = 4, Hkv = 2, D = 32, steps = 6, n0 = 700;
  const auto inv = test::inv_freq_of(D, 10000.0);
  const LayerRope rope{inv.data(), 1.f};
  auto pr = test::make_problem(steps, n0, H, Hkv, D, 7);
  auto run = [&](const std::string& spec, bool fresh_each_step, int64_t* hits) {
    const auto m = make_tokenselect_method(spec, ctx());
    auto st = m->start_sequence();
    std::vector<float> out(pr.o.size());
    for (int s = 0; s < steps; ++s) {
      if (fresh_each_step) st = m->start_sequence();
      AttnParams p = pr.p;
      p.layer = 0, p.n_q = 1, p.q_pos0 = n0 + s, p.n_kv = n0 + s + 1;
      p.q = pr.q.data() + s * H * D, p.o = out.data() + s * H * D, p.lse = nullptr;
      attend_cpu({.method = *m, .state = *st, .phase = Phase::decode, .rope = &rope}, p, pool());
    }
    if (hits) *hits = static_cast<TokenSelectMethod::State&>(*st).hits;
    return out;
  };
  const std::string base = "n_init=8,k=32,n_local=64,chunk=64,theta=";
  int64_t hits = -1;
  const auto no_cache = run(base + "2", false, &hits);
  EXPECT_EQ(hits, 0);
  EXPECT_EQ(no_cache, run(base + "0.9", true, nullptr));  // a fresh state never hits
  const auto always = run(base + "-2", false, &hits);
  EXPECT_EQ(hits, steps - 1);
  EXPECT_NE(always, no_cache);  // reused selections differ from fresh ones (random queries)
}

TEST(TokenSelectSpec, OptionsErrorsAndComposition) {
  const auto m = make_attention_method("tokenselect", ctx());
  EXPECT_EQ(m->name(), "tokenselect=n_init=128,k=2048,n_local=512,chunk=512,theta=0.9,vote=soft,keys=pre_rope");
  EXPECT_EQ(m->needs().keys, KeyLayout::pre_rope);
  EXPECT_EQ(make_attention_method(m->name(), ctx())->name(), m->name());
  const auto r = make_attention_method("tokenselect=k=4096,n_local=4096,vote=hard,keys=rotated,theta=0.5", ctx());
  EXPECT_EQ(r->name(), "tokenselect=n_init=128,k=4096,n_local=4096,chunk=512,theta=0.5,vote=hard,keys=rotated");
  EXPECT_EQ(r->route({.n_q = 1, .n_kv = 8320}), Route::dense);
  EXPECT_EQ(r->route({.n_q = 1, .n_kv = 8321}), Route::sparse);
  EXPECT_NE(error_of([] { make_attention_method("tokenselect=n_local=256", ctx()); }).find("n_local (256) must be >= chunk"),
            std::string::npos);
  EXPECT_NE(error_of([] { make_attention_method("tokenselect=chunk=100", ctx()); }).find("multiple of 64"), std::string::npos);
  EXPECT_NE(error_of([] { make_attention_method("tokenselect=vote=max", ctx()); }).find("vote must be"), std::string::npos);
  const auto f = make_attention_method("tokenselect=scores=f16", ctx());
  EXPECT_EQ(f->name(), m->name() + ",scores=f16");
  EXPECT_TRUE(ts(*f).params().scores_f16);
  EXPECT_EQ(make_attention_method(f->name(), ctx())->name(), f->name());
  EXPECT_EQ(make_attention_method("tokenselect=scores=f32", ctx())->name(), m->name());
  EXPECT_NE(error_of([] { make_attention_method("tokenselect=scores=bf16", ctx()); }).find("scores must be f32 or f16"),
            std::string::npos);
  EXPECT_NE(error_of([] { make_attention_method("tokenselect=size=3", ctx()); }).find("unknown option 'size'"),
            std::string::npos);
  EXPECT_NE(error_of([] { make_attention_method("tokenselect=k", ctx()); }).find("KEY=VAL"), std::string::npos);
  EXPECT_NE(error_of([] { make_attention_method("tokenselect=theta=x", ctx()); }).find("theta"), std::string::npos);
  // Composition: pre-RoPE keys cannot share a cache with a rotated-key sparse method.
  EXPECT_NE(error_of([] { make_attention_method("prefill:a_shape;decode:tokenselect", ctx()); }).find("key layouts"),
            std::string::npos);
  const auto c = make_attention_method("prefill:a_shape=64,256;decode:tokenselect=keys=rotated", ctx());
  EXPECT_EQ(c->needs().keys, KeyLayout::rotated);
  const auto d = make_attention_method("prefill:dense;decode:tokenselect", ctx());
  EXPECT_EQ(d->needs().keys, KeyLayout::pre_rope);
}

}  // namespace
}  // namespace longctx

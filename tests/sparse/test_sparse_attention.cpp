// test_sparse_attention.cpp: the shared sparse mainloop vs the fp64 oracle with the same mask,
// on random and adversarial indices (empty rows, everything selected, duplicates, overlapping
// ranges, partial last block, chunks with q_pos0 > 0, GQA, shared index heads).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "kernels/ref/attention.h"
#include "sparse/sparse_attention.h"
#include "test_util.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {
namespace {

using test::compare;
using test::make_problem;

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

// Random index: per block 0..4 ranges (random, overlapping, some past n_kv) and 0..40 columns
// (duplicates and columns inside ranges included), all sorted as the format requires.
SparseIndex random_index(int64_t n_q, int64_t n_kv, int n_index_head, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  SparseIndex idx;
  idx.n_q = n_q;
  idx.heads.resize(size_t(n_index_head));
  for (auto& hi : idx.heads) {
    for (int64_t b = 0; b < n_query_blocks(n_q); ++b) {
      std::vector<KeyRange> rs;
      for (int64_t r = uni(0, 4); r > 0; --r) {
        const int64_t s = uni(0, n_kv - 1);
        rs.push_back({int32_t(s), int32_t(s + uni(0, 100))});  // may pass n_kv: clipped
      }
      std::sort(rs.begin(), rs.end(), [](auto a, auto b) { return a.start < b.start; });
      std::vector<int32_t> cs;
      for (int64_t c = uni(0, 40); c > 0; --c) cs.push_back(int32_t(uni(0, n_kv - 1)));
      if (!rs.empty() && uni(0, 1)) cs.push_back(rs[0].start);  // column inside a range
      if (!cs.empty()) cs.push_back(cs[0]);                      // duplicate column
      std::sort(cs.begin(), cs.end());
      hi.ranges.insert(hi.ranges.end(), rs.begin(), rs.end());
      hi.cols.insert(hi.cols.end(), cs.begin(), cs.end());
      hi.end_block();
    }
  }
  return idx;
}

struct Shape {
  int64_t n_q, q_pos0;
  int n_head, n_kv_head, d, n_index_head;
};
// Readable test names (the name generator below; gtest's messages print GetParam() this way too).
void PrintTo(const Shape& s, std::ostream* os) {
  *os << "q" << s.n_q << "_pos" << s.q_pos0 << "_h" << s.n_head << "_kvh" << s.n_kv_head << "_d" << s.d << "_idx"
      << s.n_index_head;
}

class RandomIndex : public ::testing::TestWithParam<Shape> {};

TEST_P(RandomIndex, MatchesOracleWithSameMask) {
  const Shape s = GetParam();
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    auto pr = make_problem(s.n_q, s.q_pos0, s.n_head, s.n_kv_head, s.d, seed * 101 + s.n_q);
    const SparseIndex idx = random_index(s.n_q, pr.p.n_kv, s.n_index_head, seed);
    sparse_attention_ref(pr.p, idx, pool());
    const auto ref = test::oracle_attention(pr.p, test::index_mask(idx, s.n_head));
    const auto e = compare(pr.o, pr.lse, ref);
    EXPECT_LT(e.o, test::kTolO) << "seed " << seed;
    EXPECT_LT(e.lse, test::kTolLse) << "seed " << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RandomIndex,
    ::testing::Values(Shape{64, 0, 2, 2, 16, 2},      // one full block
                      Shape{200, 0, 4, 2, 32, 4},     // partial last block, GQA, per query head
                      Shape{130, 77, 4, 1, 32, 1},    // chunk at q_pos0 = 77, MQA, shared index
                      Shape{65, 300, 8, 2, 64, 2},    // 1-row last block, per KV head index
                      Shape{5, 1000, 2, 2, 8, 2},     // tiny chunk deep in the cache
                      Shape{300, 40, 6, 3, 128, 3}),  // head_dim 128
    [](const auto& info) { return ::testing::PrintToString(info.param); });

SparseIndex full_index(int64_t n_q, int64_t n_kv, int n_index_head) {
  SparseIndex idx;
  idx.n_q = n_q;
  idx.heads.resize(size_t(n_index_head));
  for (auto& hi : idx.heads)
    for (int64_t b = 0; b < n_query_blocks(n_q); ++b) {
      hi.ranges.push_back({0, int32_t(n_kv)});
      hi.end_block();
    }
  return idx;
}

TEST(SparseAttention, EverythingSelectedEqualsDense) {
  for (const int64_t q_pos0 : {0, 100}) {
    auto pr = make_problem(333, q_pos0, 4, 2, 64, 7 + q_pos0);
    sparse_attention_ref(pr.p, full_index(pr.p.n_q, pr.p.n_kv, 1), pool());
    std::vector<float> o_dense(pr.o.size()), lse_dense(pr.lse.size());
    AttnParams pd = pr.p;
    pd.o = o_dense.data();
    pd.lse = lse_dense.data();
    attention_dense_ref(pd, pool());
    for (size_t i = 0; i < pr.o.size(); ++i) ASSERT_NEAR(pr.o[i], o_dense[i], 2e-5) << i;
    for (size_t i = 0; i < pr.lse.size(); ++i) ASSERT_NEAR(pr.lse[i], lse_dense[i], 2e-5) << i;
    const auto e = compare(pr.o, pr.lse, test::oracle_attention(pr.p, test::all_keys()));
    EXPECT_LT(e.o, test::kTolO);
    EXPECT_LT(e.lse, test::kTolLse);
  }
}

TEST(SparseAttention, AllAsColumnsEqualsDense) {
  // The gathered path alone (every key a column, several gather tiles).
  auto pr = make_problem(100, 500, 2, 2, 32, 11);
  SparseIndex idx;
  idx.n_q = pr.p.n_q;
  idx.heads.resize(1);
  for (int64_t b = 0; b < n_query_blocks(pr.p.n_q); ++b) {
    for (int32_t j = 0; j < pr.p.n_kv; ++j) idx.heads[0].cols.push_back(j);
    idx.heads[0].end_block();
  }
  sparse_attention_ref(pr.p, idx, pool());
  const auto e = compare(pr.o, pr.lse, test::oracle_attention(pr.p, test::all_keys()));
  EXPECT_LT(e.o, test::kTolO);
  EXPECT_LT(e.lse, test::kTolLse);
}

TEST(SparseAttention, EmptyRowsGiveZeroAndMinusInf) {
  // Block 0: nothing; block 1: only keys after its first rows (rows before them are empty).
  auto pr = make_problem(128, 0, 2, 1, 16, 3);
  SparseIndex idx;
  idx.n_q = 128;
  idx.heads.resize(1);
  idx.heads[0].end_block();
  idx.heads[0].ranges.push_back({100, 128});
  idx.heads[0].cols.push_back(120);  // duplicate of a range key
  idx.heads[0].end_block();
  sparse_attention_ref(pr.p, idx, pool());
  for (int h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 100; ++i) {
      EXPECT_TRUE(std::isinf(pr.lse[size_t(h * 128 + i)]) && pr.lse[size_t(h * 128 + i)] < 0) << h << " " << i;
      for (int t = 0; t < 16; ++t) EXPECT_EQ(pr.o[size_t((i * 2 + h) * 16 + t)], 0.f);
    }
  const auto e = compare(pr.o, pr.lse, test::oracle_attention(pr.p, test::index_mask(idx, 2)));
  EXPECT_LT(e.o, test::kTolO);
  EXPECT_LT(e.lse, test::kTolLse);
}

TEST(SparseAttention, DuplicatesAndOverlapsCountOnce) {
  // The same key set written three ways must give bit-for-bit the same result up to fp order.
  auto pr = make_problem(64, 200, 1, 1, 32, 5);
  auto run = [&](std::vector<KeyRange> rs, std::vector<int32_t> cs) {
    SparseIndex idx;
    idx.n_q = 64;
    idx.heads.resize(1);
    idx.heads[0].ranges = rs;
    idx.heads[0].cols = cs;
    idx.heads[0].end_block();
    sparse_attention_ref(pr.p, idx, pool());
    return std::pair(pr.o, pr.lse);
  };
  const auto a = run({{0, 10}, {50, 120}}, {30, 31, 32});
  const auto b = run({{0, 5}, {3, 10}, {50, 100}, {60, 120}, {119, 120}}, {3, 30, 30, 31, 32, 32, 60, 119});
  const auto c = run({}, [] {
    std::vector<int32_t> cs;
    for (int32_t j = 0; j < 10; ++j) cs.push_back(j);
    for (int32_t j : {30, 31, 32}) cs.push_back(j);
    for (int32_t j = 50; j < 120; ++j) cs.push_back(j);
    return cs;
  }());
  for (size_t i = 0; i < a.first.size(); ++i) {
    EXPECT_NEAR(a.first[i], b.first[i], 1e-6);
    EXPECT_NEAR(a.first[i], c.first[i], 1e-6);
  }
  for (size_t i = 0; i < a.second.size(); ++i) {
    EXPECT_NEAR(a.second[i], b.second[i], 1e-6);
    EXPECT_NEAR(a.second[i], c.second[i], 1e-6);
  }
}

TEST(SparseAttention, NonCausal) {
  auto pr = make_problem(70, 30, 2, 2, 16, 9);
  pr.p.causal = false;
  const SparseIndex idx = random_index(70, pr.p.n_kv, 2, 4);
  sparse_attention_ref(pr.p, idx, pool());
  const auto e = compare(pr.o, pr.lse, test::oracle_attention(pr.p, test::index_mask(idx, 2)));
  EXPECT_LT(e.o, test::kTolO);
  EXPECT_LT(e.lse, test::kTolLse);
}

TEST(SparseAttention, NoLseBufferIsFine) {
  auto pr = make_problem(64, 0, 1, 1, 16, 2);
  pr.p.lse = nullptr;
  sparse_attention_ref(pr.p, full_index(64, 64, 1), pool());
  EXPECT_FALSE(std::isnan(pr.o[0]));
}

TEST(SparseAttention, RejectsMalformedIndex) {
  auto pr = make_problem(64, 0, 2, 1, 16, 2);
  SparseIndex idx;
  idx.n_q = 64;
  idx.heads.resize(1);
  idx.heads[0].ranges = {{10, 20}, {0, 5}};  // unsorted
  idx.heads[0].end_block();
  EXPECT_THROW(sparse_attention_ref(pr.p, idx, pool()), Error);
  idx.heads[0] = {};
  idx.heads[0].cols = {3, 64};  // column past n_kv
  idx.heads[0].end_block();
  EXPECT_THROW(sparse_attention_ref(pr.p, idx, pool()), Error);
  idx.heads[0] = {};
  idx.heads[0].cols = {5, 3};  // unsorted columns
  idx.heads[0].end_block();
  EXPECT_THROW(sparse_attention_ref(pr.p, idx, pool()), Error);
  idx.heads[0] = {};
  idx.heads[0].end_block();
  idx.heads.resize(3);  // 3 index heads for 2 query heads
  for (auto& hi : idx.heads) hi = idx.heads[0];
  EXPECT_THROW(sparse_attention_ref(pr.p, idx, pool()), Error);
  idx.heads.resize(1);
  idx.heads[0].end_block();  // two blocks for 64 queries
  EXPECT_THROW(sparse_attention_ref(pr.p, idx, pool()), Error);
}

TEST(SparseIndexWork, CountsKernelPairs) {
  // Full index over a 128-token causal prompt: block 0 sees 64 keys, block 1 sees 128.
  SparseIndex idx = full_index(128, 128, 1);
  EXPECT_EQ(index_kernel_pairs(idx, 128, 0, 128, 2), 2 * (64 * 64 + 64 * 128));
  EXPECT_EQ(dense_causal_pairs(128, 0, 2), 2 * (128 * 129 / 2));
}

}  // namespace
}  // namespace longctx

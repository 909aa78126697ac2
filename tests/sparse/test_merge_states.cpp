// test_merge_states.cpp: merging partial results over disjoint key sets is exact: attention over
// A then B, merged, equals attention over A u B; empty sides (LSE = -inf) are neutral.
#include <gtest/gtest.h>

#include "sparse/merge_states.h"
#include "sparse/sparse_attention.h"
#include "test_util.h"
#include "util/thread_pool.h"

namespace longctx {
namespace {

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

// One-head index where block b attends [0, split) (part A) or [split, n_kv) (part B).
SparseIndex split_index(int64_t n_q, int64_t n_kv, int64_t split, bool first) {
  SparseIndex idx;
  idx.n_q = n_q;
  idx.heads.resize(1);
  for (int64_t b = 0; b < n_query_blocks(n_q); ++b) {
    if (first) idx.heads[0].ranges.push_back({0, int32_t(split)});
    else idx.heads[0].ranges.push_back({int32_t(split), int32_t(n_kv)});
    idx.heads[0].end_block();
  }
  return idx;
}

TEST(MergeStates, SplitThenMergeEqualsWhole) {
  auto pr = test::make_problem(150, 60, 4, 2, 32, 21);
  const int64_t split = 97;  // rows before position 97 see nothing in part B: empty side
  std::vector<float> oa(pr.o.size()), la(pr.lse.size()), ob(pr.o.size()), lb(pr.lse.size());
  AttnParams pa = pr.p, pb = pr.p;
  pa.o = oa.data(), pa.lse = la.data(), pb.o = ob.data(), pb.lse = lb.data();
  sparse_attention_ref(pa, split_index(150, pr.p.n_kv, split, true), pool());
  sparse_attention_ref(pb, split_index(150, pr.p.n_kv, split, false), pool());
  MergeStatesParams mp{.o_a = oa.data(), .lse_a = la.data(), .o_b = ob.data(), .lse_b = lb.data(),
                       .o = pr.o.data(), .lse = pr.lse.data(), .n_q = 150, .n_head = 4, .head_dim = 32};
  merge_attention_states(mp, pool());
  const auto e = test::compare(pr.o, pr.lse, test::oracle_attention(pr.p, test::all_keys()));
  EXPECT_LT(e.o, test::kTolO);
  EXPECT_LT(e.lse, test::kTolLse);

  // In place into side A, and in the other order: same result.
  std::vector<float> o2(ob), l2(lb);
  MergeStatesParams mq{.o_a = o2.data(), .lse_a = l2.data(), .o_b = oa.data(), .lse_b = la.data(),
                       .o = o2.data(), .lse = l2.data(), .n_q = 150, .n_head = 4, .head_dim = 32};
  merge_attention_states(mq, pool());
  for (size_t i = 0; i < o2.size(); ++i) ASSERT_NEAR(o2[i], pr.o[i], 1e-6);
  for (size_t i = 0; i < l2.size(); ++i) ASSERT_NEAR(l2[i], pr.lse[i], 1e-6);
}

TEST(MergeStates, BothEmptyStaysEmpty) {
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> oa(8, 1.f), ob(8, 2.f), o(8, 5.f), la(1, ninf), lb(1, ninf), l(1, 0.f);
  MergeStatesParams mp{.o_a = oa.data(), .lse_a = la.data(), .o_b = ob.data(), .lse_b = lb.data(),
                       .o = o.data(), .lse = l.data(), .n_q = 1, .n_head = 1, .head_dim = 8};
  merge_attention_states(mp, pool());
  for (float x : o) EXPECT_EQ(x, 0.f);
  EXPECT_EQ(l[0], ninf);
  // One empty side: the other side passes through unchanged.
  lb[0] = 0.5f;
  merge_attention_states(mp, pool());
  for (float x : o) EXPECT_EQ(x, 2.f);
  EXPECT_EQ(l[0], 0.5f);
}

}  // namespace
}  // namespace longctx

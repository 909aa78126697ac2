// test_fidelity.cpp: attention-fidelity metrics on tiny hand-computed examples, masks and the
// mask-method registry.
#include <gtest/gtest.h>

#include <cmath>

#include "eval/attention_fidelity.h"
#include "eval/mask_method.h"
#include "util/error.h"

using namespace longctx;
using namespace longctx::eval;

namespace {

MethodContext ctx_of(const AttnCapture& c) {
  return {.n_layer = c.layer + 1, .n_head = c.n_head, .n_kv_head = c.n_kv_head, .head_dim = c.head_dim, .model_name = "test"};
}

// 3 tokens, 1 head, head_dim 1: q = [0, 0, ln 3 * ... ] chosen so row 2 has known probabilities.
struct Tiny {
  std::vector<float> q, k, v;
  AttnCapture c;
  Tiny() {
    // Row 2 scores (scale 1): q2*k = [0, 0, ln 2] -> p = [1/4, 1/4, 1/2].
    q = {0.f, 0.f, 1.f};
    k = {0.f, 0.f, float(std::log(2.0))};
    v = {1.f, 2.f, 4.f};
    c.layer = 0;
    c.n_tokens = 3;
    c.n_head = 1;
    c.n_kv_head = 1;
    c.head_dim = 1;
    c.q = q.data();
    c.k = k.data();
    c.v = v.data();
  }
};

LayerMask single_block(std::vector<KeySpan> ranges, std::vector<int64_t> cols = {}) {
  LayerMask m;
  m.n_tokens = 3;
  m.heads = {{eval::BlockKeys{std::move(ranges), std::move(cols)}}};
  return m;
}

}  // namespace

TEST(Fidelity, DenseMaskHasZeroErrorAndFullRecall) {
  Tiny t;
  ThreadPool pool(1);
  const LayerMask m = make_mask_method("dense", ctx_of(t.c))->build(t.c);
  auto hf = layer_fidelity(t.c, m, FidelityParams{}, pool);
  ASSERT_EQ(hf.size(), 1u);
  EXPECT_NEAR(hf[0].rel_err, 0.0, 1e-12);
  EXPECT_NEAR(hf[0].recall, 1.0, 1e-12);
  EXPECT_NEAR(hf[0].min_recall, 1.0, 1e-12);
  EXPECT_NEAR(hf[0].density, 1.0, 1e-12);
}

TEST(Fidelity, HandComputedSparseExample) {
  Tiny t;
  std::vector<double> p;
  attention_probs(t.c, 0, 2, p);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_NEAR(p[0], 0.25, 1e-9);
  EXPECT_NEAR(p[1], 0.25, 1e-9);
  EXPECT_NEAR(p[2], 0.5, 1e-9);
  // Keep key 0 and key 2 (range [0,1) + column 2); evaluate only the last row.
  ThreadPool pool(1);
  FidelityParams fp;
  fp.max_queries = 1;
  auto hf = layer_fidelity(t.c, single_block({{0, 1}}, {2}), fp, pool);
  // Row 2: dense o = 0.25*1 + 0.25*2 + 0.5*4 = 2.75; recall = 0.75; sparse o = (0.25*1 + 0.5*4)/0.75 = 3.
  EXPECT_NEAR(hf[0].recall, 0.75, 1e-9);
  EXPECT_NEAR(hf[0].rel_err, (3.0 - 2.75) / 2.75, 1e-9);
  EXPECT_NEAR(hf[0].density, 2.0 / 3.0, 1e-9);
  // All rows: row 0 keeps key 0 (exact), row 1 keeps key 0 only: p=[.5,.5], o_d=1.5, o_s=1, recall .5.
  fp.max_queries = 0;
  hf = layer_fidelity(t.c, single_block({{0, 1}}, {2}), fp, pool);
  const double err2 = 0 + 0.25 + 0.0625, den2 = 1 + 2.25 + 2.75 * 2.75;
  EXPECT_NEAR(hf[0].rel_err, std::sqrt(err2 / den2), 1e-9);
  EXPECT_NEAR(hf[0].recall, (1 + 0.5 + 0.75) / 3, 1e-9);
  EXPECT_NEAR(hf[0].min_recall, 0.5, 1e-9);
}

TEST(Fidelity, RowsAreEvenlySpacedAndIncludeTheLast) {
  EXPECT_EQ(fidelity_rows(5, 0), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  auto r = fidelity_rows(1000, 10);
  ASSERT_EQ(r.size(), 10u);
  EXPECT_EQ(r.front(), 0);
  EXPECT_EQ(r.back(), 999);
}

TEST(Fidelity, AShapeMaskIsTheEnginesIndex) {
  AttnCapture c;
  c.n_tokens = 200;
  c.n_head = 2;
  c.n_kv_head = 1;
  const LayerMask m = make_mask_method("a_shape=4,16", ctx_of(c))->build(c);
  EXPECT_EQ(m.heads.size(), 1u);
  EXPECT_EQ(m.n_blocks(), 4);
  std::vector<uint8_t> kept;
  kept_keys(m, 2, 1, 150, kept);  // block 2 = rows 128..191: keys [0,4) and [113, 192) clipped to 150
  ASSERT_EQ(kept.size(), 151u);
  EXPECT_TRUE(kept[0] && kept[3] && !kept[4] && !kept[112] && kept[113] && kept[150]);
}

TEST(Fidelity, MaskSpecsComeFromTheEnginesRegistry) {
  try {
    check_mask_spec("nosuch");
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'nosuch'"), std::string::npos) << m;
    EXPECT_NE(m.find("a_shape"), std::string::npos) << m;
    EXPECT_NE(m.find("dense"), std::string::npos) << m;
  }
  Tiny t;
  EXPECT_THROW(make_mask_method("a_shape=12", ctx_of(t.c)), Error);
  EXPECT_THROW(make_mask_method("a_shape=x,4", ctx_of(t.c)), Error);
  EXPECT_THROW(make_mask_method("dense=3", ctx_of(t.c)), Error);
  // A hand-made mask (row 0's key only): recall is each row's probability mass on key 0.
  LayerMask first;
  first.n_tokens = t.c.n_tokens;
  first.heads.assign(1, std::vector<eval::BlockKeys>(size_t(first.n_blocks()), eval::BlockKeys{{{0, 1}}, {}}));
  ThreadPool pool(1);
  auto hf = layer_fidelity(t.c, first, FidelityParams{}, pool);
  EXPECT_NEAR(hf[0].recall, (1 + 0.5 + 0.25) / 3, 1e-9);
}

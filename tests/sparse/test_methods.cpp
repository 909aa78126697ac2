// test_methods.cpp: a_shape and minference through the AttentionMethod interface (registry
// specs, options, errors), end to end against the fp64 oracle with the mask their index implies,
// chunked prefill, dense fallbacks, decode.
#include <gtest/gtest.h>

#include <filesystem>

#include "kernels/ref/attention.h"
#include "methods/a_shape/a_shape_index.h"
#include "methods/method.h"
#include "methods/minference/minference_index.h"
#include "methods/minference/minference_method.h"
#include "methods/run_cpu.h"
#include "test_util.h"
#include "util/error.h"
#include "util/thread_pool.h"
#include "../common/error_of.h"

namespace longctx {
namespace {

namespace fs = std::filesystem;

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

using test_common::error_of;

// One sequence running a method, as the model runs it: the method's state + attend_cpu.
struct Seq {
  std::unique_ptr<AttentionMethod> m;
  std::unique_ptr<MethodState> st;
  Seq(std::unique_ptr<AttentionMethod> method) : m(std::move(method)), st(m->start_sequence()) {}
  void prefill(const AttnParams& p) { attend_cpu({.method = *m, .state = *st, .phase = Phase::prefill}, p, pool()); }
  void decode(const AttnParams& p) { attend_cpu({.method = *m, .state = *st, .phase = Phase::decode}, p, pool()); }
  void prepare_prompt(const AttnParams& p) { m->prepare_prompt(p, *st, pool()); }
  void end_prompt() { m->end_prompt(*st); }
  const AttentionMethod* operator->() const { return m.get(); }
};

MethodContext ctx(int n_layer, int n_head, int n_kv_head, int d) {
  return {.n_layer = n_layer, .n_head = n_head, .n_kv_head = n_kv_head, .head_dim = d, .model_name = "tiny-test"};
}

std::vector<float> dense_out(const AttnParams& p) {
  std::vector<float> o(size_t(p.n_q * p.n_head * p.head_dim));
  AttnParams pd = p;
  pd.o = o.data();
  pd.lse = nullptr;
  attention_dense_ref(pd, pool());
  return o;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

TEST(AShapeMethod, SpecsAndErrors) {
  EXPECT_EQ(make_attention_method("a_shape", ctx(2, 4, 2, 16))->name(), "a_shape=1024,4096");
  EXPECT_EQ(make_attention_method("a_shape=4,16", ctx(2, 4, 2, 16))->name(), "a_shape=4,16");
  EXPECT_NE(error_of([] { make_attention_method("a_shape=4", ctx(2, 4, 2, 16)); }).find("SINK,WINDOW"), std::string::npos);
  EXPECT_NE(error_of([] { make_attention_method("a_shape=4,x", ctx(2, 4, 2, 16)); }).find("WINDOW"), std::string::npos);
  EXPECT_NE(error_of([] { make_attention_method("a_shape=4,-1", ctx(2, 4, 2, 16)); }).find("non-negative"), std::string::npos);
  EXPECT_THROW(make_attention_method("a_shape=4,0", ctx(2, 4, 2, 16)), Error);
}

TEST(AShapeMethod, WindowCoveringEverythingIsDense) {
  auto pr = test::make_problem(300, 0, 4, 2, 32, 3);
  Seq m = make_attention_method("a_shape=0,300", ctx(1, 4, 2, 32));
  m.prefill(pr.p);
  EXPECT_LT(max_diff(pr.o, dense_out(pr.p)), 2e-5);
  Seq m2 = make_attention_method("a_shape=300,1", ctx(1, 4, 2, 32));  // sinks cover everything
  m2.prefill(pr.p);
  EXPECT_LT(max_diff(pr.o, dense_out(pr.p)), 2e-5);
}

TEST(AShapeMethod, MatchesOracleWithBlockMask) {
  auto pr = test::make_problem(150, 90, 4, 2, 32, 5);
  Seq m = make_attention_method("a_shape=8,40", ctx(1, 4, 2, 32));
  m.prefill(pr.p);
  const auto ref = test::oracle_attention(pr.p, [&](int, int64_t i, int64_t j) {
    const int64_t first = pr.p.q_pos0 + (i / 64) * 64;
    return j < 8 || j >= first - 40 + 1;
  });
  const auto e = test::compare(pr.o, pr.lse, ref);
  EXPECT_LT(e.o, test::kTolO);
  EXPECT_LT(e.lse, test::kTolLse);
}

// A 2-layer, 4-head config mixing every pattern.
MInferenceConfig mixed_config() {
  MInferenceConfig cfg;
  cfg.layers = {{{PatternKind::VerticalSlash, 30, 50, 0},
                 {PatternKind::BlockSparse, 2, 0, 0},
                 {PatternKind::AShape, 16, 64, 0},
                 {PatternKind::VerticalSlash, 40, 120, 0}},
                {{PatternKind::BlockSparse, 1, 0, 0},
                 {PatternKind::VerticalSlash, 100, 60, 0},
                 {PatternKind::VerticalSlash, 31, 51, 0},
                 {PatternKind::AShape, 0, 100, 0}}};
  return cfg;
}

TEST(MInferenceMethod, PrefillMatchesOracleWithItsIndex) {
  const auto cfg = mixed_config();
  Seq m = make_minference_method(cfg, {}, ctx(2, 4, 2, 32));
  for (int layer = 0; layer < 2; ++layer) {
    auto pr = test::make_problem(600, 0, 4, 2, 32, 40 + layer, /*q_sigma=*/2.f);
    pr.p.layer = layer;
    m.prefill(pr.p);
    const SparseIndex idx = build_minference_index(pr.p, cfg.layers[size_t(layer)], pool());
    // The index is really sparse here (else this test would not test much).
    EXPECT_LT(index_kernel_pairs(idx, 600, 0, 600, 4), dense_causal_pairs(600, 0, 4) * 9 / 10);
    const auto e = test::compare(pr.o, pr.lse, test::oracle_attention(pr.p, test::index_mask(idx, 4)));
    EXPECT_LT(e.o, test::kTolO) << "layer " << layer;
    EXPECT_LT(e.lse, test::kTolLse) << "layer " << layer;
  }
}

// head_dim 256 with one KV head for four query heads (gemma-3-270m's global layers): the CPU
// method's estimate, index and sparse attention take any head dim.
TEST(MInferenceMethod, PrefillMatchesOracleWithItsIndexHeadDim256) {
  const auto cfg = mixed_config();
  Seq m = make_minference_method(cfg, {}, ctx(2, 4, 1, 256));
  for (int layer = 0; layer < 2; ++layer) {
    auto pr = test::make_problem(400, 200, 4, 1, 256, 60 + layer, /*q_sigma=*/2.f);
    pr.p.layer = layer;
    m.prefill(pr.p);
    const SparseIndex idx = build_minference_index(pr.p, cfg.layers[size_t(layer)], pool());
    EXPECT_LT(index_kernel_pairs(idx, 400, 200, 600, 4), dense_causal_pairs(400, 200, 4) * 9 / 10);
    const auto e = test::compare(pr.o, pr.lse, test::oracle_attention(pr.p, test::index_mask(idx, 4)));
    EXPECT_LT(e.o, test::kTolO) << "layer " << layer;
    EXPECT_LT(e.lse, test::kTolLse) << "layer " << layer;
  }
}

TEST(MInferenceMethod, ChunkedPrefillUsesEachChunksIndex) {
  // Three chunks of one prompt; each chunk's output is exact attention over its own index,
  // built from the chunk's last 64 queries against all cached keys.
  const auto cfg = mixed_config();
  Seq m = make_minference_method(cfg, {}, ctx(2, 4, 2, 32));
  auto full = test::make_problem(700, 0, 4, 2, 32, 99);
  for (const auto& [q0, n] : {std::pair<int64_t, int64_t>{0, 250}, {250, 200}, {450, 250}}) {
    AttnParams p = full.p;
    p.layer = 1;
    p.q = full.q.data() + q0 * 4 * 32;
    p.o = full.o.data() + q0 * 4 * 32;
    std::vector<float> lse(size_t(n * 4));
    p.lse = lse.data();
    p.n_q = n;
    p.q_pos0 = q0;
    p.n_kv = q0 + n;  // the cache holds this chunk and everything before
    m.prefill(p);
    const SparseIndex idx = build_minference_index(p, cfg.layers[1], pool());
    const auto ref = test::oracle_attention(p, test::index_mask(idx, 4));
    const std::vector<float> o(p.o, p.o + n * 4 * 32);
    const auto e = test::compare(o, lse, ref);
    EXPECT_LT(e.o, test::kTolO) << "chunk at " << q0;
    EXPECT_LT(e.lse, test::kTolLse) << "chunk at " << q0;
  }
}

TEST(MInferenceMethod, PromptWideLinesServeEveryChunk) {
  // Layer-major prefill: prepare_prompt with the prompt's last 64 queries, then three chunks; each
  // chunk's output is exact attention over the index its VS heads convert from those lines (BS
  // and A-shape heads as usual); after end_prompt a chunk estimates from its own queries again.
  const auto cfg = mixed_config();
  Seq m = make_minference_method(cfg, {}, ctx(2, 4, 2, 32));
  auto full = test::make_problem(700, 0, 4, 2, 32, 77, /*q_sigma=*/2.f);
  auto chunk = [&](int64_t q0, int64_t n, std::vector<float>& lse) {
    AttnParams p = full.p;
    p.layer = 1;
    p.q = full.q.data() + q0 * 4 * 32;
    p.o = full.o.data() + q0 * 4 * 32;
    lse.resize(size_t(n * 4));
    p.lse = lse.data();
    p.n_q = n;
    p.q_pos0 = q0;
    p.n_kv = q0 + n;
    return p;
  };
  std::vector<float> lse;
  AttnParams last = chunk(700 - kLastQ, kLastQ, lse);
  last.o = nullptr;
  last.lse = nullptr;
  EXPECT_TRUE(m->estimates_per_prompt(1, 700));
  m.prepare_prompt(last);
  const std::vector<VsLines> lines = estimate_prompt_lines(last, cfg.layers[1], pool());
  EXPECT_TRUE(lines[0].slash.empty()) << "block-sparse head: no lines";
  EXPECT_FALSE(lines[1].slash.empty());
  for (const auto& [q0, n] : {std::pair<int64_t, int64_t>{0, 250}, {250, 200}, {450, 250}}) {
    const AttnParams p = chunk(q0, n, lse);
    m.prefill(p);
    const SparseIndex idx = build_minference_index(p, cfg.layers[1], pool(), 1.0, lines);
    const std::vector<float> o(p.o, p.o + n * 4 * 32);
    const auto e = test::compare(o, lse, test::oracle_attention(p, test::index_mask(idx, 4)));
    EXPECT_LT(e.o, test::kTolO) << "chunk at " << q0;
    EXPECT_LT(e.lse, test::kTolLse) << "chunk at " << q0;
    if (q0 == 0) {  // an early chunk: the prompt's lines are not the chunk's own
      const SparseIndex own = build_minference_index(p, cfg.layers[1], pool());
      EXPECT_NE(own.heads[1].cols, idx.heads[1].cols);
    }
  }
  m.end_prompt();
  const AttnParams p = chunk(250, 200, lse);
  m.prefill(p);
  const std::vector<float> o(p.o, p.o + 200 * 4 * 32);
  const auto e = test::compare(o, lse, test::oracle_attention(p, test::index_mask(build_minference_index(p, cfg.layers[1], pool()), 4)));
  EXPECT_LT(e.o, test::kTolO) << "after end_prompt";
}

TEST(MInferenceMethod, HugeBudgetsAreClampedToDense) {
  MInferenceConfig cfg;
  cfg.layers = {{{PatternKind::VerticalSlash, 1000000, 1000000, 0}, {PatternKind::BlockSparse, 100000, 0, 0}}};
  Seq m = make_minference_method(cfg, {}, ctx(1, 2, 1, 16));
  auto pr = test::make_problem(333, 0, 2, 1, 16, 8);
  pr.p.layer = 0;
  m.prefill(pr.p);
  EXPECT_LT(max_diff(pr.o, dense_out(pr.p)), 2e-5);
}

TEST(MInferenceMethod, DenseFallbacksAndDecode) {
  const auto cfg = mixed_config();
  auto pr = test::make_problem(600, 0, 4, 2, 32, 12, 2.f);
  const auto dense = dense_out(pr.p);
  {  // dense_below: 600 keys < 1000 -> dense
    Seq m = make_minference_method(cfg, parse_minference_options(":dense_below=1000"), ctx(2, 4, 2, 32));
    pr.p.layer = 0;
    m.prefill(pr.p);
    EXPECT_LT(max_diff(pr.o, dense), 1e-6);
  }
  {  // dense_layers=1: layer 0 dense, layer 1 sparse (differs from dense)
    Seq m = make_minference_method(cfg, parse_minference_options("dense_layers=1"), ctx(2, 4, 2, 32));
    pr.p.layer = 0;
    m.prefill(pr.p);
    EXPECT_LT(max_diff(pr.o, dense), 1e-6);
    pr.p.layer = 1;
    m.prefill(pr.p);
    EXPECT_GT(max_diff(pr.o, dense), 1e-3);
  }
  {  // decode is dense: one query at the end of the cache
    Seq m = make_minference_method(cfg, {}, ctx(2, 4, 2, 32));
    AttnParams p = pr.p;
    p.layer = 1;
    p.n_q = 1;
    p.q_pos0 = 599;
    p.q = pr.q.data() + 599 * 4 * 32;
    std::vector<float> o(4 * 32), od(4 * 32);
    p.o = o.data();
    p.lse = nullptr;
    m.decode(p);
    p.o = od.data();
    attention_dense_ref(p, pool());
    EXPECT_EQ(o, od);
  }
}

TEST(MInferenceMethod, SpecOptionsAndErrors) {
  const auto o = parse_minference_options("cfg.json:dense_below=4096:dense_layers=2:ratio=0.5");
  EXPECT_EQ(o.config_path, "cfg.json");
  EXPECT_EQ(o.dense_below, 4096);
  EXPECT_EQ(o.dense_layers, 2);
  EXPECT_EQ(o.ratio, 0.5);
  EXPECT_NE(error_of([] { parse_minference_options("cfg.json:foo=1"); }).find("unknown option 'foo'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_minference_options("cfg.json:dense_below=-3"); }).find("dense_below"), std::string::npos);
  EXPECT_NE(error_of([] { parse_minference_options("a.json:b.json"); }).find("two config paths"), std::string::npos);
  // No config: tell the user how to make one.
  const auto msg = error_of([] { make_attention_method("minference", ctx(2, 4, 2, 32)); });
  EXPECT_NE(msg.find("search-patterns"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tiny-test"), std::string::npos) << msg;
  EXPECT_NE(error_of([] { make_attention_method("minference=/nonexistent.json", ctx(2, 4, 2, 32)); }).find("cannot open"),
            std::string::npos);
  // A config for another model.
  EXPECT_NE(error_of([] { make_minference_method(mixed_config(), {}, ctx(3, 4, 2, 32)); }).find("2 layers but model 'tiny-test' has 3"),
            std::string::npos);
}

TEST(MInferenceMethod, PublishedConfigThroughRegistry) {
  // The published Qwen2.5-7B config, as shipped (configs/minference, byte-identical copy).
  const auto path = fs::path(LONGCTX_SOURCE_DIR) / "configs" / "minference" / "Qwen2.5-7B-Instruct-128k.json";
  // Qwen2.5-7B geometry (28 layers, 28 query heads, 4 KV heads) with a small head_dim for speed.
  Seq m = make_attention_method("minference=" + path.string() + ":dense_below=100", ctx(28, 28, 4, 16));
  auto pr = test::make_problem(300, 0, 28, 4, 16, 1);
  pr.p.layer = 27;
  m.prefill(pr.p);  // 300 keys: VS budgets (k_v >= 30, k_s >= 100) partly clamped
  const auto cfg = MInferenceConfig::load(path.string());
  const SparseIndex idx = build_minference_index(pr.p, cfg.layers[27], pool());
  const auto e = test::compare(pr.o, pr.lse, test::oracle_attention(pr.p, test::index_mask(idx, 28)));
  EXPECT_LT(e.o, test::kTolO);
  EXPECT_LT(e.lse, test::kTolLse);
  for (float x : pr.lse) EXPECT_TRUE(std::isfinite(x));  // the forced diagonal: no empty row
  EXPECT_NE(error_of([&] { make_attention_method("minference=" + path.string(), ctx(32, 32, 8, 16)); }).find("28 layers"),
            std::string::npos);
}

}  // namespace
}  // namespace longctx

namespace longctx {
namespace {

// ---- the one spec syntax: phases and composition (methods/spec.h) ----

TEST(MethodSpec, PhasesAndCanonicalNames) {
  const MethodContext c = ctx(2, 4, 2, 32);
  EXPECT_EQ(make_attention_method("dense", c)->name(), "dense");
  EXPECT_EQ(make_attention_method("a_shape=8,40", c)->name(), "a_shape=8,40");
  const auto both = make_attention_method("prefill:a_shape=8,40;decode:a_shape=4,16", c);
  EXPECT_EQ(both->name(), "prefill:a_shape=8,40;decode:a_shape=4,16");
  EXPECT_EQ(make_attention_method(both->name(), c)->name(), both->name()) << "the name parses back";
  // A bare prefill method leaves decode dense; a decode clause makes it sparse.
  const AttnStep dec{.layer = 0, .phase = Phase::decode, .n_q = 1, .q_pos0 = 500, .n_kv = 501};
  const AttnStep pre{.layer = 0, .phase = Phase::prefill, .n_q = 100, .q_pos0 = 400, .n_kv = 500};
  EXPECT_EQ(make_attention_method("a_shape=8,40", c)->route(dec), Route::dense);
  EXPECT_EQ(make_attention_method("a_shape=8,40", c)->route(pre), Route::sparse);
  EXPECT_EQ(make_attention_method("decode:a_shape=8,40", c)->route(dec), Route::sparse);
  EXPECT_EQ(make_attention_method("decode:a_shape=8,40", c)->route(pre), Route::dense);
  EXPECT_EQ(make_attention_method("prefill:dense;decode:a_shape=8,40", c)->route(dec), Route::sparse);
}

TEST(MethodSpec, ErrorsNameTheProblem) {
  const MethodContext c = ctx(2, 4, 2, 32);
  EXPECT_NE(error_of([&] { make_attention_method("nosuch", c); }).find("unknown attention method 'nosuch'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_attention_method("a_shape;decode:a_shape=4,16;prefill:dense", c); }).find("prefill phase is given twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_attention_method("decode:dense;decode:a_shape=4,16", c); }).find("decode phase is given twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_attention_method("prefil:a_shape", c); }).find("unknown phase 'prefil'"), std::string::npos);
  EXPECT_NE(error_of([&] { make_attention_method("", c); }).find("empty attention spec"), std::string::npos);
  EXPECT_NE(error_of([&] { make_attention_method("decode:a_shape=4", c); }).find("SINK,WINDOW"), std::string::npos);
}

// Sparse decode on the CPU: "decode:a_shape" attends the sinks and the window only (the oracle:
// dense attention with that mask), and the composed method's state serves both phases.
TEST(MethodSpec, AShapeDecodeIsSinksPlusWindow) {
  auto pr = test::make_problem(1, 600, 4, 2, 32, 31, /*q_sigma=*/2.f);  // one query at position 600
  Seq m = make_attention_method("prefill:a_shape=8,40;decode:a_shape=16,64", ctx(1, 4, 2, 32));
  pr.p.layer = 0;
  m.decode(pr.p);
  SparseIndex want;
  want.n_q = 1;
  want.heads.resize(1);
  build_a_shape_index({.sink = 16, .window = 64}, 1, 600, 601, want.heads[0]);
  ASSERT_EQ(want.heads[0].ranges.size(), 2u);
  EXPECT_EQ(want.heads[0].ranges[0].end, 16);
  EXPECT_EQ(want.heads[0].ranges[1].start, 601 - 64);
  const auto e = test::compare(pr.o, pr.lse, test::oracle_attention(pr.p, test::index_mask(want, 4)));
  EXPECT_LT(e.o, test::kTolO);
  EXPECT_LT(e.lse, test::kTolLse);
  EXPECT_GT(max_diff(pr.o, dense_out(pr.p)), 1e-3) << "the window leaves keys out";
}

}  // namespace
}  // namespace longctx

// test_gpu_attn_tiles.cpp: fp8 attention tiles (--attn-tiles fp8, GpuOptions::attn_tiles): the
// sparse prefill steps read the fp8 cache's e4m3 K/V instead of the layer's bf16 staging
// (gpu_transformer.h, "fp8 attention tiles").
//
// Checks: (1) refusals, before any model work and without a GPU (Engine::load): an unknown tile
// type, --device cpu, no fp8 cache, --kv-offload, a pre-RoPE method; with a GPU also a method
// with no sparse prefill step (dense), and gpu::attn_tiles_problem's cases directly. (2) On tiny
// random Llamas (model_rows.h) with head_dim 64 (the default model's; the generic kernel) and
// 128, MInference (every pattern, budgets well below the prompt) and A-shape, all on the fp8
// cache: fp8 tiles vs bf16 tiles within the fp8 tolerance of test_gpu_kv_fp8.cpp and not
// identical (the e4m3 rows are read), the same dense / sparse step counts, in one call and in
// two (the second call's sparse steps read the first call's cached rows), then decode. (3) HiP,
// whose prefill estimate then scores the same e4m3 keys (GpuPrefillStep::k_fp8; the builder's
// selection over them: test_gpu_hip_fp8.cpp): its blocks are chosen over quantized keys, so
// near-tie blocks may differ from bf16 tiles' choice; the bar is that of a sparse method whose
// choices move with the e4m3 keys (test_gpu_prerope_window.cpp): fp8 tiles' logits clearly nearer
// bf16 tiles' than dense attention's are, not identical, the same step counts.
//   build/tests/gpu/test_gpu --gtest_filter='AttnTiles*'
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "longctx/engine.h"
#include "model/tiny_model.h"
#include "model_rows.h"
#include "test_util.h"
#include "util/error.h"

#ifdef LONGCTX_WITH_GPU
#include "../common/minference_test_configs.h"
#include "gpu/device_weights.h"
#include "gpu/gpu_stats.h"
#include "gpu/gpu_transformer.h"
#include "methods/gpu_method.h"
#include "methods/method.h"
#include "model/weights.h"
#endif

namespace longctx {
namespace {

using test::contains;
using test::error_of;

// A tiny model with head_dim 64 (the default model's), 3 layers, 4 query / 2 KV heads.
test::TinyModel& tiny64() {
  static test::TinyModel* t = [] {
    TinyModelSpec s;
    s.n_layer = 3;
    s.n_embd = 256;
    s.n_head = 4;
    s.n_kv_head = 2;
    s.n_ff = 512;
    s.context_length = 8192;
    s.seed = 51;
    return test::write_tiny("attn_tiles64", s).release();
  }();
  return *t;
}

std::string tiny64_path() { return (tiny64().dir / "tiny.gguf").string(); }

TEST(AttnTiles, RefusedUpFrontWithoutAGpu) {
  const std::string m = tiny64_path();
  std::string e =
      error_of([&] { Engine::load({.model_path = m, .device = "auto", .kv_cache = "fp8", .attn_tiles = "fp16"}); });
  EXPECT_TRUE(contains(e, "unknown attention tile type 'fp16'")) << e;
  e = error_of([&] { Engine::load({.model_path = m, .device = "cpu", .attn_tiles = "fp8"}); });
  EXPECT_TRUE(contains(e, "--attn-tiles fp8 is a GPU option")) << e;
  e = error_of([&] { Engine::load({.model_path = m, .device = "auto", .kv_cache = "bf16", .attn_tiles = "fp8"}); });
  EXPECT_TRUE(contains(e, "add --kv-cache fp8")) << e;
  e = error_of([&] {
    Engine::load({.model_path = m, .device = "auto", .kv_cache = "fp8", .attn_tiles = "fp8", .kv_offload = true});
  });
  EXPECT_TRUE(contains(e, "--kv-offload")) << e;
  // A pre-RoPE method: found from the model's metadata, before the GPU is probed.
  e = error_of([&] {
    Engine::load({.model_path = m, .attn = "tokenselect=n_init=64,k=128,n_local=256,chunk=256", .device = "auto",
                  .kv_cache = "fp8", .attn_tiles = "fp8"});
  });
  EXPECT_TRUE(contains(e, "pre-RoPE")) << e;
  // bf16 tiles (the default) are no change: the CPU engine loads.
  EXPECT_NO_THROW(Engine::load({.model_path = m, .n_threads = 2, .device = "cpu", .attn_tiles = "bf16"}));
}

#ifdef LONGCTX_WITH_GPU

TEST(AttnTiles, ProblemsOfTheGpuOptions) {
  const MethodContext mc = test::ctx_of(tiny64().cfg);
  gpu::GpuOptions o;
  o.attn = "a_shape=64,256";
  o.kv_cache = gpu::KvCacheType::fp8;
  o.attn_tiles = gpu::AttnTiles::fp8;
  const auto m = make_attention_method(o.attn, mc);
  const auto gm = make_gpu_method(*m, mc);
  EXPECT_EQ(gpu::attn_tiles_problem(o, *m, gm.get()), "");
  EXPECT_TRUE(contains(gpu::attn_tiles_problem(o, *m, nullptr), "no sparse prefill step"));
  gpu::GpuOptions b = o;
  b.kv_cache = gpu::KvCacheType::bf16;
  EXPECT_TRUE(contains(gpu::attn_tiles_problem(b, *m, gm.get()), "add --kv-cache fp8"));
  b = o;
  b.kv_offload.on = true;
  EXPECT_TRUE(contains(gpu::attn_tiles_problem(b, *m, gm.get()), "--kv-offload"));
  b = o;
  b.attn_tiles = gpu::AttnTiles::bf16;
  b.kv_cache = gpu::KvCacheType::bf16;
  EXPECT_EQ(gpu::attn_tiles_problem(b, *m, gm.get()), "");  // bf16 tiles: nothing to check
  EXPECT_EQ(gpu::parse_attn_tiles("fp8"), gpu::AttnTiles::fp8);
  EXPECT_THROW(gpu::parse_attn_tiles("int8"), Error);
}

TEST(AttnTiles, DenseMethodIsRefusedOnTheGpu) {
  REQUIRE_GPU();
  const std::string e = error_of([&] {
    Engine::load({.model_path = tiny64_path(), .device = "cuda", .kv_cache = "fp8", .attn_tiles = "fp8"});
  });
  EXPECT_TRUE(contains(e, "no sparse prefill step")) << e;
}

// fp8 tolerance of logits (as test_gpu_kv_fp8.cpp: e4m3 K/V against bf16 K/V).
constexpr double kFp8LogitRelTol = 0.05;
constexpr double kFp8RelL2Tol = 0.03;
constexpr int64_t kRows = 4;

struct Worst {
  double rel = 0, rel_l2 = 0;
};
Worst worst(const test::Rows& a, const test::Rows& b) {
  Worst w;
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const test::LogitDiff d = test::compare_row(a[i].data(), b[i].data(), int64_t(a[i].size()));
    w.rel = std::max(w.rel, d.max_abs / std::max(d.scale, 1e-30));
    w.rel_l2 = std::max(w.rel_l2, d.rel_l2);
  }
  return w;
}

struct Run {
  test::Rows rows;
  gpu::GpuPrefillStats stats;
};

// Prefill of ids in calls of `call` tokens (chunk 256: several chunks per call), then decode.
Run run(const test::TinyModel& t, const std::string& attn, gpu::AttnTiles tiles, const std::vector<int32_t>& ids,
        int64_t call, const std::vector<int32_t>& decode) {
  gpu::GpuOptions o;
  o.chunk = 256;
  o.attn = attn;
  o.kv_cache = gpu::KvCacheType::fp8;
  o.attn_tiles = tiles;
  const ModelWeights w = ModelWeights::load(*t.file, t.cfg);
  gpu::GpuTransformer g(t.cfg, gpu::DeviceWeights::upload(t.cfg, w, nullptr), o);
  EXPECT_EQ(g.attn_tiles(), tiles);
  g.reset(int64_t(ids.size() + decode.size()));
  Run r;
  r.rows = test::logit_rows(g, ids, decode, kRows, call);
  r.stats = gpu::last_gpu_prefill_stats();
  return r;
}

void expect_fp8_close(const test::TinyModel& t, const std::string& attn, const char* what) {
  const int32_t V = int32_t(t.cfg.vocab_size);
  const auto ids = test::random_ids(1200, V, 61);
  const auto dec = test::random_ids(8, V, 62);
  for (int64_t call : {int64_t(1200), int64_t(700)}) {  // one call; two (the second reads cached rows)
    const Run b = run(t, attn, gpu::AttnTiles::bf16, ids, call, dec);
    const Run f = run(t, attn, gpu::AttnTiles::fp8, ids, call, dec);
    const Worst w = worst(b.rows, f.rows);
    std::printf("[attn-tiles] %s d=%d call=%lld: fp8 vs bf16 tiles max rel %.3g, rel L2 %.3g (sparse steps %lld)\n",
                what, t.cfg.head_dim, (long long)call, w.rel, w.rel_l2, (long long)f.stats.sparse_calls);
    EXPECT_LT(w.rel, kFp8LogitRelTol) << what << " call " << call;
    EXPECT_LT(w.rel_l2, kFp8RelL2Tol) << what << " call " << call;
    EXPECT_GT(w.rel, 0.0) << what << ": fp8 tiles identical to bf16 tiles: are the e4m3 rows read at all?";
    EXPECT_GT(f.stats.sparse_calls, 0) << what;
    EXPECT_EQ(f.stats.sparse_calls, b.stats.sparse_calls) << what;
    EXPECT_EQ(f.stats.dense_calls, b.stats.dense_calls) << what;
  }
}

// HiP (every layer sparse, budgets well below the prompt) with fp8 vs bf16 tiles, against how far
// dense attention is from bf16 tiles (see the header: the estimate's near-tie choices move).
// Bar: with near-uniform attention (random weights) a row's output is the mean of the V rows it
// attends; dense (~1200 keys) is off HiP's ~136 (sinks 8 + k 64 + window 64) by about
// sqrt(1/136 - 1/1200) = 0.081 std(V), while fp8 keys swapping a fifth of the 64 selected keys
// (block Jaccard ~0.8 on random keys, docs/benchmarks.md) moves it by about sqrt(2 * 13) / 136 =
// 0.037 std(V), ~0.46 of dense's; e4m3 K/V rounding adds a little. 0.75 leaves room for that.
constexpr const char* kHipSpec = "hip=k=64,window=64,sinks=8,refresh=4,dense_layers=0";
constexpr double kL2NearerThanDense = 0.75;

void expect_hip_fp8_near(const test::TinyModel& t) {
  const int32_t V = int32_t(t.cfg.vocab_size);
  const auto ids = test::random_ids(1200, V, 63);
  const auto dec = test::random_ids(8, V, 64);
  for (int64_t call : {int64_t(1200), int64_t(700)}) {
    const Run b = run(t, kHipSpec, gpu::AttnTiles::bf16, ids, call, dec);
    const Run f = run(t, kHipSpec, gpu::AttnTiles::fp8, ids, call, dec);
    const Run d = run(t, "dense", gpu::AttnTiles::bf16, ids, call, dec);
    const Worst w = worst(b.rows, f.rows), wd = worst(b.rows, d.rows);
    std::printf("[attn-tiles] hip d=%d call=%lld: fp8 vs bf16 tiles max rel %.3g, rel L2 %.3g; dense vs bf16 tiles "
                "rel L2 %.3g (sparse steps %lld)\n",
                t.cfg.head_dim, (long long)call, w.rel, w.rel_l2, wd.rel_l2, (long long)f.stats.sparse_calls);
    EXPECT_LT(w.rel_l2, kL2NearerThanDense * wd.rel_l2) << "call " << call << ": fp8 tiles not clearly nearer bf16's";
    EXPECT_GT(w.rel, 0.0) << "call " << call << ": fp8 tiles identical to bf16 tiles: are the e4m3 rows read at all?";
    EXPECT_GT(f.stats.sparse_calls, 0);
    EXPECT_EQ(f.stats.sparse_calls, b.stats.sparse_calls);
    EXPECT_EQ(f.stats.dense_calls, b.stats.dense_calls);
  }
}

// MInference with every pattern (budgets well below the prompt), written for the 3-layer,
// 4-head tiny models.
std::string minference_spec(const test::TinyModel& t) {
  const std::string path = (t.dir / "mixed.json").string();
  test::mixed_config().save(path);
  return "minference=" + path;
}

TEST(AttnTiles, Fp8TilesCloseToBf16TilesHeadDim64) {
  REQUIRE_GPU();
  expect_fp8_close(tiny64(), minference_spec(tiny64()), "minference");
  expect_fp8_close(tiny64(), "a_shape=64,256", "a_shape");
}

TEST(AttnTiles, HipFp8EstimateAndTilesNearBf16HeadDim64) {
  REQUIRE_GPU();
  expect_hip_fp8_near(tiny64());
}

// A tiny model with head_dim 128 (the Hopper sparse kernel's fp8 path), 3 layers, 4 query / 2 KV heads.
test::TinyModel& tiny128() {
  static test::TinyModel* t = [] {
    TinyModelSpec s;
    s.n_layer = 3;
    s.n_embd = 512;
    s.n_head = 4;
    s.n_kv_head = 2;
    s.n_ff = 1024;
    s.context_length = 8192;
    s.seed = 52;
    return test::write_tiny("attn_tiles128", s).release();
  }();
  return *t;
}

TEST(AttnTiles, Fp8TilesCloseToBf16TilesHeadDim128) {
  REQUIRE_GPU();
  expect_fp8_close(tiny128(), minference_spec(tiny128()), "minference");
}

TEST(AttnTiles, HipFp8EstimateAndTilesNearBf16HeadDim128) {
  REQUIRE_GPU();
  expect_hip_fp8_near(tiny128());
}

#endif  // LONGCTX_WITH_GPU

}  // namespace
}  // namespace longctx

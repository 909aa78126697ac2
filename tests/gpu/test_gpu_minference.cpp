// test_gpu_minference.cpp: sparse prefill on the GPU model (--attn minference=CFG, a_shape) vs
// the CPU methods of src/sparse on the same (bf16-valued) weights.
//
// The model: a tiny random Llama with head_dim 128 (the sparse kernel's size), 4 query / 2 KV
// heads, 3 layers, written by model/tiny_model. The config mixes all three patterns with budgets
// that leave most keys out at ~1.1K tokens (so sparse and dense logits differ clearly), and the
// tests check: GPU MInference == CPU MInference (bf16 tolerance of test_util.h; the index is
// chosen from bf16 Q/K on the GPU and fp32 on the CPU, so a near-tied line can differ: the
// measured margin is printed), single-chunk and chunked prefill, dense decode afterwards;
// budgets that cover everything == dense; dense_layers / dense_below choose dense exactly where
// the CPU does (bit-identical to the dense GPU model where everything is dense, and the
// (layer, chunk) counts); config/model mismatches are clear errors; a head_dim-64 model (the
// default model's size) runs through the generic sparse kernel and matches the CPU too; a
// layer-major prefill (MInference with vertical-slash heads, bf16 or fp8 cache) shares one
// vertical-slash estimate per layer across its chunks and matches the CPU method run on the whole
// prompt as one chunk.
// Parsing tests run without a GPU (CUDA builds); the rest GTEST_SKIP without one.
//   build-gpuint/tests/gpu/test_gpu --gtest_filter='GpuMInference*'
#ifdef LONGCTX_WITH_GPU
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>

#include "gpu/device_weights.h"
#include "gpu/geometry.h"
#include "methods/gpu_method.h"
#include "methods/minference/minference_gpu.h"
#include "methods/phase_method.h"
#include "gpu/gpu_transformer.h"
#include "longctx/engine.h"
#include "model/tiny_model.h"
#include "model/transformer.h"
#include "methods/method.h"
#include "methods/minference/minference_config.h"
#include "../common/minference_test_configs.h"
#include "test_util.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {
namespace {

using test::contains;
using test::error_of;

using test::random_ids;

using test::compare_row;
using test::LogitDiff;

constexpr int kLayers = 3, kHeads = 4;

TinyModelSpec tiny_d128() {
  TinyModelSpec s;
  s.n_layer = kLayers;
  s.n_embd = 512;
  s.n_head = kHeads;  // head dim 128
  s.n_kv_head = 2;
  s.n_ff = 1024;
  s.context_length = 8192;
  s.seed = 21;
  return s;
}

using test::ash;
using test::bs;
using test::mixed_config;  // every pattern, budgets well below ~1.1K keys
using test::vs;

// Budgets past any prompt here: every pattern covers all causal keys.
MInferenceConfig full_config() {
  MInferenceConfig c;
  c.layers = {{vs(100000, 100000), bs(100000), ash(100000, 100000), vs(100000, 100000)},
              {bs(100000), vs(100000, 100000), ash(0, 100000), bs(100000)},
              {ash(100000, 1), vs(100000, 100000), bs(100000), vs(100000, 100000)}};
  return c;
}

struct Fixture {
  std::filesystem::path dir;
  std::string model, mixed, full, wrong;
  ModelConfig cfg;
  std::unique_ptr<ModelFile> file;
};

Fixture& fixture() {
  static Fixture* f = [] {
    auto* x = new Fixture;
    x->dir = test::temp_dir("minference");
    write_tiny_model(x->dir.string(), tiny_d128());
    x->model = (x->dir / "tiny.gguf").string();
    x->mixed = (x->dir / "mixed.json").string();
    x->full = (x->dir / "full.json").string();
    x->wrong = (x->dir / "wrong.json").string();
    mixed_config().save(x->mixed);
    full_config().save(x->full);
    MInferenceConfig w = mixed_config();
    w.layers.pop_back();  // 2 layers for a 3-layer model
    w.save(x->wrong);
    x->file = open_model_file(x->model);
    x->cfg = ModelConfig::from_model_file(*x->file);
    return x;
  }();
  return *f;
}

// Logit rows of a run: the last kRows rows of the prefill, then n_decode teacher-forced decode
// steps (tokens given, so both models see the same sequence).
constexpr int64_t kRows = 4;
struct RunLogits {
  std::vector<std::vector<float>> rows;
  gpu::GpuPrefillStats stats;  // GPU runs only
};

RunLogits run_gpu(gpu::GpuTransformer& g, const std::vector<int32_t>& ids, int64_t chunk,
            const std::vector<int32_t>& decode) {
  RunLogits r;
  const int64_t n = int64_t(ids.size()), V = g.config().vocab_size;
  g.reset(n + int64_t(decode.size()));
  std::vector<float> lg;
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {  // GpuTransformer chunks by itself too; the same cut
    const int64_t c1 = std::min(n, c0 + chunk);
    g.forward(std::span(ids).subspan(size_t(c0), size_t(c1 - c0)), c1 == n ? kRows : 0, &lg);
  }
  r.stats = gpu::last_gpu_prefill_stats();
  for (int64_t i = 0; i < kRows; ++i) r.rows.emplace_back(lg.begin() + i * V, lg.begin() + (i + 1) * V);
  for (int32_t t : decode) {
    g.forward(std::span(&t, 1), 1, &lg);
    r.rows.push_back(lg);
  }
  return r;
}

RunLogits run_cpu(const std::string& spec, const ModelWeights& w, const std::vector<int32_t>& ids, int64_t chunk,
            const std::vector<int32_t>& decode) {
  const ModelConfig& cfg = fixture().cfg;
  MethodContext mc{cfg.n_layer, cfg.n_head, cfg.n_kv_head, cfg.head_dim, cfg.name};
  Transformer cpu(cfg, w, make_attention_method(spec, mc), global_pool());
  RunLogits r;
  const int64_t n = int64_t(ids.size()), V = cfg.vocab_size;
  cpu.reset(n + int64_t(decode.size()));
  std::vector<float> lc;
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const int64_t c1 = std::min(n, c0 + chunk);
    cpu.forward(std::span(ids).subspan(size_t(c0), size_t(c1 - c0)), c1 == n ? kRows : 0, &lc);
  }
  for (int64_t i = 0; i < kRows; ++i) r.rows.emplace_back(lc.begin() + i * V, lc.begin() + (i + 1) * V);
  for (int32_t t : decode) {
    cpu.forward(std::span(&t, 1), 1, &lc);
    r.rows.push_back(lc);
  }
  return r;
}

struct Cmp {
  double worst = 0;  // max over rows of max|diff| / tol
  double worst_rel_l2 = 0;
  int argmax_checked = 0, argmax_equal = 0;
};
// a = reference, b = tested.
Cmp compare(const RunLogits& a, const RunLogits& b) {
  Cmp c;
  EXPECT_EQ(a.rows.size(), b.rows.size());
  for (size_t i = 0; i < std::min(a.rows.size(), b.rows.size()); ++i) {
    const LogitDiff d = compare_row(a.rows[i].data(), b.rows[i].data(), int64_t(a.rows[i].size()));
    c.worst = std::max(c.worst, d.max_abs / d.tol());
    c.worst_rel_l2 = std::max(c.worst_rel_l2, d.rel_l2);
    if (d.margin_a > 2 * d.tol()) {
      ++c.argmax_checked;
      c.argmax_equal += d.argmax_a == d.argmax_b;
    }
  }
  return c;
}

bool bit_identical(const RunLogits& a, const RunLogits& b) { return a.rows == b.rows; }

std::vector<int32_t> decode_tokens() { return {5, 77, 200, 42}; }  // byte tokens: in every vocabulary here

gpu::GpuTransformer make_gpu(const std::string& spec, int64_t chunk) {
  Fixture& f = fixture();
  gpu::GpuOptions o;
  o.chunk = chunk;
  o.attn = spec;
  return gpu::GpuTransformer(f.cfg, gpu::DeviceWeights::upload(f.cfg, ModelWeights::load(*f.file, f.cfg), nullptr), o);
}

// ---- parsing (no GPU needed) -------------------------------------------------------------

MethodContext ctx_of(const ModelConfig& c) { return {c.n_layer, c.n_head, c.n_kv_head, c.head_dim, c.name}; }

// The route of a prefill chunk of 64 queries ending at n_kv keys.
Route prefill_route(const AttentionMethod& m, int layer, int64_t n_kv) {
  return m.route({.layer = layer, .phase = Phase::prefill, .n_q = 64, .q_pos0 = n_kv - 64, .n_kv = n_kv});
}

TEST(GpuMInferenceParse, SpecsAsOnTheCpu) {
  Fixture& f = fixture();
  const MethodContext mc = ctx_of(f.cfg);
  const GpuShape shape{.model = mc, .chunk = 256, .capacity = 4096};
  const auto d = make_attention_method("dense", mc);
  EXPECT_EQ(prefill_route(*d, 0, 1 << 20), Route::dense);
  EXPECT_EQ(make_gpu_method(*d, mc), nullptr);  // never sparse: no GPU builder, no memory

  const auto m = make_attention_method("minference=" + f.mixed + ":dense_below=600:dense_layers=1:ratio=2", mc);
  const auto* mm = dynamic_cast<const MInferenceMethod*>(
      static_cast<const PhaseMethod&>(*m).side(Phase::prefill));  // a prefill method: decode dense
  ASSERT_NE(mm, nullptr);
  const auto layers = gpu_patterns(*mm);
  ASSERT_EQ(layers.size(), size_t(kLayers));
  ASSERT_EQ(layers[0].size(), size_t(kHeads));
  // VS budgets scaled by ratio (as methods/minference/minference_index.cpp), block-sparse and A-shape not.
  EXPECT_EQ(layers[0][0].kind, cuda::GpuPatternKind::VerticalSlash);
  EXPECT_EQ(layers[0][0].vertical, 80);
  EXPECT_EQ(layers[0][0].slash, 300);
  EXPECT_EQ(layers[0][1].kind, cuda::GpuPatternKind::BlockSparse);
  EXPECT_EQ(layers[0][1].vertical, 3);
  EXPECT_EQ(layers[0][2].kind, cuda::GpuPatternKind::AShape);
  EXPECT_EQ(layers[0][2].vertical, 64);
  EXPECT_EQ(layers[0][2].slash, 256);
  EXPECT_EQ(prefill_route(*m, 0, 5000), Route::dense);  // dense layer
  EXPECT_EQ(prefill_route(*m, 1, 599), Route::dense);   // below dense_below
  EXPECT_EQ(prefill_route(*m, 1, 600), Route::sparse);
  EXPECT_EQ(m->route({.layer = 1, .phase = Phase::decode, .n_q = 1, .q_pos0 = 5000, .n_kv = 5001}), Route::dense);
  EXPECT_TRUE(m->estimates_per_prompt(1, 600));  // vertical-slash heads in sparse layers
  MInferenceConfig no_vs = mixed_config();
  for (auto& layer : no_vs.layers)
    for (auto& h : layer)
      if (h.kind == PatternKind::VerticalSlash) h = bs(3);
  const std::string no_vs_path = (f.dir / "no_vs.json").string();
  no_vs.save(no_vs_path);
  EXPECT_FALSE(make_attention_method("minference=" + no_vs_path, mc)->estimates_per_prompt(1, 1 << 20));
  const auto all_dense = make_attention_method("minference=" + f.mixed + ":dense_layers=3", mc);
  for (int l = 0; l < kLayers; ++l) EXPECT_FALSE(all_dense->estimates_per_prompt(l, 1 << 20));
  EXPECT_EQ(make_gpu_method(*all_dense, mc), nullptr);  // never sparse: nothing to allocate
  const auto g = make_gpu_method(*m, mc);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->device_bytes({.model = mc, .chunk = 256, .capacity = 599}), 0u);  // no chunk reaches dense_below
  EXPECT_GT(g->device_bytes(shape), 0u);
  EXPECT_EQ(gpu_method_problem(*m, mc), "");

  const auto a = make_attention_method("a_shape", mc);
  EXPECT_EQ(a->name(), "a_shape=1024,4096");
  const auto a2 = make_attention_method("a_shape=64,256", mc);
  EXPECT_EQ(a2->name(), "a_shape=64,256");
  EXPECT_EQ(prefill_route(*a2, 0, 64), Route::sparse);
  EXPECT_GT(make_gpu_method(*a2, mc)->device_bytes(shape), 0u);
}

TEST(GpuMInferenceParse, ErrorsAreTheCpuMethodsAndNameTheHeadDimLimit) {
  Fixture& f = fixture();
  const MethodContext mc = ctx_of(f.cfg);
  std::string e = error_of([&] { make_attention_method("minference=" + f.wrong, mc); });
  EXPECT_TRUE(contains(e, "2 layers") && contains(e, "made for another model")) << e;
  e = error_of([&] { make_attention_method("minference", mc); });
  EXPECT_TRUE(contains(e, "search-patterns")) << e;
  e = error_of([&] { make_attention_method("minference=" + f.mixed + ":dense_abov=3", mc); });
  EXPECT_TRUE(contains(e, "unknown option 'dense_abov'")) << e;
  e = error_of([&] { make_attention_method("minference=/nonexistent/cfg.json", mc); });
  EXPECT_TRUE(contains(e, "/nonexistent/cfg.json")) << e;
  e = error_of([&] { make_attention_method("nosuch", mc); });
  EXPECT_TRUE(contains(e, "unknown attention method 'nosuch'")) << e;
  e = error_of([&] { make_attention_method("a_shape=1", mc); });
  EXPECT_TRUE(contains(e, "a_shape=SINK,WINDOW")) << e;
  // Sparse decode: A-shape has a GPU decode builder; the composition makes both sides.
  const auto sd = make_gpu_method(*make_attention_method("prefill:minference=" + f.mixed + ";decode:a_shape=16,64", mc), mc);
  ASSERT_NE(sd, nullptr);
  EXPECT_TRUE(sd->decodes());
  EXPECT_FALSE(make_gpu_method(*make_attention_method("minference=" + f.mixed, mc), mc)->decodes());

  // head_dim 64 (the default model's) runs (generic kernel); other sizes are named.
  MethodContext c64 = mc;
  c64.head_dim = 64;
  c64.model_name = "tiny-d64";
  EXPECT_EQ(gpu_method_problem(*make_attention_method("minference=" + f.mixed, mc), c64), "");
  EXPECT_EQ(gpu_method_problem(*make_attention_method("a_shape", c64), c64), "");
  MethodContext c96 = c64;
  c96.head_dim = 96;
  c96.model_name = "tiny-d96";
  const std::string p = gpu_method_problem(*make_attention_method("a_shape", c96), c96);
  EXPECT_TRUE(contains(p, "head_dim 64, 128 or 256") && contains(p, "tiny-d96 has head_dim 96")) << p;
  EXPECT_EQ(gpu_method_problem(*make_attention_method("dense", c96), c96), "");
  // head_dim 256 (Gemma 3's global layers): A-shape, MInference, HiP and InfiniteHiP run (the
  // sparse kernels, MInference's GPU index builders, HiP's estimator and InfiniteHiP's pruning
  // stages take 256).
  MethodContext c256 = c64;
  c256.head_dim = 256;
  c256.model_name = "tiny-d256";
  EXPECT_EQ(gpu_method_problem(*make_attention_method("a_shape", c256), c256), "");
  EXPECT_EQ(gpu_method_problem(*make_attention_method("minference=" + f.mixed, mc), c256), "");
  EXPECT_EQ(gpu_method_problem(*make_attention_method("hip=dense_layers=0", c256), c256), "");
  EXPECT_EQ(gpu_method_problem(*make_attention_method("infinitehip", c256), c256), "");
}

// ---- on the GPU ----------------------------------------------------------------------------

class GpuMInference : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::have_usable_gpu()) GTEST_SKIP() << "no usable (Hopper) GPU";
  }
};

// GPU MInference vs CPU MInference, one chunk and chunks of 256 (q_pos0 > 0, indices per chunk
// against all cached keys, the last chunk partial), then dense decode over the sparse-prefilled
// cache. The CPU runs on the GPU's bf16 weights widened to fp32.
TEST_F(GpuMInference, MatchesCpuMInference) {
  Fixture& f = fixture();
  const auto ids = random_ids(1100, f.cfg.vocab_size, 3);
  const std::string spec = "minference=" + f.mixed;
  for (int64_t chunk : {int64_t(1100), int64_t(256)}) {
    auto g = make_gpu(spec, chunk);
    const ModelWeights w = g.weights().download(g.stream());
    const RunLogits gm = run_gpu(g, ids, chunk, decode_tokens());
    const RunLogits cm = run_cpu(spec, w, ids, chunk, decode_tokens());
    const RunLogits cd = run_cpu("dense", w, ids, chunk, decode_tokens());
    const Cmp gc = compare(cm, gm), sd = compare(cd, cm);
    const int64_t chunks = (1100 + chunk - 1) / chunk;
    std::printf("[ gpu minference ] chunk %4lld: GPU vs CPU MInference max|diff|/tol %.3f (rel_l2 %.2e, argmax %d/%d); "
                "CPU MInference vs CPU dense %.3f (rel_l2 %.2e); index %lld ranges %lld cols; attention %.2f ms "
                "(index %.2f ms)\n",
                (long long)chunk, gc.worst, gc.worst_rel_l2, gc.argmax_equal, gc.argmax_checked, sd.worst,
                sd.worst_rel_l2, (long long)gm.stats.index_ranges, (long long)gm.stats.index_cols,
                1e3 * gm.stats.attention_s, 1e3 * gm.stats.index_s);
    EXPECT_LE(gc.worst, 1.0) << "GPU MInference logits outside the bf16 tolerance of the CPU's";
    EXPECT_EQ(gc.argmax_equal, gc.argmax_checked);
    // The method must matter at this length, or the comparison above proves nothing.
    EXPECT_GT(sd.worst, 1.0) << "sparse and dense logits differ by less than the tolerance";
    EXPECT_EQ(gm.stats.sparse_calls, kLayers * chunks);
    EXPECT_EQ(gm.stats.dense_calls, 0);
    EXPECT_GT(gm.stats.index_ranges, 0);
  }
}

// A layer-major prefill of several chunks (MInference with vertical-slash heads, bf16 or fp8
// cache) takes the vertical-slash lines from one estimate per layer, the prompt's last 64 queries
// against all its keys, as the reference does for a whole prompt; so with GPU chunks of 256 it
// must match the CPU method run on the whole prompt as one chunk. Prefill logits only (the fp8
// prefill attends bf16 staging; fp8 decode is tested in test_gpu_kv_fp8.cpp).
TEST_F(GpuMInference, LayerMajorPrefillUsesPromptWideLines) {
  Fixture& f = fixture();
  const int64_t n = 1100;
  const auto ids = random_ids(n, f.cfg.vocab_size, 6);
  const std::string spec = "minference=" + f.mixed;
  const ModelWeights w0 = ModelWeights::load(*f.file, f.cfg);
  for (gpu::KvCacheType kv : {gpu::KvCacheType::bf16, gpu::KvCacheType::fp8}) {
    gpu::GpuOptions o;
    o.chunk = 256;
    o.attn = spec;
    o.kv_cache = kv;
    gpu::GpuTransformer g(f.cfg, gpu::DeviceWeights::upload(f.cfg, w0, nullptr), o);
    ASSERT_TRUE(g.layer_major());
    const ModelWeights w = g.weights().download(g.stream());
    const RunLogits gm = run_gpu(g, ids, n, {});                 // one forward: 5 chunks per layer
    const RunLogits whole = run_cpu(spec, w, ids, n, {});        // the reference: one estimate per prompt
    const RunLogits per_chunk = run_cpu(spec, w, ids, 256, {});  // chunk-major: one estimate per chunk
    const RunLogits dense = run_cpu("dense", w, ids, n, {});
    const Cmp gc = compare(whole, gm), pc = compare(whole, per_chunk), sd = compare(dense, whole);
    std::printf("[ gpu minference ] layer-major (%s cache), chunks of 256: GPU vs CPU one-chunk MInference "
                "max|diff|/tol %.3f (rel_l2 %.2e); CPU per-chunk vs one-chunk %.3f; CPU one-chunk vs dense %.3f; "
                "%lld prompt-wide estimates, attention %.2f ms (index %.2f ms)\n",
                gpu::kv_cache_name(kv), gc.worst, gc.worst_rel_l2, pc.worst, sd.worst,
                (long long)gm.stats.prompt_estimates, 1e3 * gm.stats.attention_s, 1e3 * gm.stats.index_s);
    EXPECT_LE(gc.worst, 1.0) << "GPU layer-major MInference outside the bf16 tolerance of the CPU's one-chunk run";
    EXPECT_EQ(gc.argmax_equal, gc.argmax_checked);
    EXPECT_GT(sd.worst, 1.0) << "sparse and dense logits differ by less than the tolerance";
    EXPECT_EQ(gm.stats.prompt_estimates, kLayers);  // every layer has a vertical-slash head
    EXPECT_EQ(gm.stats.sparse_calls, kLayers * 5);
    // One chunk: nothing to share, the chunk estimates from its own last rows as before.
    gpu::GpuOptions o1 = o;
    o1.chunk = 2048;
    gpu::GpuTransformer g1(f.cfg, gpu::DeviceWeights::upload(f.cfg, w, nullptr), o1);
    const RunLogits one = run_gpu(g1, ids, n, {});
    EXPECT_EQ(one.stats.prompt_estimates, 0);
    EXPECT_LE(compare(whole, one).worst, 1.0);
  }
  // Without vertical-slash heads (or with the bf16 cache and dense / A-shape) the prefill stays
  // chunk-major.
  EXPECT_FALSE(make_gpu("a_shape=64,256", 256).layer_major());
  EXPECT_FALSE(make_gpu("dense", 256).layer_major());
}

TEST_F(GpuMInference, AShapeMatchesCpu) {
  Fixture& f = fixture();
  const auto ids = random_ids(1100, f.cfg.vocab_size, 4);
  const std::string spec = "a_shape=64,256";
  auto g = make_gpu(spec, 300);
  const ModelWeights w = g.weights().download(g.stream());
  const RunLogits ga = run_gpu(g, ids, 300, decode_tokens());
  const RunLogits ca = run_cpu(spec, w, ids, 300, decode_tokens());
  const RunLogits cd = run_cpu("dense", w, ids, 300, decode_tokens());
  const Cmp gc = compare(ca, ga), sd = compare(cd, ca);
  std::printf("[ gpu a_shape ] GPU vs CPU A-shape max|diff|/tol %.3f (rel_l2 %.2e); CPU A-shape vs dense %.3f\n",
              gc.worst, gc.worst_rel_l2, sd.worst);
  EXPECT_LE(gc.worst, 1.0);
  EXPECT_GT(sd.worst, 1.0);
  EXPECT_EQ(ga.stats.sparse_calls, kLayers * 4);
}

// Sparse decode (sinks + window) on the GPU: the decode steps' logits match the CPU method's, with
// a window small enough to leave keys out; graph replay and eager launches give the same logits
// bit for bit, and MInference prefill composes with A-shape decode.
TEST_F(GpuMInference, AShapeDecodeMatchesCpu) {
  Fixture& f = fixture();
  const auto ids = random_ids(700, f.cfg.vocab_size, 9);
  std::vector<int32_t> dec;
  for (int i = 0; i < 70; ++i) dec.push_back(int32_t(5 + (i * 37) % 200));  // crosses a 64-key tile: a re-capture
  for (const std::string& spec : {std::string("decode:a_shape=16,128"),
                                 "prefill:minference=" + f.mixed + ";decode:a_shape=32,100"}) {
    auto g = make_gpu(spec, 256);
    const ModelWeights w = g.weights().download(g.stream());
    const RunLogits ga = run_gpu(g, ids, 256, dec);
    const int64_t captures = g.graph_captures();
    g.set_cuda_graph(false);
    const RunLogits ge = run_gpu(g, ids, 256, dec);
    const RunLogits ca = run_cpu(spec, w, ids, 256, dec);
    const RunLogits cd = run_cpu("dense", w, ids, 256, dec);
    const Cmp gc = compare(ca, ga), sd = compare(cd, ca);
    std::printf("[ gpu sparse decode ] %s: GPU vs CPU max|diff|/tol %.3f (rel_l2 %.2e); CPU sparse vs dense %.3f; "
                "%lld graph captures\n",
                spec.c_str(), gc.worst, gc.worst_rel_l2, sd.worst, static_cast<long long>(captures));
    EXPECT_LE(gc.worst, 1.0) << spec;
    EXPECT_GT(sd.worst, 1.0) << spec << ": the window should leave keys out";
    EXPECT_GE(captures, 2) << spec;
    EXPECT_TRUE(bit_identical(ga, ge)) << spec << ": graph replay vs eager";
  }
}

// Budgets that cover every key: the sparse kernel computes dense attention.
TEST_F(GpuMInference, FullBudgetsEqualDense) {
  Fixture& f = fixture();
  const auto ids = random_ids(1000, f.cfg.vocab_size, 5);
  auto gd = make_gpu("dense", 384);
  const RunLogits dense = run_gpu(gd, ids, 384, decode_tokens());
  for (const std::string& spec : {"minference=" + f.full, std::string("a_shape=0,100000"), std::string("a_shape=2000,1")}) {
    auto g = make_gpu(spec, 384);
    const RunLogits s = run_gpu(g, ids, 384, decode_tokens());
    const Cmp c = compare(dense, s);
    std::printf("[ gpu full budgets ] %-40s vs GPU dense: max|diff|/tol %.3f (rel_l2 %.2e), %lld sparse calls\n",
                spec.substr(0, 40).c_str(), c.worst, c.worst_rel_l2, (long long)s.stats.sparse_calls);
    // Same keys, another kernel (tile order, bf16 output rounding): far inside the tolerance.
    EXPECT_LE(c.worst, 0.5) << spec;
    EXPECT_EQ(c.argmax_equal, c.argmax_checked) << spec;
    EXPECT_EQ(s.stats.sparse_calls, kLayers * 3) << spec;
  }
}

// dense_layers / dense_below: dense exactly where the CPU method is, counted per (layer, chunk);
// all-dense choices give the dense GPU model's logits bit for bit.
TEST_F(GpuMInference, DenseLayersAndDenseBelow) {
  Fixture& f = fixture();
  const auto ids = random_ids(1100, f.cfg.vocab_size, 6);
  const std::string base = "minference=" + f.mixed;
  auto gd = make_gpu("dense", 256);
  const RunLogits dense = run_gpu(gd, ids, 256, decode_tokens());
  const ModelWeights w = gd.weights().download(gd.stream());

  {  // every layer dense: no builder, the dense kernels, identical logits
    auto g = make_gpu(base + ":dense_layers=3", 256);
    const RunLogits r = run_gpu(g, ids, 256, decode_tokens());
    EXPECT_TRUE(bit_identical(dense, r));
    EXPECT_EQ(r.stats.sparse_calls, 0);
    EXPECT_EQ(r.stats.dense_calls, kLayers * 5);
    EXPECT_EQ(r.stats.sparse_bytes, 0u);
  }
  {  // dense_below above the prompt: the same
    auto g = make_gpu(base + ":dense_below=5000", 256);
    const RunLogits r = run_gpu(g, ids, 256, decode_tokens());
    EXPECT_TRUE(bit_identical(dense, r));
    EXPECT_EQ(r.stats.sparse_calls, 0);
  }
  struct Case {
    std::string opt;
    int64_t dense_calls, sparse_calls;
  };
  // Chunks of 256 over 1100 tokens end at n_kv = 256, 512, 768, 1024, 1100.
  for (const Case& c : {Case{":dense_layers=1", 5, 10}, Case{":dense_below=600", 6, 9},
                        Case{":dense_layers=2:dense_below=1024", 13, 2}}) {
    const std::string spec = base + c.opt;
    auto g = make_gpu(spec, 256);
    const RunLogits gm = run_gpu(g, ids, 256, decode_tokens());
    const RunLogits cm = run_cpu(spec, w, ids, 256, decode_tokens());
    const Cmp gc = compare(cm, gm), dd = compare(dense, gm);
    std::printf("[ gpu minference ] %-36s GPU vs CPU max|diff|/tol %.3f; vs GPU dense %.3f; %lld dense + %lld sparse\n",
                c.opt.c_str(), gc.worst, dd.worst, (long long)gm.stats.dense_calls, (long long)gm.stats.sparse_calls);
    EXPECT_LE(gc.worst, 1.0) << c.opt;
    EXPECT_EQ(gm.stats.dense_calls, c.dense_calls) << c.opt;
    EXPECT_EQ(gm.stats.sparse_calls, c.sparse_calls) << c.opt;
    EXPECT_FALSE(bit_identical(dense, gm)) << c.opt;
  }
}

// Through the Engine (what --attn minference=CFG --device cuda runs): logits and greedy tokens
// of the GPU engine (chunks of 512, layer-major: one vertical-slash estimate per prompt) vs the
// CPU engine with the same spec on the whole prompt as one chunk (the same single estimate); the
// same for score() (perplexity).
TEST_F(GpuMInference, EngineOnCudaMatchesCpuEngine) {
  Fixture& f = fixture();
  const std::string spec = "minference=" + f.mixed + ":dense_layers=1";
  auto cpu = Engine::load({.model_path = f.model, .n_threads = 4, .attn = spec, .prefill_chunk = 2048});
  auto gpu = Engine::load({.model_path = f.model, .attn = spec, .device = "cuda", .gpu_chunk = 512});
  const int64_t V = cpu->config().vocab_size;
  const auto ids = random_ids(1300, int32_t(V), 8);
  const auto lc = cpu->logits(ids, 2), lg = gpu->logits(ids, 2);
  ASSERT_EQ(lc.size(), lg.size());
  double worst = 0;
  for (int r = 0; r < 2; ++r) {
    const LogitDiff d = compare_row(lc.data() + r * V, lg.data() + r * V, V);
    worst = std::max(worst, d.max_abs / d.tol());
  }
  const gpu::GpuPrefillStats st = gpu::last_gpu_prefill_stats();
  std::printf("[ engine gpu minference ] vs CPU engine: max|diff|/tol %.3f; %lld dense + %lld sparse layer-chunks\n",
              worst, (long long)st.dense_calls, (long long)st.sparse_calls);
  EXPECT_LE(worst, 1.0);
  EXPECT_EQ(st.sparse_calls, 2 * 3);  // layers 1, 2 x chunks of 512, 512, 276
  EXPECT_EQ(st.prompt_estimates, 2);  // layers 1, 2: one estimate each
  // Perplexity scoring prefills the text as one prompt too (one estimate per layer, logits of
  // every row streamed out); a log-softmax moves by at most twice the largest logit difference.
  double tol = 0;
  for (int r = 0; r < 2; ++r) tol = std::max(tol, compare_row(lc.data() + r * V, lg.data() + r * V, V).tol());
  const auto sc = cpu->score(ids), sg = gpu->score(ids);
  EXPECT_EQ(gpu::last_gpu_prefill_stats().prompt_estimates, 2);
  ASSERT_EQ(sc.size(), sg.size());
  double worst_lp = 0;
  for (size_t i = 0; i < sc.size(); ++i) worst_lp = std::max(worst_lp, double(std::abs(sc[i] - sg[i])));
  std::printf("[ engine gpu minference ] score: max |log-prob diff| %.3f (bound %.3f)\n", worst_lp, 2 * tol);
  EXPECT_LT(worst_lp, 2 * tol);
  SamplingParams sp;
  sp.max_tokens = 6;
  sp.stop_at_eos = false;
  EXPECT_EQ(gpu->generate(ids, sp).tokens.size(), 6u);
}

TEST_F(GpuMInference, EngineErrors) {
  Fixture& f = fixture();
  // Config made for another model: the CPU method's message, on --device cuda and auto alike.
  for (const char* dev : {"cuda", "auto"}) {
    const std::string e =
        error_of([&] { Engine::load({.model_path = f.model, .attn = "minference=" + f.wrong, .device = dev}); });
    EXPECT_TRUE(contains(e, "made for another model")) << dev << ": " << e;
  }
}

// head_dim 64 (SmolLM2's, the default model's): MInference on the GPU runs the generic sparse
// kernel; the engine's logits (chunks of 256) match the CPU engine's (one chunk, as the GPU's
// layer-major MInference makes one estimate per prompt; A-shape does not depend on chunks).
TEST_F(GpuMInference, HeadDim64EngineMatchesCpuEngine) {
  const auto dir = test::temp_dir("minference-d64");
  TinyModelSpec s;
  s.n_embd = 256;
  s.n_head = 4;  // head dim 64
  s.n_ff = 512;
  s.n_layer = 2;
  s.context_length = 2048;
  write_tiny_model(dir.string(), s);
  const std::string m64 = (dir / "tiny.gguf").string();
  MInferenceConfig c;
  c.layers = {{vs(30, 100), vs(30, 100), vs(30, 100), vs(30, 100)}, {bs(2), bs(2), bs(2), bs(2)}};
  const std::string cfg64 = (dir / "cfg.json").string();
  c.save(cfg64);
  for (const std::string& spec : {"minference=" + cfg64, std::string("a_shape=32,128")}) {
    auto cpu = Engine::load({.model_path = m64, .n_threads = 4, .attn = spec, .prefill_chunk = 1024});
    auto gpu = Engine::load({.model_path = m64, .attn = spec, .device = "cuda", .gpu_chunk = 256});
    auto dense = Engine::load({.model_path = m64, .attn = "dense", .device = "cuda", .gpu_chunk = 256});
    const int64_t V = cpu->config().vocab_size;
    const auto ids = random_ids(900, int32_t(V), 9);
    const auto lc = cpu->logits(ids, 2), lg = gpu->logits(ids, 2);
    const gpu::GpuPrefillStats st = gpu::last_gpu_prefill_stats();
    const auto ld = dense->logits(ids, 2);
    ASSERT_EQ(lc.size(), lg.size());
    double worst = 0, vs_dense = 0;
    for (int r = 0; r < 2; ++r) {
      const LogitDiff d = compare_row(lc.data() + r * V, lg.data() + r * V, V);
      worst = std::max(worst, d.max_abs / d.tol());
      const LogitDiff dd = compare_row(ld.data() + r * V, lg.data() + r * V, V);
      vs_dense = std::max(vs_dense, dd.max_abs / dd.tol());
    }
    std::printf("[ engine gpu d64 ] %-16s vs CPU engine: max|diff|/tol %.3f (vs GPU dense %.3f); %lld sparse layer-chunks\n",
                spec.substr(0, 16).c_str(), worst, vs_dense, (long long)st.sparse_calls);
    EXPECT_LE(worst, 1.0) << spec;
    EXPECT_GT(st.sparse_calls, 0) << spec;
    EXPECT_GT(vs_dense, 0.0) << spec << ": sparse == dense bit for bit, the budgets should leave keys out";
  }
  std::filesystem::remove_all(dir);
}

// The builder is part of the memory plan: a cache that does not fit says so, sparse part included.
TEST_F(GpuMInference, MemoryPlanCountsTheIndexBuilder) {
  Fixture& f = fixture();
  auto g = make_gpu("minference=" + f.mixed, 256);
  const std::string e = error_of([&] { g.reset(int64_t(1) << 30); });
  EXPECT_TRUE(contains(e, "sparse prefill's index and workspace") && contains(e, "tokens would fit")) << e;
  std::printf("[ message ] %s\n", e.c_str());
  const size_t want = g.sparse_bytes(2048);
  const auto& mm = dynamic_cast<const MInferenceMethod&>(*static_cast<const PhaseMethod&>(g.attention()).side(Phase::prefill));
  const GpuShape shape{.model = ctx_of(f.cfg), .chunk = 256, .capacity = 2048};
  EXPECT_EQ(want, gpu::align_up(cuda::MinferenceIndexBuilder::device_bytes(builder_shape(shape.model, 256, 2048))) +
                      minference_index_bound(mm, shape));
  g.reset(2048);
  EXPECT_EQ(gpu::last_gpu_prefill_stats().sparse_bytes, want);
}

}  // namespace
}  // namespace longctx
#endif  // LONGCTX_WITH_GPU

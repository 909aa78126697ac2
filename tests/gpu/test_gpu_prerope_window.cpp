// test_gpu_prerope_window.cpp: the pre-RoPE methods (TokenSelect, InfiniteHiP rope=on) on a model
// with sliding-window layers, the Gemma 3 geometry (gemma3-270m's first 6 layers: 4 query / 1 KV
// heads, head_dim 256, layers 0-4 window 512 with RoPE base 10K, layer 5 global with base 1M),
// vs the CPU model with the same method on the same bf16-valued random weights.
//
// What it checks (issue 19): the method applies to the global layer only (also Self-Extend,
// SelfExtendMatchesCpu: not yet run on a device); the sliding-window
// layers keep post-RoPE keys and attend densely over their window on both devices
// (GpuTransformer::method_layer, methods/run_cpu.h). A 1200-token prompt (past the window and the
// methods' budgets) in chunks of 512 (the GPU's and the CPU's), then teacher-forced decode:
//   - dense (control) and tokenselect: GPU logits within the bf16 tolerance of the CPU's (test_util.h);
//     TokenSelect's selection-cache decisions equal the CPU's, made in the global layer only (the
//     local layers' per-layer caches stay empty);
//   - infinitehip rope=on: argmax equal where clear, and within the bf16 tolerance, or (where a
//     near-tie chunk choice on bf16 vs fp32 activations moves it past: test_gpu_infinitehip.cpp)
//     clearly nearer the CPU method than the CPU method is to dense; decode step types counted
//     for the global layer only;
//   - CUDA-graph decode replay == eager bit for bit (both methods, a 64-key tile crossed);
//   - tokenselect with --kv-cache fp8: prefill equal to the bf16 cache's, decode within the fp8
//     bounds of test_gpu_tokenselect.cpp; infinitehip rope=on with --kv-cache fp8: nearer the bf16
//     cache's logits than dense is (test_gpu_infinitehip.cpp's bars);
//   - refusals with a message, before any work: decode_batch (per-sequence method state),
//     --kv-offload (not HiP).
//   build-gpu/tests/gpu/test_gpu --gtest_filter='GpuPreRopeWindow*'   (skips without a GPU)
#ifdef LONGCTX_WITH_GPU
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>

#include "gpu/device_weights.h"
#include "gpu/geometry.h"
#include "gpu/gpu_transformer.h"
#include "methods/infinitehip/infinitehip_gpu.h"
#include "methods/method.h"
#include "methods/tokenselect/tokenselect_engine_gpu.h"
#include "methods/tokenselect/tokenselect_method.h"
#include "model/transformer.h"
#include "model_rows.h"
#include "test_util.h"
#include "util/thread_pool.h"

namespace longctx {
namespace {

using test::compare_row;
using test::contains;
using test::LogitDiff;
using test::random_ids;
using test::Rows;

constexpr uint64_t kWeightSeed = 31;
constexpr int64_t kPrompt = 1200;  // > the window (512) and both methods' budgets
constexpr int64_t kChunk = 512;    // prefill chunk on both devices: 512 + 512 + 176
constexpr int64_t kRows = 4;       // prefill logit rows compared
constexpr int kGlobalLayer = 5;
// TokenSelect with a budget of 64 + 128 + 256 = 448 keys, every decode step selecting (theta 2).
const std::string kTokenSelect = "tokenselect=n_init=64,k=128,n_local=256,chunk=256,theta=2";
// InfiniteHiP rope=on (test_gpu_infinitehip.cpp's kRopeSpec): every stage prunes at 1.2K keys.
const std::string kIhip = "infinitehip=l_c=64/16/4,k=512/128/32,n_sink=16,n_stream=64,early_layers=1,k_early=64,"
                          "refresh=8/4/2,rope=on";

const ModelConfig& config() {
  static const ModelConfig c = gpu::geometry_config("gemma3-270m:6");
  return c;
}
MethodContext ctx() { return test::ctx_of(config()); }

gpu::GpuTransformer make_gpu(const std::string& spec, gpu::KvCacheType kv = gpu::KvCacheType::bf16) {
  gpu::GpuOptions o;
  o.chunk = kChunk;
  o.attn = spec;
  o.kv_cache = kv;
  return gpu::GpuTransformer(config(), gpu::DeviceWeights::random(config(), kWeightSeed, nullptr), o);
}

const ModelWeights& cpu_weights() {  // the GPU's bf16 weights, downloaded once
  static const ModelWeights* w = [] {
    gpu::GpuTransformer g = make_gpu("dense");
    return new ModelWeights(g.weights().download(g.stream()));
  }();
  return *w;
}

std::vector<int32_t> prompt() { return random_ids(kPrompt, config().vocab_size, 5); }
std::vector<int32_t> decode_ids(int n) { return random_ids(n, config().vocab_size, 6); }

Rows run_gpu(gpu::GpuTransformer& g, const std::vector<int32_t>& ids, const std::vector<int32_t>& dec,
             int64_t call = kChunk) {
  g.reset(int64_t(ids.size() + dec.size()));
  return test::logit_rows(g, ids, dec, kRows, call);  // the prompt in calls of `call` tokens
}

struct CpuRun {
  Rows rows;
  std::unique_ptr<SequenceState> seq;  // its method state
};
CpuRun run_cpu(const std::string& spec, const std::vector<int32_t>& ids, const std::vector<int32_t>& dec) {
  Transformer cpu(config(), cpu_weights(), make_attention_method(spec, ctx()), global_pool());
  CpuRun r;
  r.seq = cpu.new_sequence(int64_t(ids.size() + dec.size()));
  cpu.attach(r.seq.get());
  r.rows = test::logit_rows(cpu, ids, dec, kRows, kChunk);
  cpu.attach(nullptr);
  return r;
}

using Cmp = test::RowsCmp;
Cmp compare(const Rows& a, const Rows& b) { return test::compare_rows(a, b); }  // a = reference

int64_t rows_differing(const Rows& a, const Rows& b) {
  EXPECT_EQ(a.size(), b.size());
  int64_t n = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    n += a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0;
  return n;
}

// ---- no GPU needed --------------------------------------------------------------------------

TEST(GpuPreRopeWindowGeometry, OneGlobalLayer) {
  for (int l = 0; l < config().n_layer; ++l)
    EXPECT_EQ(config().layer(l).window == 0, l == kGlobalLayer) << "layer " << l;
  EXPECT_EQ(config().layer(0).window, 512);
  EXPECT_EQ(config().head_dim, 256);
}

// ---- GPU ------------------------------------------------------------------------------------

class GpuPreRopeWindow : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::have_usable_gpu()) GTEST_SKIP() << "no usable (Hopper) GPU";
  }
};

TEST_F(GpuPreRopeWindow, DenseMatchesCpu) {
  const auto ids = prompt(), dec = decode_ids(6);
  gpu::GpuTransformer g = make_gpu("dense");
  const Cmp c = compare(run_cpu("dense", ids, dec).rows, run_gpu(g, ids, dec));
  std::printf("[ prerope window ] dense: GPU vs CPU max|diff|/tol %.3f (argmax %d/%d)\n", c.worst, c.equal, c.checked);
  EXPECT_LE(c.worst, 1.0);
  EXPECT_EQ(c.equal, c.checked);
}

TEST_F(GpuPreRopeWindow, TokenSelectMatchesCpu) {
  const auto ids = prompt(), dec = decode_ids(6);
  gpu::GpuTransformer g = make_gpu(kTokenSelect);
  const Rows gr = run_gpu(g, ids, dec);
  const CpuRun c = run_cpu(kTokenSelect, ids, dec);
  const Rows cd = run_cpu("dense", ids, dec).rows;
  const Cmp gc = compare(c.rows, gr), sd = compare(cd, c.rows);
  std::printf("[ prerope window ] tokenselect: GPU vs CPU max|diff|/tol %.3f (argmax %d/%d); CPU tokenselect vs "
              "CPU dense %.3f\n",
              gc.worst, gc.equal, gc.checked, sd.worst);
  EXPECT_LE(gc.worst, 1.0) << "GPU tokenselect logits outside the bf16 tolerance of the CPU's";
  EXPECT_EQ(gc.equal, gc.checked);
  EXPECT_GT(sd.worst, gc.worst) << "the method moves the logits less than the devices disagree: the test proves nothing";
  // Selections in the global layer only, as on the CPU: one miss per decode step (theta 2).
  const auto* t = dynamic_cast<const TokenSelectGpu*>(g.gpu_method());
  ASSERT_NE(t, nullptr);
  const auto& st = static_cast<const TokenSelectMethod::State&>(*c.seq->method);
  EXPECT_EQ(t->hits(g.stream()), 0);
  EXPECT_EQ(t->misses(g.stream()), int64_t(dec.size()));
  EXPECT_EQ(st.misses, int64_t(dec.size()));
  for (int l = 0; l < config().n_layer; ++l)
    EXPECT_EQ(t->selection(l, g.stream()).empty(), l != kGlobalLayer) << "layer " << l;
  // The global layer's last selection: the CPU's up to near-ties (bf16 vs fp32 votes), at least
  // 90% common as in test_gpu_tokenselect.cpp.
  const std::vector<int32_t> gs = t->selection(kGlobalLayer, g.stream());
  ASSERT_LT(size_t(kGlobalLayer), st.layers.size());
  const std::vector<int32_t>& cs = st.layers[size_t(kGlobalLayer)].selected;
  ASSERT_EQ(gs.size(), cs.size());
  std::vector<int32_t> common;
  std::set_intersection(gs.begin(), gs.end(), cs.begin(), cs.end(), std::back_inserter(common));
  std::printf("[ prerope window ] tokenselect: global layer's last selection %zu of %zu positions common\n",
              common.size(), cs.size());
  EXPECT_GE(double(common.size()), 0.9 * double(cs.size()));
}

TEST_F(GpuPreRopeWindow, InfiniteHipRopeOnMatchesCpu) {
  const auto ids = prompt(), dec = decode_ids(20);  // refresh 8/4/2: every decode step type
  gpu::GpuTransformer g = make_gpu(kIhip);
  ASSERT_TRUE(g.gpu_method() && g.gpu_method()->attends());
  const Rows gr = run_gpu(g, ids, dec);
  const Rows ci = run_cpu(kIhip, ids, dec).rows, cd = run_cpu("dense", ids, dec).rows;
  const Cmp gc = compare(ci, gr), sd = compare(cd, ci);
  std::printf("[ prerope window ] infinitehip rope=on: GPU vs CPU max|diff|/tol %.3f (argmax %d/%d); CPU "
              "infinitehip vs CPU dense %.3f; graph captures %lld\n",
              gc.worst, gc.equal, gc.checked, sd.worst, (long long)g.graph_captures());
  constexpr double kNearerThanDense = 0.75;  // test_gpu_infinitehip.cpp's bar
  EXPECT_EQ(gc.equal, gc.checked);
  EXPECT_LE(gc.worst, std::max(1.0, kNearerThanDense * sd.worst));
  EXPECT_GT(sd.worst, gc.worst) << "the method moves the logits less than the devices disagree: the test proves nothing";
  const IhipGpuDecodeCounts n = infinitehip_gpu_decode_counts(*g.gpu_method(), g.stream());
  int64_t steps = n.cached_steps;
  for (const int64_t r : n.refreshes) steps += r;
  EXPECT_EQ(steps, int64_t(dec.size())) << "decode steps of the global layer only";
}

// Self-Extend (dense=self_extend=G:W, the third pre-RoPE GPU method) on the global layer: near keys at
// their own positions, far keys grouped; the local layers unchanged (the CPU's rule: no grouped
// positions in a sliding-window layer). Added after the H100 call of 2026-11-26 (not yet run there).
TEST_F(GpuPreRopeWindow, SelfExtendMatchesCpu) {
  const std::string spec = "dense=self_extend=4:256";  // W 256 < the 1200-token prompt: far keys exist
  const auto ids = prompt(), dec = decode_ids(6);
  gpu::GpuTransformer g = make_gpu(spec);
  ASSERT_TRUE(g.gpu_method() && g.gpu_method()->attends());
  const Rows gr = run_gpu(g, ids, dec);
  const Rows cs = run_cpu(spec, ids, dec).rows, cd = run_cpu("dense", ids, dec).rows;
  const Cmp gc = compare(cs, gr), sd = compare(cd, cs);
  std::printf("[ prerope window ] %s: GPU vs CPU max|diff|/tol %.3f (argmax %d/%d); CPU Self-Extend vs CPU dense "
              "%.3f\n",
              spec.c_str(), gc.worst, gc.equal, gc.checked, sd.worst);
  EXPECT_LE(gc.worst, 1.0);
  EXPECT_EQ(gc.equal, gc.checked);
  EXPECT_GT(sd.worst, gc.worst) << "the method moves the logits less than the devices disagree: the test proves nothing";
}

// Graph replay == eager, bit for bit (a 64-key tile crossed: the graph is captured again).
TEST_F(GpuPreRopeWindow, GraphDecodeEqualsEager) {
  const auto ids = prompt(), dec = decode_ids(60);
  for (const std::string& spec : {kTokenSelect, kIhip}) {
    gpu::GpuTransformer g = make_gpu(spec);
    g.set_cuda_graph(false);
    const Rows eager = run_gpu(g, ids, dec);
    EXPECT_EQ(g.graph_captures(), 0);
    g.set_cuda_graph(true);
    const Rows graph = run_gpu(g, ids, dec);
    EXPECT_GE(g.graph_captures(), 2) << spec;
    EXPECT_EQ(rows_differing(eager, graph), 0) << spec << ": rows whose graph logits differ from eager";
    std::printf("[ prerope window ] %s: graph == eager over %zu rows, %lld captures\n", spec.c_str(), eager.size(),
                (long long)g.graph_captures());
  }
}

// --kv-cache fp8: the layer-major prefill attends the staged bf16 rows (global layer through the
// method, local layers through the window kernel), decode reads e4m3 (TokenSelect's global layer
// and the local layers' dense window decode). Bounds: test_gpu_tokenselect.cpp's.
TEST_F(GpuPreRopeWindow, TokenSelectFp8CacheCloseToBf16Cache) {
  constexpr double kFp8LogitRelTol = 0.05, kFp8RelL2Tol = 0.05;
  const auto ids = prompt(), dec = decode_ids(12);
  gpu::GpuTransformer b = make_gpu(kTokenSelect), f = make_gpu(kTokenSelect, gpu::KvCacheType::fp8);
  // One prefill call (the fp8 scales come from the first call's rows), three chunks of it.
  const Rows rb = run_gpu(b, ids, dec, kPrompt), rf = run_gpu(f, ids, dec, kPrompt);
  ASSERT_EQ(rb.size(), rf.size());
  const Cmp pc = compare(Rows(rb.begin(), rb.begin() + kRows), Rows(rf.begin(), rf.begin() + kRows));
  double rel = 0, rel_l2 = 0;
  for (size_t i = kRows; i < rb.size(); ++i) {
    const LogitDiff d = compare_row(rb[i].data(), rf[i].data(), int64_t(rb[i].size()));
    rel = std::max(rel, d.max_abs / std::max(d.scale, 1e-30));
    rel_l2 = std::max(rel_l2, d.rel_l2);
  }
  std::printf("[ prerope window ] fp8 tokenselect: prefill vs bf16 cache %.3f tol; decode max rel %.3g, rel L2 %.3g\n",
              pc.worst, rel, rel_l2);
  EXPECT_LE(pc.worst, 1.0);
  EXPECT_LT(rel, kFp8LogitRelTol);
  EXPECT_LT(rel_l2, kFp8RelL2Tol);
  EXPECT_GT(rel, 0.0) << "fp8 decode identical to bf16: is the fp8 cache read at all?";
}

// InfiniteHiP rope=on with --kv-cache fp8: the global layer prunes over the e4m3 cache's un-rotated
// keys (the pruning RoPE) and attends the dequantised gather at StreamingLLM positions, the local
// layers their dense window over e4m3. test_gpu_infinitehip.cpp's bars (a sparse method's near-tie
// chunk choices move with the e4m3 keys and the layer-major prefill's bf16 roundings): prefill rows
// and decode clearly nearer the bf16 cache's logits than dense is, the largest decode difference
// under TokenSelect's fp8 bound, and not zero; graph replay equal to eager.
TEST_F(GpuPreRopeWindow, InfiniteHipRopeOnFp8CacheCloseToBf16Cache) {
  constexpr double kFp8LogitRelTol = 0.05, kNearerThanDense = 0.75, kL2NearerThanDense = 0.5;
  const auto ids = prompt(), dec = decode_ids(20);  // refresh 8/4/2: every decode step type
  gpu::GpuTransformer b = make_gpu(kIhip), f = make_gpu(kIhip, gpu::KvCacheType::fp8), d = make_gpu("dense");
  ASSERT_TRUE(f.gpu_method() && f.gpu_method()->decode_reads_fp8());
  const Rows rb = run_gpu(b, ids, dec, kPrompt), rf = run_gpu(f, ids, dec, kPrompt), rd = run_gpu(d, ids, dec, kPrompt);
  EXPECT_GE(f.graph_captures(), 1) << "the fp8 decode steps did not replay from a graph";
  ASSERT_EQ(rb.size(), rf.size());
  const Rows pb(rb.begin(), rb.begin() + kRows), pf(rf.begin(), rf.begin() + kRows), pd(rd.begin(), rd.begin() + kRows);
  const double pre_fp8 = compare(pb, pf).worst, pre_dense = compare(pb, pd).worst;
  double rel = 0, rel_l2 = 0, dense_l2 = 0;
  for (size_t i = kRows; i < rb.size(); ++i) {
    const LogitDiff x = compare_row(rb[i].data(), rf[i].data(), int64_t(rb[i].size()));
    rel = std::max(rel, x.max_abs / std::max(x.scale, 1e-30));
    rel_l2 = std::max(rel_l2, x.rel_l2);
    dense_l2 = std::max(dense_l2, compare_row(rb[i].data(), rd[i].data(), int64_t(rb[i].size())).rel_l2);
  }
  std::printf("[ prerope window ] fp8 infinitehip rope=on: prefill vs bf16 cache %.3f tol (dense %.3f); decode max rel "
              "%.3g, rel L2 %.3g (dense %.3g)\n",
              pre_fp8, pre_dense, rel, rel_l2, dense_l2);
  EXPECT_LE(pre_fp8, std::max(1.0, kNearerThanDense * pre_dense));
  EXPECT_LT(rel, kFp8LogitRelTol);
  EXPECT_GT(rel, 0.0) << "fp8 decode identical to bf16: is the fp8 cache read at all?";
  EXPECT_LT(rel_l2, kL2NearerThanDense * dense_l2) << "fp8 decode not clearly nearer the bf16 cache's than dense is";
  f.set_cuda_graph(false);
  EXPECT_EQ(rows_differing(rf, run_gpu(f, ids, dec, kPrompt)), 0) << "fp8 cache: graph logits differ from eager";
}

// What a pre-RoPE method on this geometry does not run: refused with a message, before any work.
TEST_F(GpuPreRopeWindow, RefusalsNameWhatIsMissing) {
  gpu::GpuTransformer g = make_gpu(kTokenSelect);
  EXPECT_FALSE(g.batches_decode());
  const int64_t caps[] = {64, 64};
  g.reserve_sequences(caps);
  auto s1 = g.new_sequence(64), s2 = g.new_sequence(64);
  gpu::GpuSequence* seqs[] = {s1.get(), s2.get()};
  const int32_t ids[] = {5, 6};
  std::vector<float> lg;
  std::string e = test::error_of([&] { g.decode_batch(seqs, ids, lg); });
  EXPECT_TRUE(contains(e, "keeps per-sequence decode state") && contains(e, "one sequence at a time")) << e;
  gpu::GpuOptions o;
  o.chunk = kChunk;
  o.attn = kTokenSelect;
  o.kv_offload.on = true;
  e = test::error_of([&] { gpu::GpuTransformer x(config(), gpu::DeviceWeights::random(config(), 1, nullptr), o); });
  EXPECT_TRUE(contains(e, "--kv-offload needs")) << e;
}

}  // namespace
}  // namespace longctx
#endif  // LONGCTX_WITH_GPU

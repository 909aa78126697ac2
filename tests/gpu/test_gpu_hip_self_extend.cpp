// test_gpu_hip_self_extend.cpp: HiP with Self-Extend on the GPU
// (methods/self_extend/hip_self_extend_gpu.h) against the CPU engine's HiP + Self-Extend.
//
// (1) The GPU model vs the CPU engine on the default model's attention geometry (9 query / 3 KV
//     heads, head_dim 64; random weights, trained context 256), `hip=k=64,window=32,sinks=4,
//     refresh=4,dense_layers=0,self_extend=4:64` (every step past 100 keys sparse, W = 64 >
//     HiP's window): a 700-token prompt in chunks of 256 (ragged last chunk) and of 100 (chunks
//     that start off the 64-row grid; the first chunks' far parts have rows before W), then 12
//     teacher-forced decode steps (three mask refreshes, cached masks between). Logits within the
//     bf16 tolerance (test_util.h), argmax equal on clear rows. The GPU estimator may rank near
//     ties differently than the CPU's (kernels/cuda/hip_estimate.h), which moves a few blocks;
//     the logit tolerance covers that on this model (printed: worst |diff| / tol).
//     The sparse path ran: where HiP + Self-Extend's logits differ from dense Self-Extend's
//     beyond noise, the GPU's are much closer to the CPU's HiP + Self-Extend than to dense.
//     The decode steps replay from CUDA graphs (decode_graph_safe). With self_extend=4:160 (W past
//     HiP's dense threshold of 100 keys), a 120-token prompt and 60 decode steps: the tile below
//     128 keys decodes eagerly (decode_graph_min_kv 100), the next replays and crosses W (far parts
//     with no keys before it, LSE -inf); graph decode bit-equal to eager decode, both within the
//     tolerance of the CPU engine.
// (2) The GPU side's properties and what stays refused (no GPU needed).
//   build/tests/gpu/test_gpu_hip_self_extend   (also part of test_gpu)
#ifdef LONGCTX_WITH_GPU
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "gpu/device_weights.h"
#include "gpu/gpu_transformer.h"
#include "methods/gpu_method.h"
#include "methods/method.h"
#include "model/tiny_model.h"
#include "model/transformer.h"
#include "model_rows.h"
#include "test_util.h"
#include "util/thread_pool.h"

namespace longctx {
namespace {

using test::contains;
using test::random_ids;
using test::Rows;

constexpr int64_t kRows = 4;  // prefill logit rows compared
const std::string kSpec = "hip=k=64,window=32,sinks=4,refresh=4,dense_layers=0,self_extend=4:64";

test::TinyModel& fixture() {
  static test::TinyModel* f = [] {
    TinyModelSpec s;  // SmolLM2-135M's attention geometry: 9/3 heads, head_dim 64
    s.n_layer = 2;
    s.n_embd = 576;
    s.n_head = 9;
    s.n_kv_head = 3;
    s.n_ff = 1024;
    s.context_length = 256;
    s.seed = 43;
    return test::write_tiny("hip-self-extend", s).release();
  }();
  return *f;
}

// graph false: decode eagerly; captures: the decode graphs captured (the steps replayed from them).
Rows run_gpu(const std::string& spec, int64_t chunk, const std::vector<int32_t>& ids,
             const std::vector<int32_t>& decode, bool graph = true, int64_t* captures = nullptr) {
  test::TinyModel& f = fixture();
  gpu::GpuOptions o;
  o.chunk = chunk;
  o.attn = spec;
  gpu::GpuTransformer g(f.cfg, gpu::DeviceWeights::upload(f.cfg, ModelWeights::load(*f.file, f.cfg), nullptr), o);
  g.set_cuda_graph(graph);
  g.reset(int64_t(ids.size() + decode.size()));
  Rows r = test::logit_rows(g, ids, decode, kRows);
  if (captures) *captures = g.graph_captures();
  return r;
}

Rows run_cpu(const std::string& spec, int64_t chunk, const std::vector<int32_t>& ids,
             const std::vector<int32_t>& decode) {
  test::TinyModel& f = fixture();
  Transformer cpu(f.cfg, ModelWeights::load(*f.file, f.cfg), make_attention_method(spec, test::ctx_of(f.cfg)),
                  global_pool());
  auto seq = cpu.new_sequence(int64_t(ids.size() + decode.size()));
  cpu.attach(seq.get());
  Rows r = test::logit_rows(cpu, ids, decode, kRows, chunk);  // the GPU's chunks
  cpu.attach(nullptr);
  return r;
}

void check_model(int64_t chunk) {
  const int32_t vocab = fixture().cfg.vocab_size;
  const auto ids = random_ids(700, vocab, 61), dec = random_ids(12, vocab, 62);
  int64_t captures = 0;
  const Rows gpu = run_gpu(kSpec, chunk, ids, dec, true, &captures), cpu = run_cpu(kSpec, chunk, ids, dec);
  EXPECT_GT(captures, 0) << "the decode steps did not replay from a CUDA graph";
  const std::string what = "chunk " + std::to_string(chunk) + ": GPU vs CPU HiP + Self-Extend";
  test::expect_rows_match(cpu, gpu, what);
  test::expect_method_path_ran(gpu, cpu, run_gpu("dense=self_extend=4:64", chunk, ids, dec), what);
}

TEST(GpuHipSelfExtendModel, MatchesCpuEngineChunks256) {
  REQUIRE_GPU();
  check_model(256);
}

TEST(GpuHipSelfExtendModel, MatchesCpuEngineChunks100) {
  REQUIRE_GPU();
  check_model(100);
}

TEST(GpuHipSelfExtendModel, GraphDecodeAcrossWindowEqualsEager) {
  REQUIRE_GPU();
  const std::string spec = "hip=k=64,window=32,sinks=4,refresh=4,dense_layers=0,self_extend=4:160";
  const int32_t vocab = fixture().cfg.vocab_size;
  const auto ids = random_ids(120, vocab, 63), dec = random_ids(60, vocab, 64);
  int64_t captures = 0, eager_captures = -1;
  const Rows graph = run_gpu(spec, 256, ids, dec, true, &captures);
  const Rows eager = run_gpu(spec, 256, ids, dec, false, &eager_captures);
  EXPECT_EQ(captures, 1);  // n_kv 129..180: one tile replays; 121..128 decode eagerly (HiP's threshold)
  EXPECT_EQ(eager_captures, 0);
  test::expect_rows_bit_equal(graph, eager, captures, "HiP + Self-Extend graph decode across W");
  test::expect_rows_match(run_cpu(spec, 256, ids, dec), graph,
                          "GPU (graph decode across W) vs CPU HiP + Self-Extend");
}

TEST(GpuHipSelfExtendParse, GpuSideAndRefusals) {
  const MethodContext mc = test::ctx_of(fixture().cfg);
  const auto m = make_attention_method(kSpec, mc);
  EXPECT_EQ(gpu_method_problem(*m, mc), "");
  const auto g = make_gpu_method(*m, mc);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(g->attends());
  EXPECT_TRUE(g->decodes());
  EXPECT_TRUE(g->decode_graph_safe());
  EXPECT_EQ(g->decode_graph_min_kv(), 32 + 4 + 64);  // HiP's dense threshold: window + sinks + k
  EXPECT_FALSE(g->decode_reads_fp8());
  EXPECT_TRUE(g->keeps_sequence_state());
  // HiP's index buffers on top of dense Self-Extend's.
  const GpuShape shape{.model = mc, .chunk = 256, .capacity = 4096};
  EXPECT_GT(g->device_bytes(shape), make_gpu_method(*make_attention_method("dense=self_extend=4:64", mc), mc)
                                         ->device_bytes(shape));
  // Prefill HiP + Self-Extend, decode dense Self-Extend (decision 7's composition) runs.
  EXPECT_EQ(gpu_method_problem(*make_attention_method("prefill:" + kSpec + ";decode:dense=self_extend=4:64", mc), mc),
            "");
  // Still refused: different G:W per phase; a head_dim the sparse kernels lack.
  std::string e = gpu_method_problem(
      *make_attention_method("prefill:" + kSpec + ";decode:dense=self_extend=8:64", mc), mc);
  EXPECT_TRUE(contains(e, "the same self_extend=G:W in both phases")) << e;
  MethodContext d32 = mc;
  d32.head_dim = 32;
  e = gpu_method_problem(*make_attention_method(kSpec, d32), d32);
  EXPECT_TRUE(contains(e, "head_dim 64, 128 or 256") && contains(e, "has head_dim 32")) << e;
}

}  // namespace
}  // namespace longctx
#endif  // LONGCTX_WITH_GPU

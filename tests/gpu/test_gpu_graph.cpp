// test_gpu_graph.cpp: decode by CUDA graph replay (GpuTransformer's default) against the same
// decode step issued eagerly (set_cuda_graph(false)): the logits must be bit-identical, step
// after step, since both run the same kernels with the same split-KV plan. Cases: a tiny Qwen2
// file (Q/K/V bias, head dim 128), a random SmolLM2 geometry (head dim 64), and a random
// Llama-3-8B layer decoding across a change of the decode kernel's tiles-per-split (the graph
// is re-captured when the KV length enters a new 64-key tile), then reset() with a new prompt,
// a larger capacity (KV block reallocated: the graph must follow the new pointers) and decode
// steps without logits mixed in. Skipped without a Hopper GPU.
//   build-gpumodel/tests/gpu/test_gpu --gtest_filter='GpuGraph*'
#ifdef LONGCTX_WITH_GPU
#include <algorithm>
#include <cstring>
#include <random>

#include "gpu/device_weights.h"
#include "gpu/geometry.h"
#include "gpu/gpu_transformer.h"
#include "loader/model_file.h"
#include "model/tiny_model.h"
#include "model/weights.h"
#include "test_util.h"

namespace longctx {
namespace {

using test::random_ids;

// One sequence: prefill `n_prompt` ids, then `n_decode` greedy steps; every `skip_every`-th
// step (0 = never) is run without logits (the token after it is then the previous one again).
struct Run {
  int64_t n_prompt = 0, n_decode = 0, capacity = 0;
  int skip_every = 0;
  uint32_t seed = 1;
};

struct Trace {
  std::vector<std::vector<float>> logits;  // per step with logits
  std::vector<int32_t> tokens;
};

Trace run(gpu::GpuTransformer& g, const Run& r) {
  const int32_t V = int32_t(g.config().vocab_size);
  g.reset(r.capacity);
  Trace t;
  std::vector<float> lg;
  g.forward(random_ids(r.n_prompt, V, r.seed), 1, &lg);
  int32_t tok = int32_t(std::max_element(lg.begin(), lg.end()) - lg.begin());
  for (int64_t s = 0; s < r.n_decode; ++s) {
    if (r.skip_every && s % r.skip_every == r.skip_every - 1) {
      g.forward(std::span(&tok, 1), 0, nullptr);
      continue;
    }
    g.forward(std::span(&tok, 1), 1, &lg);
    t.logits.push_back(lg);
    tok = int32_t(std::max_element(lg.begin(), lg.end()) - lg.begin());
    t.tokens.push_back(tok);
  }
  EXPECT_EQ(g.size(), r.n_prompt + r.n_decode);
  return t;
}

// Eager and graph traces of the same runs on one model (same weights), compared bit for bit.
void expect_graph_equals_eager(gpu::GpuTransformer& g, const std::vector<Run>& runs, const std::string& label) {
  g.set_cuda_graph(false);
  std::vector<Trace> eager;
  for (const Run& r : runs) eager.push_back(run(g, r));
  const int64_t captures0 = g.graph_captures();
  EXPECT_EQ(captures0, 0) << "eager decode captured a graph";
  g.set_cuda_graph(true);
  for (size_t i = 0; i < runs.size(); ++i) {
    const Trace gr = run(g, runs[i]);
    ASSERT_EQ(gr.logits.size(), eager[i].logits.size());
    int differing = 0;
    for (size_t s = 0; s < gr.logits.size(); ++s) {
      const auto& a = eager[i].logits[s];
      const auto& b = gr.logits[s];
      ASSERT_EQ(a.size(), b.size());
      if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0 && differing++ < 3)
        ADD_FAILURE() << label << " run " << i << " step " << s << ": graph logits differ from eager";
    }
    EXPECT_EQ(differing, 0) << label << " run " << i;
    EXPECT_EQ(gr.tokens, eager[i].tokens) << label << " run " << i;
  }
  EXPECT_GT(g.graph_captures(), 0) << "the graph path never captured";
  std::printf("[ gpu     ] %s: %zu runs, graph == eager bit for bit, %lld captures\n", label.c_str(), runs.size(),
              (long long)g.graph_captures());
}

TEST(GpuGraph, TinyQwen2BiasD128) {
  REQUIRE_GPU();
  TinyModelSpec s;
  s.arch = "qwen2";
  s.rope_scaling = "llama3";
  s.n_layer = 2;
  s.n_embd = 512;
  s.n_head = 4;  // head dim 128, GQA 4:1
  s.n_kv_head = 1;
  s.n_ff = 1024;
  s.seed = 21;
  const auto dir = test::temp_dir("graph-qwen2");
  write_tiny_model(dir.string(), s);
  auto file = open_model_file((dir / "tiny.gguf").string());
  const ModelConfig cfg = ModelConfig::from_model_file(*file);
  gpu::GpuTransformer g(cfg, gpu::DeviceWeights::upload(cfg, ModelWeights::load(*file, cfg), nullptr), {64});
  // A one-token prompt (decode from position 0), a prompt ending mid-tile, then steps without logits.
  expect_graph_equals_eager(g, {{1, 70, 80, 0, 1}, {100, 60, 200, 0, 2}, {130, 40, 200, 5, 3}}, "tiny qwen2 d128");
  std::filesystem::remove_all(dir);
}

TEST(GpuGraph, SmolLM2GeometryD64) {
  REQUIRE_GPU();
  const ModelConfig cfg = gpu::geometry_config("smollm2-135m:3");
  gpu::GpuTransformer g(cfg, gpu::DeviceWeights::random(cfg, 5, nullptr), {256});
  expect_graph_equals_eager(g, {{300, 150, 512, 0, 4}, {40, 100, 4096, 7, 5}}, "random smollm2-135m:3");
}

// 8380 + 100 keys cross 8448 = 132 tiles of 64: on H100/H200 the plan's tiles per split go from
// 2 to 3 there (and the split count changes at every tile before). Then a shorter prompt after
// reset(), and a capacity that reallocates the KV block and the decode workspace.
TEST(GpuGraph, Llama3GeometryAcrossSplitPlans) {
  REQUIRE_GPU();
  const ModelConfig cfg = gpu::geometry_config("llama3-8b:1");
  gpu::GpuTransformer g(cfg, gpu::DeviceWeights::random(cfg, 6, nullptr), {4096});
  expect_graph_equals_eager(g, {{8380, 100, 8480, 0, 6}, {500, 200, 8480, 0, 7}, {20000, 70, 20100, 9, 8}},
                            "random llama3-8b:1");
}

}  // namespace
}  // namespace longctx
#endif  // LONGCTX_WITH_GPU

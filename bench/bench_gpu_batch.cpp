// bench_gpu_batch.cpp: aggregate decode tokens/s of several sequences on the GPU
// (GpuTransformer::decode_batch) vs the single-sequence decode, with the fraction of the
// HBM-bandwidth bound reached.
//
// What: a random-weights geometry (gpu/geometry.h; smollm2-135m is the default model's shape),
// `n_max` sequences of `context` prompt tokens each prefilled into one KV pool, then for each
// batch size n in `sizes`: `steps` batched decode steps of the first n sequences (after 3 warm-up
// steps that capture the step's graph), timed by the wall clock (each step ends in its logits'
// copy, a stream sync). The single-sequence baseline (reset + forward of one token at a time, the
// path generate() takes) runs first on the same model, same context.
// Bound: one step must read every weight the step uses once (all but the token embedding table
// when it is not the LM head) plus each sequence's cached K/V (length x bytes per token); at the
// card's peak HBM bandwidth (H100 SXM 3.35 TB/s, H200 4.8 TB/s) that takes bytes / bandwidth;
// fraction = that / measured step time.
// Run: longctx_bench_gpu_batch GEOMETRY CONTEXT STEPS SIZES(csv) [bf16|fp8] > result.json
//   e.g. longctx_bench_gpu_batch llama3-8b 4096 32 1,8,32,64
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/device_weights.h"
#include "gpu/geometry.h"
#include "gpu/gpu_transformer.h"
#include "gpu/memory_plan.h"
#include "kernels/cuda/runtime.h"
#include "util/error.h"

namespace {

using namespace longctx;
using Clock = std::chrono::steady_clock;

constexpr int kWarmupSteps = 3;  // the first eager step, the capture, one replay

double peak_hbm_bytes_per_s(const std::string& device) {
  if (device.find("H200") != std::string::npos) return 4.8e12;
  if (device.find("H100") != std::string::npos) return 3.35e12;
  return 0;  // unknown card: no bound reported
}

std::vector<int32_t> ids(int64_t n, int32_t vocab, uint32_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  uint32_t x = seed * 2654435761u + 1;
  for (auto& t : v) {
    x = x * 1664525u + 1013904223u;
    t = int32_t((x >> 8) % uint32_t(vocab));
  }
  return v;
}

int run(int argc, char** argv) {
  if (argc < 5) fail("usage: longctx_bench_gpu_batch GEOMETRY CONTEXT STEPS SIZES(csv) [bf16|fp8]");
  const std::string geometry = argv[1];
  const int64_t context = std::atoll(argv[2]), steps = std::atoll(argv[3]);
  std::vector<int> sizes;
  std::stringstream ss(argv[4]);
  for (std::string t; std::getline(ss, t, ',');) sizes.push_back(std::atoi(t.c_str()));
  const gpu::KvCacheType kv = gpu::parse_kv_cache(argc > 5 ? argv[5] : "bf16");
  int n_max = 0;
  for (int n : sizes) n_max = std::max(n_max, n);
  if (context <= 0 || steps <= 0 || n_max <= 0) fail("context, steps and sizes must be positive");

  const ModelConfig cfg = gpu::geometry_config(geometry);
  gpu::GpuTransformer g(cfg, gpu::DeviceWeights::random(cfg, 1, nullptr), {.chunk = std::min<int64_t>(context, 8192), .kv_cache = kv});
  const std::string device = cuda::device_info(0).name;
  const int32_t V = int32_t(cfg.vocab_size);
  const int64_t cap = context + kWarmupSteps + steps * int64_t(sizes.size() + 1) + 1;
  // Bytes one step reads: the weights it uses, plus each sequence's K/V.
  const double embd = cfg.tied_embeddings ? 0 : double(cfg.vocab_size) * double(cfg.n_embd) * 2;
  const double weights = double(g.weights().bytes()) - embd;
  const double kv_tok = double(gpu::kv_bytes_per_token(cfg, kv));
  const double bw = peak_hbm_bytes_per_s(device);
  auto bound_frac = [&](double step_s, int n, double len) {
    return bw > 0 ? (weights + n * len * kv_tok) / bw / step_s : 0.0;
  };

  std::printf("{\"bench\": \"gpu-batch\", \"device\": \"%s\", \"geometry\": \"%s\", \"kv_cache\": \"%s\", "
              "\"context\": %lld, \"steps\": %lld, \"weight_bytes_read\": %.0f, \"kv_bytes_per_token\": %.0f, "
              "\"peak_hbm_bytes_per_s\": %.3g,\n \"results\": [\n",
              device.c_str(), geometry.c_str(), gpu::kv_cache_name(kv), (long long)context, (long long)steps, weights,
              kv_tok, bw);
  // The single-sequence path (generate()'s decode): one token per forward, graph replay.
  std::vector<float> lg;
  g.reset(cap);
  g.forward(ids(context, V, 1), 1, &lg);
  int32_t tok = 1;
  for (int s = 0; s < kWarmupSteps; ++s) g.forward(std::span(&tok, 1), 1, &lg);
  auto t0 = Clock::now();
  for (int64_t s = 0; s < steps; ++s) g.forward(std::span(&tok, 1), 1, &lg);
  double dt = std::chrono::duration<double>(Clock::now() - t0).count() / double(steps);
  std::printf("  {\"path\": \"single\", \"n_seq\": 1, \"step_ms\": %.4f, \"tokens_per_s\": %.1f, \"hbm_bound_fraction\": %.3f},\n",
              1e3 * dt, 1.0 / dt, bound_frac(dt, 1, double(context)));
  const double single_tps = 1.0 / dt;

  // n_max sequences in one pool, each prefilled with `context` tokens.
  std::vector<int64_t> caps(size_t(n_max), cap);
  g.reserve_sequences(caps);
  std::vector<std::unique_ptr<gpu::GpuSequence>> seqs;
  const auto tp = Clock::now();
  for (int i = 0; i < n_max; ++i) {
    seqs.push_back(g.new_sequence(cap));
    g.attach(seqs.back().get());
    g.forward(ids(context, V, uint32_t(i + 2)), 1, &lg);
    g.attach(nullptr);
  }
  const double prefill_s = std::chrono::duration<double>(Clock::now() - tp).count();
  for (size_t k = 0; k < sizes.size(); ++k) {
    const int n = sizes[k];
    std::vector<gpu::GpuSequence*> step;
    for (int i = 0; i < n; ++i) step.push_back(seqs[size_t(i)].get());
    std::vector<int32_t> tokens(size_t(n), 1);
    for (int s = 0; s < kWarmupSteps; ++s) g.decode_batch(step, tokens, lg);
    double len = 0;
    for (auto* s : step) len += double(s->size());
    len /= n;
    t0 = Clock::now();
    for (int64_t s = 0; s < steps; ++s) g.decode_batch(step, tokens, lg);
    dt = std::chrono::duration<double>(Clock::now() - t0).count() / double(steps);
    std::printf("  {\"path\": \"batch\", \"n_seq\": %d, \"mean_len\": %.0f, \"step_ms\": %.4f, \"tokens_per_s\": %.1f, "
                "\"vs_single\": %.2f, \"hbm_bound_fraction\": %.3f}%s\n",
                n, len, 1e3 * dt, n / dt, n / dt / single_tps, bound_frac(dt, n, len + steps / 2.0),
                k + 1 < sizes.size() ? "," : "");
  }
  std::printf(" ], \"prefill_s_all\": %.2f, \"batch_graph_captures\": %lld}\n", prefill_s,
              (long long)g.batch_graph_captures());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const longctx::Error& e) {
    std::fprintf(stderr, "longctx: %s\n", e.what());
    return 1;
  }
}

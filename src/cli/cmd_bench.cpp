// cmd_bench.cpp: `longctx bench model`: prefill and decode throughput at given prompt lengths.
//
//   longctx bench model --lengths 512,4k --decode 32 --json bench/results/cpu.json
//   longctx bench attention --prefill 8192 --decode 131072      (CUDA builds, on a GPU)
//   longctx bench model --device cuda --random-weights llama3-8b --lengths 32k,128k --decode 32
// The prompt is natural text (a repeated paragraph) tokenized by the model's tokenizer and cut
// to exactly L tokens (random-weight models have no tokenizer: deterministic pseudo-random ids);
// decode runs --decode greedy tokens with EOS ignored. On the GPU a short warm-up run comes
// first (kernel setup, cuBLASLt plans), and the results add model FLOPs utilisation and the
// device memory in use. FLOPs of a prefill of S tokens: 2 * P * S for the projections (P = the
// Q/K/V/O and MLP weights of all layers; embedding and the last-position LM head left out)
// plus causal attention 2 * 2 * n_layer * n_head * head_dim * S^2 / 2 (dense-equivalent: with a
// sparse --attn the same count is used, so MFU and TFLOP/s are "effective" rates).
// On the GPU each result also has the GPU time of prefill attention and of the sparse index
// builds (CUDA events, from the last run of that length): with --attn minference=CFG this shows
// how much of the prefill is attention and how much of that the index costs.
//   longctx bench model --device cuda --random-weights llama3-8b --attn minference=configs/minference/Llama-3-8B-Instruct-262k.json --lengths 128k
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/geometry_option.h"
#include "cli/options.h"
#include "longctx/engine.h"
#include "methods/registry.h"
#include "util/error.h"
#ifdef LONGCTX_WITH_GPU
#include "gpu/gpu_offload.h"
#include "gpu/gpu_stats.h"
#endif
#ifdef LONGCTX_WITH_CUDA_BENCH
#include "bench/bench_attention.h"
#endif

namespace longctx::cli {

namespace {

constexpr const char* kFiller =
    "The history of the city begins with a small settlement on the river bank. Traders came by boat, "
    "and over the centuries the market grew into a town with walls, churches and a university. ";

int64_t parse_length(const std::string& s) {
  if (s.empty()) fail("empty length in --lengths");
  size_t pos = 0;
  int64_t v = 0;
  try {
    v = std::stoll(s, &pos);
  } catch (...) {
    fail("bad length '{}' in --lengths (expected e.g. 512, 4k, 1m)", s);
  }
  std::string suf = s.substr(pos);
  if (suf == "k" || suf == "K") v *= 1024;
  else if (suf == "m" || suf == "M") v *= 1024 * 1024;
  else if (!suf.empty()) fail("bad length '{}' in --lengths (expected e.g. 512, 4k, 1m)", s);
  if (v <= 0) fail("length '{}' in --lengths must be positive", s);
  return v;
}

struct BenchArgs {
  std::string model, lengths = "512,4k", json_path, attn = "dense", device = "cpu", random_weights;
  int decode = 32, threads = 0, repeats = 1;
  int64_t gpu_chunk = 0;
  int64_t chunk = LoadOptions{}.prefill_chunk;  // CPU prefill chunk
  bool synthetic_qk = false;  // GPU: Q/K replaced by structured synthetic vectors after RoPE
  std::string kv_cache = "bf16";  // GPU KV cache: bf16 or fp8
  std::string attn_tiles = "bf16";  // GPU sparse prefill K/V tiles: bf16 or fp8 (LoadOptions::attn_tiles)
  KvOffloadArgs offload;          // GPU: --kv-offload, --kv-host-layers
  std::string cpu_weights = kCliCpuWeights;
};

double matmul_params(const ModelConfig& c) {
  const double E = c.n_embd, Q = double(c.n_head) * c.head_dim, KV = double(c.n_kv_head) * c.head_dim;
  return double(c.n_layer) * (E * (Q + 2 * KV) + Q * E + 3 * E * double(c.n_ff));
}

double prefill_flops(const ModelConfig& c, double s) {
  return 2.0 * matmul_params(c) * s + 2.0 * 2.0 * c.n_layer * c.n_head * double(c.head_dim) * s * s / 2.0;
}

// Dense bf16 tensor-core peak from the datasheets (SXM parts), for utilisation; 0 = unknown.
double peak_bf16_flops(const std::string& device) {
  if (device.find("H100") != std::string::npos && device.find("PCIe") != std::string::npos) return 756e12;
  if (device.find("H100") != std::string::npos || device.find("H200") != std::string::npos) return 989.4e12;
  return 0;
}

// Random-weight models have no tokenizer: ids from a fixed LCG, spread over the vocabulary.
std::vector<int32_t> synthetic_ids(int64_t n, int32_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (auto& id : ids) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = int32_t((x >> 33) % uint64_t(vocab));
  }
  return ids;
}

std::vector<int64_t> parse_lengths(const std::string& list) {
  std::vector<int64_t> lengths;
  for (size_t p = 0; p <= list.size();) {
    size_t q = list.find(',', p);
    if (q == std::string::npos) q = list.size();
    lengths.push_back(parse_length(list.substr(p, q - p)));
    p = q + 1;
  }
  return lengths;
}

void run(const BenchArgs& a) {
  const std::vector<int64_t> lengths = parse_lengths(a.lengths);
  const bool random = !a.random_weights.empty();
  int64_t longest = 0;
  for (int64_t L : lengths) longest = std::max(longest, L);
  LoadOptions lo;
  lo.model_path = a.model;
  lo.n_threads = a.threads;
  lo.attn = a.attn;
  lo.device = a.device;
  lo.random_weights = a.random_weights;
  lo.gpu_chunk = a.gpu_chunk;
  lo.synthetic_qk = a.synthetic_qk;
  lo.kv_cache = a.kv_cache;
  lo.attn_tiles = a.attn_tiles;
  lo.kv_offload = a.offload.on;
  lo.kv_host_layers = a.offload.host_layers;
  lo.kv_page_table = a.offload.page_table;
  lo.kv_offload_residual = a.offload.residual;
  lo.cpu_weights = a.cpu_weights;
  lo.prefill_chunk = a.chunk;
  // A random-weight geometry has no trained context to respect: allow the longest run.
  if (random) lo.max_context = longest + a.decode;
  auto eng = Engine::load(lo);
  const Tokenizer& tok = eng->tokenizer();
  const std::vector<int32_t> unit = random ? std::vector<int32_t>{} : tok.encode(kFiller, false, false);
  auto make_prompt = [&](int64_t L) {
    if (random) return synthetic_ids(L, eng->config().vocab_size);
    std::vector<int32_t> prompt;
    if (tok.adds_bos() && tok.bos_id() >= 0) prompt.push_back(tok.bos_id());
    while (int64_t(prompt.size()) < L) prompt.insert(prompt.end(), unit.begin(), unit.end());
    prompt.resize(size_t(L));
    return prompt;
  };

  // On the GPU when the engine made a GpuTransformer (--device cuda, or auto with a usable GPU).
  std::string device = "cpu";
  bool gpu = false;
#ifdef LONGCTX_WITH_GPU
  if (a.device != "cpu" && !gpu::last_gpu_memory_stats().device.empty()) {
    gpu = true;
    device = gpu::last_gpu_memory_stats().device;
  }
#endif
  const double peak = gpu ? peak_bf16_flops(device) : 0;
  nlohmann::json out;
  out["benchmark"] = "model";
  out["model"] = eng->config().name;
  out["config"] = eng->config().summary();
  out["attn"] = a.attn;
  out["threads"] = a.threads > 0 ? a.threads : int(std::thread::hardware_concurrency());
  out["device"] = device;
  if (random) out["random_weights"] = a.random_weights;
  if (a.synthetic_qk) out["synthetic_qk"] = true;
  if (gpu) out["kv_cache_type"] = a.kv_cache;  // the CPU path keeps fp32 K/V
  if (gpu) out["attn_tiles"] = a.attn_tiles;
  if (gpu && a.offload.on) out["kv_offload"] = {{"host_layers_asked", a.offload.host_layers}};
  if (!gpu) out["cpu_weights"] = a.cpu_weights;
  out["matmul_params"] = matmul_params(eng->config());
  if (peak > 0) out["peak_bf16_flops"] = peak;
  out["results"] = nlohmann::json::array();
  SamplingParams sp;
  sp.max_tokens = a.decode;
  sp.stop_at_eos = false;
  if (gpu) {  // warm-up: kernel attributes, cuBLASLt plans and module loads stay out of the numbers
    SamplingParams wsp = sp;
    wsp.max_tokens = 2;
    eng->generate(make_prompt(std::min<int64_t>(lengths.front(), 4096)), wsp);
  }
  // MFU and GPU memory only on the GPU (no peak or device memory to relate to on the CPU). A sparse
  // --attn does fewer FLOPs than the dense count, so its column is the dense-equivalent rate
  // ("eff. MFU", over 100% when sparsity pays off more than the dense kernel's gap to peak).
  const bool dense_flops = a.attn.empty() || a.attn == "dense";
  if (gpu && !dense_flops) out["mfu_dense_equivalent"] = true;
  if (gpu)
    std::fprintf(stderr, "%-8s %12s %14s %9s %12s %14s %12s\n", "length", "prefill s", "prefill tok/s",
                 dense_flops ? "MFU" : "eff. MFU",
                 "decode s", "decode tok/s", "GPU mem GiB");
  else
    std::fprintf(stderr, "%-8s %12s %14s %12s %14s\n", "length", "prefill s", "prefill tok/s", "decode s",
                 "decode tok/s");
  for (int64_t L : lengths) {
    const std::vector<int32_t> prompt = make_prompt(L);
    double best_prefill = 1e30, best_decode = 1e30;
    for (int r = 0; r < a.repeats; ++r) {
      const auto res = eng->generate(prompt, sp);
      best_prefill = std::min(best_prefill, res.prefill_s);
      best_decode = std::min(best_decode, res.decode_s);
    }
    const double ptps = double(L) / best_prefill;
    const double dtps = a.decode > 1 ? double(a.decode - 1) / best_decode : 0;
    const double flops = prefill_flops(eng->config(), double(L));
    const double mfu = peak > 0 ? flops / best_prefill / peak : 0;
    nlohmann::json r = {{"length", L},
                        {"prefill_s", best_prefill},
                        {"prefill_tokens_per_s", ptps},
                        {"prefill_flops", flops},
                        {"prefill_tflops_per_s", flops / best_prefill / 1e12},
                        {"decode_tokens", a.decode},
                        {"decode_s", best_decode},
                        {"decode_tokens_per_s", dtps}};
    double mem_gib = 0;
    std::string attn_line;
#ifdef LONGCTX_WITH_GPU
    if (gpu) {
      const gpu::GpuMemoryStats m = gpu::last_gpu_memory_stats();
      constexpr double kGiB = double(1ull << 30);
      mem_gib = double(m.device_used_peak) / kGiB;
      r["mfu"] = mfu;
      r["gpu_memory_gib"] = {{"weights", double(m.weights) / kGiB},
                             {"kv_cache", double(m.kv) / kGiB},
                             {"activations", double(m.arena) / kGiB},
                             {"decode_workspace", double(m.decode_ws) / kGiB},
                             {"layer_major_stage", double(m.stage) / kGiB},
                             {"sparse_prefill", double(m.sparse) / kGiB},
                             {"device_used_peak", mem_gib},
                             {"device_total", double(m.device_total) / kGiB}};
      const gpu::GpuPrefillStats ps = gpu::last_gpu_prefill_stats();
      r["prefill_attention"] = {{"attn", ps.attn},
                                {"attention_s", ps.attention_s},
                                {"index_s", ps.index_s},
                                {"dense_calls", ps.dense_calls},
                                {"sparse_calls", ps.sparse_calls},
                                {"index_ranges", ps.index_ranges},
                                {"index_cols", ps.index_cols},
                                {"sparse_gib", double(ps.sparse_bytes) / kGiB}};
      attn_line = fmt::format("         prefill attention {:.3f} s (index {:.3f} s), {} dense / {} sparse layer-chunks",
                              ps.attention_s, ps.index_s, ps.dense_calls, ps.sparse_calls);
      if (const gpu::GpuOffloadStats os = gpu::last_gpu_offload_stats(); os.on) {
        // the last run's decode: the host layers' caches, refresh steps (HiP re-estimates) vs cached steps
        auto part = [](const gpu::OffloadStepCounters& c) {
          return nlohmann::json{{"steps", c.steps},
                                {"kv_reads", c.kv.reads},
                                {"kv_misses", c.kv.misses},
                                {"kv_hit_ratio", c.kv.hit_ratio()},
                                {"keys_reads", c.keys.reads},
                                {"keys_misses", c.keys.misses},
                                {"keys_hit_ratio", c.keys.hit_ratio()},
                                {"pcie_bytes", c.pcie_bytes},
                                {"pcie_bytes_per_step", c.steps ? double(c.pcie_bytes) / double(c.steps) : 0.0}};
        };
        r["kv_offload"] = {{"host_layers", os.host_layers},
                           {"hbm_layers", os.hbm_layers},
                           {"host_gib", double(os.host_bytes) / kGiB},
                           {"gpu_cache_gib", double(os.cache_bytes) / kGiB},
                           {"hbm_kv_gib", double(os.hbm_kv_bytes) / kGiB},
                           {"stage_gib", double(os.stage_bytes) / kGiB},
                           {"page_table", os.page_table},
                           {"residual_host_gib", double(os.residual_host_bytes) / kGiB},
                           {"refresh", part(os.refresh)},
                           {"cached", part(os.cached)}};
        attn_line += fmt::format(
            "\n         kv offload: {} layers in host memory ({:.1f} GiB), {} in HBM ({:.1f} GiB), caches {:.2f} GiB "
            "({}-map page tables), "
            "prefill staging {:.2f} GiB (residual stream {:.1f} GiB in host memory); "
            "K/V cache hits {:.2f}% cached / {:.2f}% refresh steps, keys cache {:.2f}%; PCIe {:.1f} KB cached / "
            "{:.1f} MB refresh step",
            os.host_layers, double(os.host_bytes) / kGiB, os.hbm_layers, double(os.hbm_kv_bytes) / kGiB,
            double(os.cache_bytes) / kGiB, os.page_table, double(os.stage_bytes) / kGiB, double(os.residual_host_bytes) / kGiB,
            100 * os.cached.kv.hit_ratio(), 100 * os.refresh.kv.hit_ratio(),
            100 * os.refresh.keys.hit_ratio(),
            os.cached.steps ? double(os.cached.pcie_bytes) / double(os.cached.steps) / 1e3 : 0.0,
            os.refresh.steps ? double(os.refresh.pcie_bytes) / double(os.refresh.steps) / 1e6 : 0.0);
      }
    }
#endif
    if (gpu)
      std::fprintf(stderr, "%-8lld %12.3f %14.1f %8.1f%% %12.3f %14.1f %12.1f\n", (long long)L, best_prefill, ptps,
                   100 * mfu, best_decode, dtps, mem_gib);
    else
      std::fprintf(stderr, "%-8lld %12.3f %14.1f %12.3f %14.1f\n", (long long)L, best_prefill, ptps, best_decode,
                   dtps);
    if (!attn_line.empty()) std::fprintf(stderr, "%s\n", attn_line.c_str());
    out["results"].push_back(r);
  }
  const std::string s = out.dump(2);
  if (a.json_path.empty()) {
    std::printf("%s\n", s.c_str());
  } else {
    std::ofstream f(a.json_path);
    if (!f) fail("cannot write '{}'", a.json_path);
    f << s << "\n";
  }
}

}  // namespace

void register_bench(CLI::App& app) {
  auto* b = app.add_subcommand("bench", "Benchmarks (JSON output)");
  b->require_subcommand(1);
  auto args = std::make_shared<BenchArgs>();
  auto* m = b->add_subcommand("model", "Prefill and decode tokens/s of a model at given prompt lengths");
  m->add_option("-m,--model", args->model, "Model (default: SmolLM2-135M-Instruct)");
  m->add_option("--lengths", args->lengths, "Prompt lengths, e.g. 512,4k")
      ->check(detail::quiet_validator([](std::string& s) -> std::string {
        try {
          (void)parse_lengths(s);
        } catch (const Error& e) {
          return e.what();
        }
        return "";
      }));
  m->add_option("--decode", args->decode, "Tokens to decode after each prefill (EOS ignored)")
      ->check(integer_at_least(0));
  m->add_option("--repeats", args->repeats, "Runs per length (the best is reported)")->check(integer_at_least(1));
  m->add_option("--attn", args->attn, "Attention method: " + known_methods() + "; per phase: 'prefill:X;decode:Y'");
  add_device(m, args->device);
  add_cpu_weights(m, args->cpu_weights);
  m->add_option("--random-weights", args->random_weights,
                "Random weights of a named geometry instead of -m (llama3-8b, llama3.1-8b, qwen2.5-7b, smollm2-135m, "
                "gemma3-270m; "
                "NAME:N keeps N layers); GPU only")
      ->check(known_geometry());
  add_prefill_chunk(m, args->chunk);
  m->add_option("--gpu-chunk", args->gpu_chunk, "Prefill chunk on the GPU in tokens (0 = automatic: 16K)")
      ->check(integer_at_least(0));
  m->add_flag("--synthetic-qk", args->synthetic_qk,
              "GPU, benchmarks: replace each layer's Q/K after RoPE by structured synthetic vectors (local/slash, "
              "sink, vertical, topic structure) so sparse methods see realistic patterns on random weights");
  m->add_option("--kv-cache", args->kv_cache,
                "GPU KV cache: bf16, or fp8 (e4m3 with per-layer scales: half the memory; prefill runs layer by layer)")
      ->check(one_of({"bf16", "fp8"}, "KV cache type"));
  add_attn_tiles(m, args->attn_tiles);
  add_kv_offload(m, args->offload);
  add_threads(m, args->threads);
  m->add_option("--json", args->json_path, "Write the JSON here instead of stdout")->check(writable_file());
  m->callback([args] { run(*args); });

  // bench attention: the CUDA kernels vs nothing else in-process; scripts/gpu-check.sh runs it
  // with torch SDPA (cuDNN, flash) side by side on the device.
  auto* a = b->add_subcommand("attention",
                              "CUDA attention kernels: prefill 8K-128K, decode 128K-1M (JSON); options: "
                              "--prefill N,.. --decode N,.. --no-ops --reps-scale X --json FILE");
  a->allow_extras();
  a->callback([a] {
#ifdef LONGCTX_WITH_CUDA_BENCH
    std::vector<std::string> rest = a->remaining();
    std::vector<char*> argv{const_cast<char*>("longctx bench attention")};
    for (auto& r : rest) argv.push_back(r.data());
    const int rc = bench_attention_main(int(argv.size()), argv.data());
    if (rc != 0) fail("bench attention failed (exit code {})", rc);
#else
    (void)a;
    fail("this longctx was built without CUDA: `bench attention` needs nvcc at build time and a GPU to run");
#endif
  });
}

}  // namespace longctx::cli

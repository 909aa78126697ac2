// bench_minference_index.cu (bench): MInference's GPU index builders (MinferenceIndexBuilder,
// kernels/cuda/minference_index.h) against the sparse attention they feed, on one layer of
// Llama-3-8B geometry (32 query / 8 KV heads, head_dim 128, bf16), one prefill chunk of S
// queries against S keys.
//
// What, per S and pattern:
//   - build(): median device time (CUDA events around the call; it synchronises once inside),
//     its host wall time, and the stage split (VS estimate + lines, BS pooling + scores + select,
//     CSR count/scan/fill) from the builder's profiling events;
//   - sparse_attention() (plan + kernel) on the index that build() made: median time;
//   - index_share = build / attention (the target: <= 10% at 128K and above), index sizes.
// Patterns: block_sparse_100 (every head BS, k_b = 100: MInference's default) and
// vertical_slash_llama3 (the published Llama-3-8B-262K budget mix over 32 heads, as
// bench/bench_sparse.cu kVsMix: 15 x (1000, 6096), 9 x (30, 800), 5 x (100, 800), 2 x (3500, 100),
// 1 x (500, 700)).
// Inputs: --inputs random (default; i.i.d. uniform bf16 Q/K/V, fill_random_bf16) and/or structured
// (kernels/cuda/structured_qk.h: RoPE slashes, sinks, vertical tokens, topic blocks, so the estimated
// lines cluster as on real heads). With random inputs every slash lands far from the others, so a
// VS index has ~6K unmerged 64-key ranges per block and the attention costs ~60x its structured
// time: --vs-random-max (default 131072) limits the random VS runs to lengths where that fits
// the device budget.
// Run: build-mindex/bench/longctx_bench_minference_index [--seqs 131072,524288,1048576]
//        [--inputs random,structured] [--vs-random-max N] [--bs-wave-mb 256,512] [--json out.json]
//      --bs-wave-mb: also time the block-sparse build with these score-scratch sizes (the builder's
//      bs_wave_bytes; default 128 MiB), against the same attention time (pattern
//      block_sparse_100_wave<N>MB in the JSON).
//      (scripts/gpu-minference-index.sh runs it on the device machine).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/cuda/structured_qk.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/minference_index.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/sparse_attention.h"

using namespace longctx::cuda;

namespace {

constexpr int kHeads = 32, kKvHeads = 8, kD = 128;
constexpr int kBsBlocks = 100;  // MInference block_sparse default
struct Vs {
  int kv, ks, heads;
};
constexpr Vs kVsMix[] = {{1000, 6096, 15}, {30, 800, 9}, {100, 800, 5}, {3500, 100, 2}, {500, 700, 1}};

// Median device time of fn over reps runs after warmup runs (CUDA events on the default stream),
// and the median wall time (build() synchronises once: its host side counts here).
double time_ms(const std::function<void()>& fn, int warmup, int reps, double* wall_ms = nullptr) {
  for (int i = 0; i < warmup; ++i) fn();
  LC_CUDA_CHECK(cudaDeviceSynchronize(), "bench warmup");
  std::vector<double> t(static_cast<size_t>(reps)), w(static_cast<size_t>(reps));
  cudaEvent_t a, b;
  LC_CUDA_CHECK(cudaEventCreate(&a), "event");
  LC_CUDA_CHECK(cudaEventCreate(&b), "event");
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    LC_CUDA_CHECK(cudaEventRecord(a), "event");
    fn();
    LC_CUDA_CHECK(cudaEventRecord(b), "event");
    LC_CUDA_CHECK(cudaEventSynchronize(b), "event");
    w[size_t(i)] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    float ms = 0;
    LC_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b), "event");
    t[size_t(i)] = ms;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  std::sort(w.begin(), w.end());
  if (wall_ms) *wall_ms = w[size_t(reps / 2)];
  return t[size_t(reps / 2)];
}

std::vector<GpuHeadPattern> patterns(bool block_sparse) {
  std::vector<GpuHeadPattern> v;
  if (block_sparse) {
    for (int h = 0; h < kHeads; ++h) v.push_back({GpuPatternKind::BlockSparse, kBsBlocks, 0});
    return v;
  }
  for (const Vs& m : kVsMix)
    for (int i = 0; i < m.heads; ++i) v.push_back({GpuPatternKind::VerticalSlash, m.kv, m.ks});
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> seqs = {131072, 524288, 1048576};
  std::vector<std::string> inputs = {"random"};
  int64_t vs_random_max = 131072;
  std::vector<int64_t> bs_wave_mb;
  bool run_bs = true, run_vs = true;
  const char* json_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seqs") && i + 1 < argc) {
      seqs = longctx::bench::parse_list(argv[++i]);
    } else if (!std::strcmp(argv[i], "--inputs") && i + 1 < argc) {
      inputs.clear();
      std::string s(argv[++i]);
      size_t pos = 0;
      while (pos <= s.size()) {
        size_t e = s.find(',', pos);
        if (e == std::string::npos) e = s.size();
        if (e > pos) inputs.push_back(s.substr(pos, e - pos));
        pos = e + 1;
      }
    } else if (!std::strcmp(argv[i], "--bs-wave-mb") && i + 1 < argc) {
      bs_wave_mb = longctx::bench::parse_list(argv[++i]);
    } else if (!std::strcmp(argv[i], "--vs-random-max") && i + 1 < argc) {
      vs_random_max = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--patterns") && i + 1 < argc) {
      const std::string s(argv[++i]);
      run_bs = s.find("bs") != std::string::npos;
      run_vs = s.find("vs") != std::string::npos;
    } else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s [--seqs N,..] [--inputs random,structured] [--patterns bs,vs] [--vs-random-max N] "
                   "[--bs-wave-mb N,..] [--json FILE]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    require_hopper();
    const DeviceInfo dev = device_info(0);
    char buf[2048];
    std::snprintf(buf, sizeof buf,
                  "\"shape\": {\"n_head\": %d, \"n_kv_head\": %d, \"head_dim\": %d, \"dtype\": \"bf16\", "
                  "\"chunk\": \"n_q = n_kv = S\"}",
                  kHeads, kKvHeads, kD);
    longctx::bench::JsonRecord js(dev, buf);
    for (int64_t S : seqs) {
      const size_t nq = size_t(S) * kHeads * kD, nk = size_t(S) * kKvHeads * kD;
      void* q = dev_malloc(nq * 2);
      void* k = dev_malloc(nk * 2);
      void* v = dev_malloc(nk * 2);
      void* o = dev_malloc(nq * 2);
      float* lse = static_cast<float*>(dev_malloc(size_t(S) * kHeads * 4));
      fill_random_bf16(v, int64_t(nk), 23, 1.f);
      const MinferenceBuilderShape shape{.n_head = kHeads, .n_kv_head = kKvHeads, .head_dim = kD, .max_q = S,
                                         .max_kv = S};
      const size_t fixed_bytes = MinferenceIndexBuilder::device_bytes(shape);
      for (const std::string& in : inputs) {
        if (in == "random") {
          fill_random_bf16(q, int64_t(nq), 21, 1.f);
          fill_random_bf16(k, int64_t(nk), 22, 1.f);
        } else if (in == "structured") {
          StructuredQk(kHeads, kKvHeads, 7).fill({.q = q, .k = k, .n_tok = S, .pos0 = 0, .seed = 7});
        } else {
          throw std::runtime_error("unknown --inputs " + in);
        }
        device_sync();
        for (int kind = 0; kind < 2; ++kind) {
          const bool bs = kind == 0;
          if (bs ? !run_bs : !run_vs) continue;
          if (!bs && in == "random" && S > vs_random_max) {
            std::fprintf(stderr, "S=%lld %s vertical_slash: skipped (--vs-random-max %lld)\n", (long long)S,
                         in.c_str(), (long long)vs_random_max);
            continue;
          }
          const char* name = bs ? "block_sparse_100" : "vertical_slash_llama3";
          MinferenceIndexBuilder builder(shape);
          MinferenceIndexParams ip;
          ip.q = q;
          ip.k = k;
          ip.n_q = S;
          ip.n_kv = S;
          ip.heads = patterns(bs);
          DeviceSparseIndex idx;
          const int reps = S <= 131072 ? 7 : 5;
          double build_wall = 0;
          const double build_ms = time_ms([&] { idx = builder.build(ip); }, 1, reps, &build_wall);
          builder.set_profiling(true);
          idx = builder.build(ip);
          const GpuIndexProfile prof = builder.last_profile();
          builder.set_profiling(false);
          SparseAttnParams sp;
          sp.q = q, sp.k = k, sp.v = v, sp.o = o, sp.lse = lse;
          sp.n_q = sp.n_kv = S;
          sp.n_head = kHeads, sp.n_kv_head = kKvHeads;
          sp.index = idx;
          sp.workspace = builder.attention_workspace();
          sp.workspace_bytes = builder.attention_workspace_bytes();
          const int areps = S <= 131072 ? 3 : 1;
          const double attn_ms = time_ms([&] { sparse_attention(sp); }, 1, areps);
          const double share = build_ms / attn_ms;
          const double index_mb = (double(idx.n_ranges) * 8 + double(idx.n_cols) * 4) / 1e6;
          std::fprintf(stderr,
                       "S=%lld %-10s %-22s build %8.3f ms (wall %.3f; vs %.3f bs %.3f [pool %.3f score %.3f select "
                       "%.3f, %d waves] csr %.3f) | sparse attention %9.3f ms | index share %5.2f%% | %lld ranges "
                       "%lld cols (%.0f MB)\n",
                       (long long)S, in.c_str(), name, build_ms, build_wall, prof.vs_ms, prof.bs_ms, prof.bs_pool_ms,
                       prof.bs_score_ms, prof.bs_select_ms, prof.bs_waves, prof.csr_ms, attn_ms, 100 * share,
                       (long long)idx.n_ranges, (long long)idx.n_cols, index_mb);
          std::snprintf(buf, sizeof buf,
                        "{\"seq\": %lld, \"inputs\": \"%s\", \"pattern\": \"%s\", \"build_ms\": %.4f, "
                        "\"build_wall_ms\": %.4f, \"build_reps\": %d, \"stage_ms\": {\"vs\": %.4f, \"bs\": %.4f, "
                        "\"bs_pool\": %.4f, \"bs_score\": %.4f, \"bs_select\": %.4f, \"bs_waves\": %d, \"csr\": %.4f}, \"attention_ms\": %.4f, \"attention_reps\": %d, \"index_share\": %.5f, "
                        "\"n_ranges\": %lld, \"n_cols\": %lld, \"index_mb\": %.1f, \"builder_fixed_mb\": %.1f}",
                        (long long)S, in.c_str(), name, build_ms, build_wall, reps, prof.vs_ms,
                        prof.bs_ms, prof.bs_pool_ms, prof.bs_score_ms, prof.bs_select_ms, prof.bs_waves, prof.csr_ms, attn_ms, areps, share, (long long)idx.n_ranges,
                        (long long)idx.n_cols, index_mb, double(fixed_bytes) / 1e6);
          js.add(buf);
          for (const int64_t mb : bs ? bs_wave_mb : std::vector<int64_t>{}) {
            MinferenceBuilderShape wshape = shape;
            wshape.bs_wave_bytes = mb << 20;
            MinferenceIndexBuilder wb(wshape);
            const double wms = time_ms([&] { idx = wb.build(ip); }, 1, reps);
            wb.set_profiling(true);
            idx = wb.build(ip);
            const GpuIndexProfile wp = wb.last_profile();
            const double wfixed = double(MinferenceIndexBuilder::device_bytes(wshape)) / 1e6;
            std::fprintf(stderr,
                         "S=%lld %-10s block_sparse_100 wave %4lld MB: build %8.3f ms (pool %.3f score %.3f select "
                         "%.3f, %d waves) | index share %5.2f%% | builder fixed %.0f MB\n",
                         (long long)S, in.c_str(), (long long)mb, wms, wp.bs_pool_ms, wp.bs_score_ms, wp.bs_select_ms,
                         wp.bs_waves, 100 * wms / attn_ms, wfixed);
            std::snprintf(buf, sizeof buf,
                          "{\"seq\": %lld, \"inputs\": \"%s\", \"pattern\": \"block_sparse_100_wave%lldMB\", "
                          "\"build_ms\": %.4f, \"build_reps\": %d, \"stage_ms\": {\"bs\": %.4f, \"bs_pool\": %.4f, "
                          "\"bs_score\": %.4f, \"bs_select\": %.4f, \"bs_waves\": %d, \"csr\": %.4f}, "
                          "\"attention_ms\": %.4f, \"index_share\": %.5f, \"builder_fixed_mb\": %.1f}",
                          (long long)S, in.c_str(), (long long)mb, wms, reps, wp.bs_ms, wp.bs_pool_ms, wp.bs_score_ms,
                          wp.bs_select_ms, wp.bs_waves, wp.csr_ms, attn_ms, wms / attn_ms, wfixed);
            js.add(buf);
          }
        }
      }
      for (void* x : {q, k, v, o, static_cast<void*>(lse)}) dev_free(x);
    }
    js.finish(json_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_minference_index: %s\n", e.what());
    return 1;
  }
  return 0;
}

// bench_cuda.cu (bench): times longctx's CUDA attention kernels and prints one JSON object.
//
// What: dense causal prefill (32 q / 8 kv heads, d=128, bf16; --shape for others, e.g. d=256)
// at 8K/32K/128K tokens and split-KV decode (one query) at 128K/1M KV tokens, plus a
// device-to-device copy as the bandwidth ceiling (bytes read + written). Inputs are random
// (never zeros).
// How: CUDA events around each launch, warmup first, median of N (METHOD.md). Decode inputs
// (>= 0.5 GB) dwarf the 50-60 MB L2, so repeated launches do not measure the cache.
// Run:  longctx bench attention [same options], or build-gpu/bench/longctx_bench_cuda [--prefill 8192,32768,131072] [--decode 131072,1048576]
//                                          [--reps-scale 1.0] [--json out.json]
// scripts/gpu-check.sh runs it with torch's SDPA (bench/torch_baseline.py) in the same call.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_attention.h"
#include "bench/bench_util.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_sm90.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"

using namespace longctx::cuda;
using longctx::bench::parse_list;
using longctx::bench::time_ms;

// Attention geometry: Llama-3-8B's by default; --shape H,HKV,D sets another (e.g. 16,8,256: Gemma
// 3 12B's head_dim 256, where only the FA2-style prefill kernel applies).
int g_heads = 32, g_kv_heads = 8, g_head_dim = 128;
// --window W: sliding-window attention (Gemma 3's local layers) in prefill and decode; the FLOP
// and byte counts stay the dense ones, so TFLOP/s and GB/s read as "dense-equivalent".
int64_t g_window = 0;

int bench_attention_main(int argc, char** argv) {
  std::vector<int64_t> prefill = {8192, 32768, 131072}, decode = {131072, 1048576};
  bool ops = true;
  double reps_scale = 1.0;
  const char* json_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--prefill") && i + 1 < argc) prefill = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--decode") && i + 1 < argc) decode = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps-scale") && i + 1 < argc) reps_scale = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--no-ops")) ops = false;
    else if (!std::strcmp(argv[i], "--window") && i + 1 < argc) g_window = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) {
      const std::vector<int64_t> sh = parse_list(argv[++i]);
      if (sh.size() != 3) {
        std::fprintf(stderr, "--shape wants H,HKV,D (e.g. 16,8,256)\n");
        return 2;
      }
      g_heads = int(sh[0]), g_kv_heads = int(sh[1]), g_head_dim = int(sh[2]);
    }
    else {
      std::fprintf(stderr,
                   "usage: %s [--prefill N,..] [--decode N,..] [--shape H,HKV,D] [--window W] [--no-ops] [--reps-scale X] "
                   "[--json FILE]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    require_hopper();
    const DeviceInfo dev = device_info(0);
    std::string js = "{\n";
    char buf[512];
    std::time_t now = std::time(nullptr);
    char date[64];
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    std::snprintf(buf, sizeof buf, "  \"device\": \"%s\", \"sms\": %d, \"date\": \"%s\",\n", dev.name.c_str(),
                  dev.num_sms, date);
    js += buf;
    std::snprintf(buf, sizeof buf,
                  "  \"shape\": {\"n_head\": %d, \"n_kv_head\": %d, \"head_dim\": %d, \"window\": %lld, \"dtype\": \"bf16\"},\n",
                  g_heads, g_kv_heads, g_head_dim, (long long)g_window);
    js += buf;

    // Copy bandwidth ceiling: 2 x 2 GiB buffers, bytes read + written.
    {
      const size_t bytes = size_t(2) << 30;
      void* a = dev_malloc(bytes);
      void* b = dev_malloc(bytes);
      fill_random_bf16(a, int64_t(bytes / 2), 1, 1.f);
      const double ms = time_ms([&] { copy_d2d(b, a, bytes); }, 2, 10);
      const double gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;
      std::fprintf(stderr, "copy d2d %zu MiB: %.3f ms, %.0f GB/s (read+write)\n", bytes >> 20, ms, gbs);
      std::snprintf(buf, sizeof buf, "  \"copy\": {\"bytes\": %zu, \"ms\": %.4f, \"GBps_rw\": %.1f},\n", bytes, ms, gbs);
      js += buf;
      dev_free(a);
      dev_free(b);
    }

    js += "  \"prefill\": [\n";
    for (size_t si = 0; si < prefill.size(); ++si) {
      const int64_t S = prefill[si];
      const size_t nq = size_t(S) * g_heads * g_head_dim, nk = size_t(S) * g_kv_heads * g_head_dim;
      void* q = dev_malloc(nq * 2);
      void* k = dev_malloc(nk * 2);
      void* v = dev_malloc(nk * 2);
      void* o = dev_malloc(nq * 2);
      float* lse = static_cast<float*>(dev_malloc(size_t(S) * g_heads * 4));
      fill_random_bf16(q, int64_t(nq), 11, 1.f);
      fill_random_bf16(k, int64_t(nk), 12, 1.f);
      fill_random_bf16(v, int64_t(nk), 13, 1.f);
      PrefillParams p;
      p.q = q;
      p.k = k;
      p.v = v;
      p.o = o;
      p.lse = lse;
      p.n_q = p.n_kv = S;
      p.n_head = g_heads;
      p.n_kv_head = g_kv_heads;
      p.head_dim = g_head_dim;
      p.causal = true;
      p.window = g_window;
      const double flops = 2.0 * double(S) * double(S) * g_head_dim * g_heads;  // causal: half of 4*S^2*d*H
      const int reps = std::max(3, int(reps_scale * (S <= 8192 ? 20 : S <= 32768 ? 8 : 3)));
      const struct {
        int kind;  // 0 = FA2 mma.sync; 1 = Hopper kernel (variant, ring stages, keys per K/V tile); 2 = default
        Sm90Variant variant;
        int stages, block_n;
        const char* name;
      } impls[] = {{1, Sm90Variant::simple, 2, 128, "sm90_simple_s2"},
                   {1, Sm90Variant::overlap, 2, 128, "sm90_overlap_s2"},
                   {1, Sm90Variant::pingpong, 2, 128, "sm90_pingpong_s2"},
                   {1, Sm90Variant::simple, 3, 128, "sm90_simple_s3"},
                   {1, Sm90Variant::overlap, 3, 128, "sm90_overlap_s3"},
                   {1, Sm90Variant::pingpong, 3, 128, "sm90_pingpong_s3"},
                   {1, Sm90Variant::simple, 2, 64, "sm90_simple_s2_n64"},
                   {1, Sm90Variant::overlap, 2, 64, "sm90_overlap_s2_n64"},
                   {1, Sm90Variant::pingpong, 2, 64, "sm90_pingpong_s2_n64"},
                   {1, Sm90Variant::simple, 2, 80, "sm90_simple_s2_n80"},
                   {1, Sm90Variant::overlap, 2, 80, "sm90_overlap_s2_n80"},
                   {1, Sm90Variant::pingpong, 2, 80, "sm90_pingpong_s2_n80"},
                   {0, Sm90Variant::simple, 0, 0, "fa2_mma_sync"},
                   {2, Sm90Variant::simple, 0, 0, "default"}};  // attention_prefill's own choice
      for (const auto& im : impls) {
        // Hopper kernel: d 128 (128-key tiles, 2 or 3 stages) or 256 (64 or 80, 2 stages), no window
        if (im.kind == 1 && ((g_head_dim != 128 && g_head_dim != 256) || g_window > 0 ||
                             im.stages > sm90_max_stages(g_head_dim) || (im.block_n == 128) != (g_head_dim == 128)))
          continue;
        auto run = [&] {
          if (im.kind != 1) {
            p.impl = im.kind == 0 ? PrefillImpl::fa2_mma_sync : PrefillImpl::automatic;
            attention_prefill(p);
          } else {
            attention_prefill_sm90(p, nullptr, im.variant, im.stages, im.block_n);
          }
        };
        const double ms = time_ms(run, 1, reps);
        const double tflops = flops / (ms * 1e-3) / 1e12;
        std::fprintf(stderr, "prefill %s S=%lld: %.3f ms, %.1f TFLOP/s\n", im.name, (long long)S, ms, tflops);
        std::snprintf(buf, sizeof buf,
                      "    {\"seq\": %lld, \"kernel\": \"%s\", \"ms\": %.4f, \"tflops\": %.1f, \"reps\": %d}%s\n",
                      (long long)S, im.name, ms, tflops, reps,
                      (si + 1 < prefill.size() || im.kind != 2) ? "," : "");
        js += buf;
      }
      for (void* x : {q, k, v, o, static_cast<void*>(lse)}) dev_free(x);
    }
    // Chunked prefill: the last 8K queries of a 128K context against the whole KV prefix (the
    // engine's chunked-prefill step), default kernel choice.
    {
      const int64_t n_kv = 131072, n_q = 8192, q_pos0 = n_kv - n_q;
      void* q = dev_malloc(size_t(n_q) * g_heads * g_head_dim * 2);
      void* k = dev_malloc(size_t(n_kv) * g_kv_heads * g_head_dim * 2);
      void* v = dev_malloc(size_t(n_kv) * g_kv_heads * g_head_dim * 2);
      void* o = dev_malloc(size_t(n_q) * g_heads * g_head_dim * 2);
      fill_random_bf16(q, n_q * g_heads * g_head_dim, 51, 1.f);
      fill_random_bf16(k, n_kv * g_kv_heads * g_head_dim, 52, 1.f);
      fill_random_bf16(v, n_kv * g_kv_heads * g_head_dim, 53, 1.f);
      PrefillParams p;
      p.q = q;
      p.k = k;
      p.v = v;
      p.o = o;
      p.n_q = n_q;
      p.n_kv = n_kv;
      p.q_pos0 = q_pos0;
      p.window = g_window;
      p.n_head = g_heads;
      p.n_kv_head = g_kv_heads;
      p.head_dim = g_head_dim;
      const double flops = 4.0 * g_head_dim * g_heads * double(n_q) * (double(q_pos0) + 0.5 * double(n_q));
      const double ms = time_ms([&] { attention_prefill(p); }, 1, std::max(3, int(reps_scale * 10)));
      std::fprintf(stderr, "chunked prefill 8K queries at 120K..128K: %.3f ms, %.1f TFLOP/s\n", ms,
                   flops / (ms * 1e-3) / 1e12);
      std::snprintf(buf, sizeof buf,
                    "  ],\n  \"chunked_prefill\": {\"n_q\": %lld, \"n_kv\": %lld, \"ms\": %.4f, \"tflops\": %.1f},\n",
                    (long long)n_q, (long long)n_kv, ms, flops / (ms * 1e-3) / 1e12);
      js += buf;
      for (void* x : {q, k, v, o}) dev_free(x);
    }
    // Batched decode: 8 sequences x 32K keys (one launch for the batch), eager.
    {
      const int n_seq = 8;
      const int64_t n_kv = 32768;
      const size_t nk = size_t(n_seq) * n_kv * g_kv_heads * g_head_dim;
      void* q = dev_malloc(size_t(n_seq) * g_heads * g_head_dim * 2);
      void* k = dev_malloc(nk * 2);
      void* v = dev_malloc(nk * 2);
      void* o = dev_malloc(size_t(n_seq) * g_heads * g_head_dim * 2);
      const size_t ws_bytes = decode_workspace_bytes(n_seq, g_heads, g_head_dim, n_kv);
      void* ws = dev_malloc(ws_bytes);
      decode_workspace_init(ws, ws_bytes);
      fill_random_bf16(q, n_seq * g_heads * g_head_dim, 61, 1.f);
      fill_random_bf16(k, int64_t(nk), 62, 1.f);
      fill_random_bf16(v, int64_t(nk), 63, 1.f);
      DecodeParams p;
      p.q = q;
      p.k = k;
      p.v = v;
      p.o = o;
      p.n_seq = n_seq;
      p.n_kv = n_kv;
      p.n_head = g_heads;
      p.n_kv_head = g_kv_heads;
      p.head_dim = g_head_dim;
      p.window = g_window;
      p.workspace = ws;
      p.workspace_bytes = ws_bytes;
      const double ms = time_ms([&] { attention_decode(p); }, 3, std::max(5, int(reps_scale * 50)));
      const double gbs = 2.0 * nk * 2 / (ms * 1e-3) / 1e9;
      std::fprintf(stderr, "batched decode 8 x 32K: %.4f ms, %.0f GB/s of K+V\n", ms, gbs);
      std::snprintf(buf, sizeof buf, "  \"batched_decode\": {\"n_seq\": %d, \"n_kv\": %lld, \"ms\": %.5f, \"GBps\": %.1f},\n",
                    n_seq, (long long)n_kv, ms, gbs);
      js += buf;
      for (void* x : {q, k, v, o, ws}) dev_free(x);
    }
    js += "  \"decode\": [\n";
    for (size_t si = 0; si < decode.size(); ++si) {
      const int64_t N = decode[si];
      const size_t nk = size_t(N) * g_kv_heads * g_head_dim;
      void* q = dev_malloc(size_t(g_heads) * g_head_dim * 2);
      void* k = dev_malloc(nk * 2);
      void* v = dev_malloc(nk * 2);
      void* o = dev_malloc(size_t(g_heads) * g_head_dim * 2);
      float* lse = static_cast<float*>(dev_malloc(g_heads * 4));
      const size_t ws_bytes = decode_workspace_bytes(1, g_heads, g_head_dim, N);
      void* ws = dev_malloc(ws_bytes);
      decode_workspace_init(ws, ws_bytes);
      fill_random_bf16(q, g_heads * g_head_dim, 21, 1.f);
      fill_random_bf16(k, int64_t(nk), 22, 1.f);
      fill_random_bf16(v, int64_t(nk), 23, 1.f);
      DecodeParams p;
      p.q = q;
      p.k = k;
      p.v = v;
      p.o = o;
      p.lse = lse;
      p.n_seq = 1;
      p.n_kv = N;
      p.n_head = g_heads;
      p.n_kv_head = g_kv_heads;
      p.head_dim = g_head_dim;
      p.window = g_window;
      p.workspace = ws;
      p.workspace_bytes = ws_bytes;
      const double bytes = 2.0 * double(nk) * 2;  // K + V read once
      const int reps = std::max(5, int(reps_scale * 50));
      // Auto split count first (the reported number), then more splits (finer load balance),
      // then the auto configuration replayed from a CUDA graph (no CPU launch gaps).
      const int auto_splits = decode_num_splits(p);
      std::string rows;
      double auto_ms = 0;
      for (int mult : {1, 2, 4, 8}) {
        p.n_splits = mult == 1 ? 0 : auto_splits * mult;
        const int splits = decode_num_splits(p);
        if (mult > 1 && splits == auto_splits) continue;
        const double ms = time_ms([&] { attention_decode(p); }, 3, reps);
        if (mult == 1) auto_ms = ms;
        std::fprintf(stderr, "decode n_kv=%lld splits=%d: %.4f ms, %.0f GB/s of K+V\n", (long long)N, splits, ms,
                     bytes / (ms * 1e-3) / 1e9);
        std::snprintf(buf, sizeof buf, "%s{\"splits\": %d, \"ms\": %.5f, \"GBps\": %.1f}", rows.empty() ? "" : ", ",
                      splits, ms, bytes / (ms * 1e-3) / 1e9);
        rows += buf;
      }
      p.n_splits = 0;
      const double graph_ms = longctx::bench::graph_ms([&](Stream st) { attention_decode(p, st); }, reps);
      std::fprintf(stderr, "decode n_kv=%lld graph replay: %.4f ms, %.0f GB/s of K+V\n", (long long)N, graph_ms,
                   bytes / (graph_ms * 1e-3) / 1e9);
      // fp8 e4m3 KV (half the bytes): random codes with the exponent's top bit cleared (values
      // up to 1.875, never the NaN code), auto splits, eager and graph.
      double fp8_ms = 0, fp8_graph_ms = 0;
      {
        void* k8 = dev_malloc(nk);
        void* v8 = dev_malloc(nk);
        {
          std::vector<uint64_t> host(nk / 8);
          uint64_t x = 0x9e3779b97f4a7c15ull;
          for (int which = 0; which < 2; ++which) {
            for (auto& w : host) {
              x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
              w = x & 0xbfbfbfbfbfbfbfbfull;
            }
            copy_h2d(which ? v8 : k8, host.data(), nk);
          }
        }
        DecodeParams pf = p;
        pf.k = k8;
        pf.v = v8;
        pf.kv_dtype = KvDtype::fp8_e4m3;
        pf.k_scale = 0.01f;
        pf.v_scale = 0.01f;
        fp8_ms = time_ms([&] { attention_decode(pf); }, 3, reps);
        fp8_graph_ms = longctx::bench::graph_ms([&](Stream st) { attention_decode(pf, st); }, reps);
        dev_free(k8);
        dev_free(v8);
        std::fprintf(stderr, "decode fp8 n_kv=%lld: %.4f ms eager, %.4f ms graph, %.0f GB/s of fp8 K+V (graph)\n",
                     (long long)N, fp8_ms, fp8_graph_ms, bytes / 2 / (fp8_graph_ms * 1e-3) / 1e9);
      }
      const double gbs = bytes / (auto_ms * 1e-3) / 1e9;
      std::snprintf(buf, sizeof buf,
                    "    {\"n_kv\": %lld, \"ms\": %.5f, \"GBps\": %.1f, \"splits\": %d, \"reps\": %d, "
                    "\"graph_ms\": %.5f, \"fp8_ms\": %.5f, \"fp8_graph_ms\": %.5f, \"sweep\": [",
                    (long long)N, auto_ms, gbs, auto_splits, reps, graph_ms, fp8_ms, fp8_graph_ms);
      js += buf;
      js += rows + "]}" + (si + 1 < decode.size() ? ",\n" : "\n");
      for (void* x : {q, k, v, o, static_cast<void*>(lse), ws}) dev_free(x);
    }
    js += "  ]";
    if (ops) {
      // The rest of a Llama-3-8B layer at 8K tokens: the cuBLASLt GEMM wrapper (TFLOP/s) and the
      // fused memory-bound ops (GB/s, bytes read + written once).
      constexpr int64_t T = 8192, kHidden = 4096, kFfn = 14336;
      const size_t ws_bytes = kGemmWorkspaceBytes;
      void* gws = dev_malloc(ws_bytes);
      Gemm gemm(gws, ws_bytes);
      void* x = dev_malloc(size_t(T) * kFfn * 2 * 2);  // big enough for every op below
      void* w = dev_malloc(size_t(2 * kFfn) * kHidden * 2);
      void* y = dev_malloc(size_t(T) * 2 * kFfn * 2);
      fill_random_bf16(x, T * kFfn * 2, 41, 1.f);
      fill_random_bf16(w, 2 * kFfn * kHidden, 42, 0.02f);
      js += ",\n  \"ops\": [\n";
      auto row = [&](const char* name, double ms, double flops, double bytes, bool last = false) {
        std::fprintf(stderr, "op %-28s %.4f ms  %7.1f TFLOP/s  %6.0f GB/s\n", name, ms, flops / (ms * 1e-3) / 1e12,
                     bytes / (ms * 1e-3) / 1e9);
        std::snprintf(buf, sizeof buf, "    {\"op\": \"%s\", \"ms\": %.5f, \"tflops\": %.1f, \"GBps\": %.1f}%s\n",
                      name, ms, flops / (ms * 1e-3) / 1e12, bytes / (ms * 1e-3) / 1e9, last ? "" : ",");
        js += buf;
      };
      const struct {
        const char* name;
        int64_t m, n, k;
      } gemms[] = {{"gemm 8192x8192x8192", 8192, 8192, 8192},
                   {"gemm gate_up 8192x28672x4096", T, 2 * kFfn, kHidden},
                   {"gemm down 8192x4096x14336", T, kHidden, kFfn},
                   {"gemm decode 1x28672x4096", 1, 2 * kFfn, kHidden}};
      for (const auto& g : gemms) {
        void* gx = x;
        void* gw = w;
        if (g.m == 8192 && g.n == 8192) gw = y;  // 8192x8192 weights: reuse y's storage as W
        if (gw == y) fill_random_bf16(y, g.n * g.k, 43, 0.02f);
        void* gy = gw == y ? x : y;
        if (gw == y) gx = w;  // x (8192 x 8192) from w's storage
        const GemmParams gp{gx, gw, gy, g.m, g.n, g.k, 1.f, 0.f};
        const double ms = time_ms([&] { gemm.run(gp); }, 2, std::max(5, int(reps_scale * 20)));
        row(g.name, ms, 2.0 * g.m * g.n * g.k, 2.0 * (g.m * g.k + g.n * g.k + g.m * g.n));
      }
      fill_random_bf16(x, T * kFfn * 2, 44, 1.f);
      {
        RmsNormParams rp;
        rp.x = x;
        rp.w = w;
        rp.y = y;
        rp.n_rows = T;
        rp.dim = kHidden;
        const double ms = time_ms([&] { rmsnorm(rp); }, 2, 20);
        row("rmsnorm 8192x4096", ms, 0, 2.0 * T * kHidden * 2);
      }
      {
        RopeParams rp;
        rp.q = x;
        rp.k = y;
        rp.n_q_heads = 32;
        rp.n_k_heads = 8;
        rp.head_dim = 128;
        rp.n_tokens = T;
        rp.theta = 500000.f;
        rp.scaling = RopeScalingType::llama3;
        rp.factor = 8.f;
        const double ms = time_ms([&] { rope(rp); }, 2, 20);
        row("rope q+k 8192 tok 32+8 heads", ms, 0, 2.0 * T * 40 * 128 * 2);
      }
      {
        SwiGluParams sp;
        sp.gate = x;
        sp.up = static_cast<uint16_t*>(x) + kFfn;
        sp.out = y;
        sp.n_rows = T;
        sp.dim = kFfn;
        sp.gate_stride = sp.up_stride = 2 * kFfn;
        const double ms = time_ms([&] { swiglu(sp); }, 2, 20);
        row("swiglu 8192x14336", ms, 0, 3.0 * T * kFfn * 2);
      }
      {
        const double ms = time_ms([&] { add(y, y, x, T * kHidden); }, 2, 20);
        row("residual add 8192x4096", ms, 0, 3.0 * T * kHidden * 2, true);
      }
      js += "  ]";
      for (void* p : {gws, x, w, y}) dev_free(p);
    }
    js += "\n}\n";
    std::fputs(js.c_str(), stdout);
    if (json_path) {
      FILE* f = std::fopen(json_path, "w");
      if (!f) {
        std::fprintf(stderr, "cannot write %s\n", json_path);
        return 1;
      }
      std::fputs(js.c_str(), f);
      std::fclose(f);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "longctx_bench_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}

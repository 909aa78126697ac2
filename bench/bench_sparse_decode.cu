// bench_sparse_decode.cu (bench): sparse decode (A-shape: sinks 128 + window 4096) against dense
// decode, one layer of Llama-3-8B geometry (32 query / 8 KV heads, d = 128), bf16 and fp8 KV.
//
// What, for each KV dtype:
//   - batch 1 at each --lens length (default 4224 = sinks + window, 128K and 1M keys): dense
//     cuda::attention_decode vs
//     the step "build_sink_window_index + cuda::sparse_decode" over the same paged cache, both as
//     a replayed CUDA graph (how the engine runs a decode step) and eagerly; the sparse step with
//     the A-shape's own bound max_keys_per_row = sinks + window ("tight") and with no bound
//     (0 = the block table's capacity, "loose": more splits planned, a longer key list); and, to
//     see where a short step's time goes, the step on an index with no keys and with explicit
//     split counts;
//   - a batch of --batch sequences (default 32) of mixed lengths (8K .. 128K, fixed seed), one
//     launch each for dense (kv_lens) and sparse.
// The pool is paged (page_size 64: dense decode needs a multiple of 64) with a shuffled,
// non-contiguous block table; inputs are random (never zeros). CUDA events, warmup, median.
// Reported: ms per layer, K+V bytes read and GB/s, and dense / sparse ratios (the issue's target:
// >= 20x at 1M).
// --head-dim 256: the same on Gemma 3 12B's global layers (16 query / 8 KV heads, d = 256).
// Run: build-gpu/bench/longctx_bench_sparse_decode [--lens 131072,1048576] [--batch 32]
//        [--reps-scale 1.0] [--json out.json] [--head-dim 256]; scripts/gpu-sparse-decode.sh runs it with the tests.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/paged_decode.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/sparse_decode.h"

using namespace longctx;
using namespace longctx::cuda;
using longctx::bench::time_step;
using longctx::bench::Timing;

namespace {

// Llama-3-8B attention geometry; --head-dim 256: Gemma 3 12B's global layers (16 / 8 heads, d 256).
int kHeads = 32, kKvHeads = 8, kHeadDim = 128;
constexpr int kSinks = 128, kWindow = 4096;                // the issue's A-shape decode budget
constexpr int kPageSize = 64;

// fp8 pools: random e4m3 codes with the exponent's top bit cleared (values up to 1.875, never the
// NaN code), as bench_cuda.cu does; a 64 MiB random chunk repeated over the pool.
void fill_fp8_codes(void* dst, size_t bytes, uint64_t seed) {
  constexpr size_t kChunk = size_t(64) << 20;
  std::vector<uint64_t> host(kChunk / 8);
  uint64_t x = 0x9e3779b97f4a7c15ull ^ seed;
  for (auto& w : host) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
    w = x & 0xbfbfbfbfbfbfbfbfull;
  }
  for (size_t off = 0; off < bytes; off += kChunk)
    copy_h2d(static_cast<char*>(dst) + off, host.data(), std::min(kChunk, bytes - off));
}

struct Problem {
  std::vector<int32_t> lens;
  bool fp8 = false;
  int max_pages = 0;
  int64_t n_pages = 0;
  void *k = nullptr, *v = nullptr, *q = nullptr, *o = nullptr;
  int32_t *table = nullptr, *d_lens = nullptr;
  // A-shape index arrays (one shared index head).
  int32_t *range_ptr = nullptr, *ranges = nullptr, *col_ptr = nullptr;

  Problem(std::vector<int32_t> l, bool f) : lens(std::move(l)), fp8(f) {
    const int n_seq = int(lens.size());
    for (int32_t len : lens) max_pages = std::max(max_pages, (len + kPageSize - 1) / kPageSize);
    std::vector<int32_t> tab(size_t(n_seq) * max_pages, 0);
    for (int32_t len : lens) n_pages += (len + kPageSize - 1) / kPageSize;
    const std::vector<int32_t> perm = bench::shuffled_pages(n_pages);
    size_t next = 0;
    for (int s = 0; s < n_seq; ++s)
      for (int p = 0; p < (lens[s] + kPageSize - 1) / kPageSize; ++p) tab[size_t(s) * max_pages + p] = perm[next++];
    const int64_t elems = n_pages * kPageSize * kKvHeads * kHeadDim;
    const size_t pool_bytes = size_t(elems) * (fp8 ? 1 : 2);
    k = dev_malloc(pool_bytes);
    v = dev_malloc(pool_bytes);
    if (fp8) {
      fill_fp8_codes(k, pool_bytes, 12);
      fill_fp8_codes(v, pool_bytes, 13);
    } else {
      fill_random_bf16(k, elems, 12, 1.f);
      fill_random_bf16(v, elems, 13, 1.f);
    }
    q = dev_malloc(size_t(n_seq) * kHeads * kHeadDim * 2);
    o = dev_malloc(size_t(n_seq) * kHeads * kHeadDim * 2);
    fill_random_bf16(q, int64_t(n_seq) * kHeads * kHeadDim, 11, 1.f);
    table = bench::upload_i32(tab);
    d_lens = bench::upload_i32(lens);
    range_ptr = static_cast<int32_t*>(dev_malloc((lens.size() + 1) * 4));
    col_ptr = static_cast<int32_t*>(dev_malloc((lens.size() + 1) * 4));
    ranges = static_cast<int32_t*>(dev_malloc(lens.size() * 16));
  }
  ~Problem() {
    for (void* p : {k, v, q, o, (void*)table, (void*)d_lens, (void*)range_ptr, (void*)col_ptr, (void*)ranges})
      dev_free(p);
  }
  int n_seq() const { return int(lens.size()); }
  int64_t max_len() const { return *std::max_element(lens.begin(), lens.end()); }
  double kv_bytes_per_key() const { return 2.0 * kKvHeads * kHeadDim * (fp8 ? 1 : 2); }
  int64_t dense_keys() const { return std::accumulate(lens.begin(), lens.end(), int64_t(0)); }
  int64_t sparse_keys() const {
    int64_t n = 0;
    for (int32_t len : lens) n += std::min<int64_t>(len, kSinks + kWindow);
    return n;
  }
  SinkWindowIndexParams index_params(int sinks = kSinks, int window = kWindow) const {
    SinkWindowIndexParams ip;
    ip.seq_lens = d_lens;
    ip.n_seq = n_seq();
    ip.sinks = sinks;
    ip.window = window;
    ip.range_ptr = range_ptr;
    ip.ranges = ranges;
    ip.col_ptr = col_ptr;
    return ip;
  }
  KvView view() const {
    const float scale = fp8 ? 0.01f : 1.f;
    return {.k_pool = k, .v_pool = v, .elem = fp8 ? KvElem::fp8_e4m3 : KvElem::bf16, .k_scale = scale, .v_scale = scale,
            .block_table = table, .seq_lens = d_lens, .n_seq = n_seq(), .max_pages_per_seq = max_pages,
            .page_size = kPageSize, .n_pages = n_pages, .n_kv_head = kKvHeads, .head_dim = kHeadDim, .on_device = true};
  }
};

std::string run_problem(const char* label, Problem& pb, double reps_scale) {
  const int n_seq = pb.n_seq();
  // Dense decode over every key.
  const DecodeParams d = bench::dense_decode_over(pb.view(), pb.q, pb.o, kHeads, pb.max_len());
  const int dense_reps = std::max(5, int(reps_scale * (pb.dense_keys() > (int64_t(1) << 20) ? 30 : 100)));
  const Timing dense = time_step([&](Stream s) { attention_decode(d, s); }, dense_reps);

  // Sparse: the A-shape index built on the device, then sparse decode; tight and loose bounds.
  const SinkWindowIndexParams ip = pb.index_params();
  SparseDecodeParams sp;
  sp.q = pb.q;
  sp.o = pb.o;
  sp.n_head = kHeads;
  sp.kv = pb.view();
  sp.index = sink_window_index_view(ip);
  const int sparse_reps = std::max(10, int(reps_scale * 300));
  auto time_sparse = [&](const SinkWindowIndexParams& ixp, int64_t max_keys, int n_splits, int* splits_used) {
    sp.max_keys_per_row = max_keys;
    sp.n_splits = n_splits;
    bench::alloc_sparse_decode_workspace(sp);
    *splits_used = sparse_decode_num_splits(sp);
    const Timing t = time_step(
        [&](Stream s) {
          build_sink_window_index(ixp, s);
          sparse_decode(sp, s);
        },
        sparse_reps);
    dev_free(sp.workspace);
    return t;
  };
  Timing sparse[2];
  int splits[2];
  for (int loose = 0; loose < 2; ++loose) sparse[loose] = time_sparse(ip, loose ? 0 : kSinks + kWindow, 0, &splits[loose]);
  // Batch 1 only: where the time of a short step goes. An index with no keys (the launches and
  // merges alone), and explicit split counts for the A-shape row (66 tiles).
  std::string probes;
  if (n_seq == 1) {
    int used = 0;
    char b[160];
    const Timing empty = time_sparse(pb.index_params(0, 0), kSinks + kWindow, 0, &used);
    std::snprintf(b, sizeof b, ", \"sparse_empty_index_ms_graph\": %.5f, \"split_sweep\": [", empty.graph_ms);
    probes = b;
    std::fprintf(stderr, "  empty index: %.4f ms graph; explicit splits:", empty.graph_ms);
    const int caps[] = {4, 8, 17, 33, 66};
    for (int i = 0; i < 5; ++i) {
      const Timing t = time_sparse(ip, kSinks + kWindow, caps[i], &used);
      std::snprintf(b, sizeof b, "%s{\"n_splits\": %d, \"ms_graph\": %.5f}", i ? ", " : "", used, t.graph_ms);
      probes += b;
      std::fprintf(stderr, " %d: %.4f ms", used, t.graph_ms);
    }
    probes += "]";
    std::fprintf(stderr, "\n");
  }
  dev_free(d.workspace);
  device_sync();

  const double dense_gb = pb.dense_keys() * pb.kv_bytes_per_key() / 1e9;
  const double sparse_gb = pb.sparse_keys() * pb.kv_bytes_per_key() / 1e9;
  std::fprintf(stderr,
               "%s %s n_seq=%d max_len=%lld: dense %.4f ms graph (%.4f eager, %.0f GB/s) | sparse tight %.4f ms graph "
               "(%.4f eager, %d splits) loose %.4f ms graph (%d splits) | dense/sparse %.1fx (graph, tight)\n",
               label, pb.fp8 ? "fp8" : "bf16", n_seq, (long long)pb.max_len(), dense.graph_ms, dense.eager_ms,
               dense_gb / (dense.graph_ms * 1e-3), sparse[0].graph_ms, sparse[0].eager_ms, splits[0],
               sparse[1].graph_ms, splits[1], dense.graph_ms / sparse[0].graph_ms);
  char buf[2048];
  std::snprintf(buf, sizeof buf,
                "{\"case\": \"%s\", \"kv\": \"%s\", \"n_seq\": %d, \"max_len\": %lld, \"total_keys\": %lld, "
                "\"sparse_keys\": %lld, \"dense_ms_graph\": %.5f, \"dense_ms_eager\": %.5f, \"dense_GBps\": %.1f, "
                "\"sparse_tight_ms_graph\": %.5f, \"sparse_tight_ms_eager\": %.5f, \"sparse_tight_splits\": %d, "
                "\"sparse_tight_GBps\": %.1f, \"sparse_loose_ms_graph\": %.5f, \"sparse_loose_ms_eager\": %.5f, "
                "\"sparse_loose_splits\": %d, \"ratio_dense_over_sparse_tight_graph\": %.2f, "
                "\"ratio_dense_over_sparse_loose_graph\": %.2f%s}",
                label, pb.fp8 ? "fp8_e4m3" : "bf16", n_seq, (long long)pb.max_len(), (long long)pb.dense_keys(),
                (long long)pb.sparse_keys(), dense.graph_ms, dense.eager_ms, dense_gb / (dense.graph_ms * 1e-3),
                sparse[0].graph_ms, sparse[0].eager_ms, splits[0], sparse_gb / (sparse[0].graph_ms * 1e-3),
                sparse[1].graph_ms, sparse[1].eager_ms, splits[1], dense.graph_ms / sparse[0].graph_ms,
                dense.graph_ms / sparse[1].graph_ms, probes.c_str());
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  // 4224 = sinks + window: dense decode of exactly the keys the A-shape row attends.
  std::vector<int64_t> lens = {4224, 131072, 1048576};
  int batch = 32;
  double reps_scale = 1.0;
  const char* json_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--lens") && i + 1 < argc) lens = bench::parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--batch") && i + 1 < argc) batch = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps-scale") && i + 1 < argc) reps_scale = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--head-dim") && i + 1 < argc && !std::strcmp(argv[i + 1], "256"))
      kHeads = 16, kKvHeads = 8, kHeadDim = 256, ++i;
    else {
      std::fprintf(stderr, "usage: %s [--lens N,..] [--batch N] [--reps-scale X] [--json FILE] [--head-dim 256]\n", argv[0]);
      return 2;
    }
  }
  try {
    require_hopper();
    char extra[256];
    std::snprintf(extra, sizeof extra,
                  "\"shape\": {\"n_head\": %d, \"n_kv_head\": %d, \"head_dim\": %d, \"page_size\": %d, "
                  "\"sinks\": %d, \"window\": %d}",
                  kHeads, kKvHeads, kHeadDim, kPageSize, kSinks, kWindow);
    bench::JsonRecord js(device_info(0), extra);
    for (bool fp8 : {false, true}) {
      for (int64_t n : lens) {
        Problem pb({int32_t(n)}, fp8);
        js.add(run_problem("batch1", pb, reps_scale));
      }
      if (batch > 0) {
        std::mt19937_64 g(1234);
        std::uniform_int_distribution<int32_t> u(8192, 131072);
        std::vector<int32_t> mixed(static_cast<size_t>(batch));
        for (auto& x : mixed) x = u(g);
        Problem pb(mixed, fp8);
        js.add(run_problem("mixed_batch", pb, reps_scale));
      }
    }
    js.finish(json_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "longctx_bench_sparse_decode: %s\n", e.what());
    return 1;
  }
  return 0;
}

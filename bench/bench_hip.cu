// bench_hip.cu (bench): HiP attention on one layer, by default of Llama-3-8B geometry (32 query /
// 8 KV heads, d = 128, bf16; --geometry H/KV/D,... for others, e.g. 4/1/256: gemma-3-270m's global
// layers), against our dense kernels (torch SDPA cuDNN runs beside it in scripts/gpu-hip.sh,
// bench/torch_baseline.py, on the same shapes).
//
// What:
//   - decode, batch 1, at each --lens length (default 128K and 1M keys, paged cache, page 64,
//     shuffled block table): dense cuda::attention_decode vs the HiP step
//       refresh: hip_estimate_decode (forced to re-estimate) + cuda::sparse_decode
//       cached:  hip_estimate_decode (returns at once: the cached ranges stay) + sparse_decode
//     and their average over r_m = 8 steps ((refresh + 7 cached) / 8), all replayed from CUDA
//     graphs; the estimation alone is also reported;
//   - prefill at --prefill (default 128K) in one chunk: hip_estimate_prefill over the whole prompt
//     (every 64-query block and head) + cuda::sparse_attention over its index, vs dense
//     cuda::attention_prefill (timed once past 256K, skipped past --dense-max); the estimate also
//     over an fp8 e4m3 copy of K (HipPrefillParams::k_fp8), side by side, with the copy's cost
//     (max |K| and the quantize pass, as the engine would run them once per layer) and its
//     selection's agreement with bf16's (fp8_block_jaccard: mean Jaccard index); at head_dim
//     256 the sparse attention also on the generic mma.sync kernel (hip_sparse_attention_generic_ms:
//     the A/B of the Hopper kernel at 256); --cta 128,256,512 also times the estimate at each
//     prefill CTA size (HipPrefillParams::cta_threads: same blocks, A/B of the occupancy),
//     --estimate-only times the estimate alone; --fp8-tiles also times the sparse attention with
//     fp8 e4m3 K/V tiles (SparseAttnParams::kv_dtype, on e4m3 copies of K and V at amax / 448)
//     beside the bf16 one, and the total with an fp8 cache (fp8 estimate + fp8-tile attention);
//     --structured-qk fills the prefill's Q and K from kernels/cuda/structured_qk.h (head_dim 128:
//     local/slash, sinks, vertical tokens, topic segments, as real heads attend) instead of i.i.d.
//     random values, so HiP's estimate picks clustered blocks as on real prompts (neighbouring
//     query blocks and the heads of a KV group overlap) and the sparse attention's gathered rows
//     come partly from L2; V stays random. The JSON's "inputs" says which. --window W also times
//     the two sparse attentions of HiP + Self-Extend (docs/self_extend.md decision 8) on the same
//     index: the near part (SparseAttnParams::window = W) through cuda::sparse_attention (the
//     Hopper kernel's windowed variant at d 128/256) and through sparse_attention_generic (the
//     kernel it ran on before), and the far part (rows moved back: q_pos0 = -W); each includes its
//     plan, as the plain sparse attention's time does.
//     Built with -DLONGCTX_HIP_PHASE_CLOCKS (scripts/gpu-hip-clocks-build.sh:
//     longctx_bench_hip_clocks) it also prints where a prefill CTA's cycles go (scoring, radix
//     select, compaction, barriers: hip_estimate_phase_clocks).
// Paper defaults: k = 512, b_q = 64, b_sq = 2, b_k = 2, b_sk = 1, window 256, sinks 16, r_m = 8.
// Inputs are random (never zeros) unless --structured-qk: the estimate's cost does not depend on
// the values, the sparse attention's does (where the selected keys lie decides its L2 hits).
// Run: build-gpu/bench/longctx_bench_hip [--lens 131072,1048576] [--prefill 131072] [--geometry 32/8/128,4/1/256]
//        [--dense-max 262144] [--cta 128,256,512] [--estimate-only] [--fp8-tiles] [--structured-qk] [--window W]
//        [--json F]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/fp8_copy.cuh"
#include "bench/paged_decode.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/fp8_vec.cuh"
#include "kernels/cuda/hip_estimate.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/sparse_attention.h"
#include "kernels/cuda/sparse_attention_generic.h"
#include "kernels/cuda/sparse_decode.h"
#include "kernels/cuda/structured_qk.h"

using namespace longctx;
using namespace longctx::cuda;
using longctx::bench::fp8_copy;
using longctx::bench::fp8_scale;
using longctx::bench::graph_ms;
using longctx::bench::time_ms;

namespace {

struct Geometry {
  int heads = 32, kv_heads = 8, head_dim = 128;  // Llama-3-8B attention
};
constexpr int kPageSize = 64;
constexpr int kRefresh = 8;  // r_m
constexpr int64_t kLongPrefill = 262144;  // longer prefills time the dense kernel once

std::string bench_decode(int64_t len, const HipEstimateConfig& cfg, const Geometry& g) {
  const int n_head = g.heads, n_kv_head = g.kv_heads, head_dim = g.head_dim;
  const int max_pages = int((len + kPageSize - 1) / kPageSize);
  const int64_t elems = int64_t(max_pages) * kPageSize * n_kv_head * head_dim;
  void* k = dev_malloc(size_t(elems) * 2);  // pools bf16 [max_pages * kPageSize, n_kv_head, head_dim]
  void* v = dev_malloc(size_t(elems) * 2);
  fill_random_bf16(k, elems, 12, 1.f);
  fill_random_bf16(v, elems, 13, 1.f);
  void* q = dev_malloc(n_head * head_dim * 2);  // bf16 [1, n_head, head_dim]
  void* o = dev_malloc(n_head * head_dim * 2);
  fill_random_bf16(q, n_head * head_dim, 11, 1.f);
  int32_t* table = bench::upload_i32(bench::shuffled_pages(max_pages));  // [1, max_pages]
  int32_t* d_len = bench::upload_i32({int32_t(len)});                  // [1]
  const KvView kv{.k_pool = k, .v_pool = v, .elem = KvElem::bf16, .block_table = table, .seq_lens = d_len,
                  .n_seq = 1, .max_pages_per_seq = max_pages, .page_size = kPageSize, .n_pages = max_pages,
                  .n_kv_head = n_kv_head, .head_dim = head_dim, .on_device = true};
  const DecodeParams d = bench::dense_decode_over(kv, q, o, n_head, len);
  const double dense = graph_ms([&](Stream s) { attention_decode(d, s); }, len > (1 << 20) - 1 ? 30 : 100);

  // HiP: per-head index rows (n_index_head = n_head), R ranges each.
  const int64_t R = cfg.ranges_per_row(), rows = n_head;
  auto* refresh_pos = static_cast<int32_t*>(dev_malloc(rows * 4));
  auto* range_ptr = static_cast<int32_t*>(dev_malloc((rows + 1) * 4));
  auto* col_ptr = static_cast<int32_t*>(dev_malloc((rows + 1) * 4));
  auto* ranges = static_cast<int32_t*>(dev_malloc(size_t(rows * R) * 8));
  memset_async(refresh_pos, 0xff, rows * 4);  // -1: no mask yet
  HipDecodeParams hp;
  hp.cfg = cfg;
  hp.refresh = kRefresh;
  hp.q = q;
  hp.kv = kv;
  hp.n_head = n_head;
  hp.refresh_pos = refresh_pos;
  hp.range_ptr = range_ptr;
  hp.ranges = ranges;
  hp.col_ptr = col_ptr;
  hip_estimate_decode(hp);  // fills the index once (the cached step's contents)
  SparseDecodeParams sp;
  sp.q = q;
  sp.o = o;
  sp.n_head = n_head;
  sp.kv = kv;
  sp.index = {.n_seq = 1, .n_index_head = n_head, .range_ptr = range_ptr, .ranges = ranges, .col_ptr = col_ptr,
              .range_capacity = rows * R, .on_device = true};  // ranges only, no columns
  sp.max_keys_per_row = cfg.sinks + cfg.k + cfg.window + kRefresh;
  bench::alloc_sparse_decode_workspace(sp);
  const int reps = 200;
  const double estimate = graph_ms(
      [&](Stream s) {
        memset_async(refresh_pos, 0xff, rows * 4, s);
        hip_estimate_decode(hp, s);
      },
      reps);
  const double refresh = graph_ms(
      [&](Stream s) {
        memset_async(refresh_pos, 0xff, rows * 4, s);
        hip_estimate_decode(hp, s);
        sparse_decode(sp, s);
      },
      reps);
  const double cached = graph_ms(
      [&](Stream s) {
        hip_estimate_decode(hp, s);
        sparse_decode(sp, s);
      },
      reps);
  const double sparse_only = graph_ms([&](Stream s) { sparse_decode(sp, s); }, reps);
  const double avg = (refresh + (kRefresh - 1) * cached) / kRefresh;
  device_sync();
  for (void* p : {k, v, q, o, d.workspace, sp.workspace, (void*)table, (void*)d_len, (void*)refresh_pos, (void*)range_ptr,
                  (void*)col_ptr, (void*)ranges})
    dev_free(p);
  std::fprintf(stderr,
               "decode %d/%d/%d len=%lld: dense %.4f ms | hip refresh %.4f ms (estimate %.4f) cached %.4f ms (sparse decode "
               "alone %.4f) avg/%d %.4f ms | dense/hip avg %.1fx, dense/cached %.1fx, dense/refresh %.1fx\n",
               n_head, n_kv_head, head_dim, (long long)len, dense, refresh, estimate, cached, sparse_only, kRefresh, avg,
               dense / avg, dense / cached, dense / refresh);
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "{\"case\": \"decode\", \"n_head\": %d, \"n_kv_head\": %d, \"head_dim\": %d, \"len\": %lld, \"dense_ms\": %.5f, \"hip_refresh_ms\": %.5f, "
                "\"hip_estimate_ms\": %.5f, \"hip_cached_ms\": %.5f, \"sparse_decode_ms\": %.5f, "
                "\"hip_avg_ms\": %.5f, \"refresh_interval\": %d, \"ratio_dense_over_hip_avg\": %.2f, "
                "\"ratio_dense_over_cached\": %.2f, \"ratio_dense_over_refresh\": %.2f}",
                n_head, n_kv_head, head_dim, (long long)len, dense, refresh, estimate, cached, sparse_only, avg, kRefresh, dense / avg,
                dense / cached, dense / refresh);
  return buf;
}

struct PrefillOptions {
  int64_t dense_max = INT64_MAX;  // dense prefill timed up to this length
  bool estimate_only = false;     // no dense, fp8 or sparse attention timings
  std::vector<int64_t> ctas;      // prefill CTA sizes to time the estimate at, besides the default
  bool fp8_tiles = false;         // also the sparse attention with fp8 e4m3 K/V tiles
  bool structured_qk = false;     // Q/K from structured_qk.h (head_dim 128), not i.i.d. random
  int64_t window = 0;             // > 0: also HiP + Self-Extend's two sparse attentions at this W
};
constexpr uint64_t kStructuredSeed = 5;  // bench_sparse's, so the two benches see the same heads

// How far the fp8 key copy's selection agrees with the bf16 one: the mean over (head, query
// block) of the Jaccard index |A n B| / |A u B| of the two selected block sets (1: the same).
double fp8_block_agreement(HipPrefillParams bf, HipPrefillParams f8, int64_t entries, Stream st) {
  const int64_t m = bf.cfg.budget_blocks();
  std::vector<int32_t> ids[2], counts[2];
  HipPrefillParams* ps[2] = {&bf, &f8};
  auto* blocks = static_cast<int32_t*>(dev_malloc(size_t(entries * m) * 4));
  auto* n_blocks = static_cast<int32_t*>(dev_malloc(size_t(entries) * 4));
  for (int v = 0; v < 2; ++v) {
    ps[v]->blocks = blocks;
    ps[v]->n_blocks = n_blocks;
    hip_estimate_prefill(*ps[v], st);
    ids[v].resize(size_t(entries * m));
    counts[v].resize(size_t(entries));
    copy_d2h(ids[v].data(), blocks, ids[v].size() * 4, st);
    copy_d2h(counts[v].data(), n_blocks, counts[v].size() * 4, st);
    stream_sync(st);
  }
  dev_free(blocks);
  dev_free(n_blocks);
  double sum = 0;
  for (int64_t e = 0; e < entries; ++e) {  // both lists ascending: a merge counts the common ids
    const int32_t *a = ids[0].data() + e * m, *b = ids[1].data() + e * m;
    const int na = counts[0][size_t(e)], nb = counts[1][size_t(e)];
    int i = 0, j = 0, common = 0;
    while (i < na && j < nb) {
      if (a[i] == b[j]) ++common, ++i, ++j;
      else if (a[i] < b[j]) ++i;
      else ++j;
    }
    const int uni = na + nb - common;
    sum += uni ? double(common) / uni : 1.0;
  }
  return entries ? sum / double(entries) : 1.0;
}

std::string bench_prefill(int64_t n, const HipEstimateConfig& cfg, const Geometry& g, const PrefillOptions& opt) {
  const int64_t dense_max = opt.estimate_only ? 0 : opt.dense_max;
  const int n_head = g.heads, n_kv_head = g.kv_heads, head_dim = g.head_dim;
  const int64_t qe = n * n_head * head_dim, ke = n * n_kv_head * head_dim;
  void* q = dev_malloc(size_t(qe) * 2);
  void* k = dev_malloc(size_t(ke) * 2);
  void* v = dev_malloc(size_t(ke) * 2);
  void* o = dev_malloc(size_t(qe) * 2);
  const char* inputs = opt.structured_qk ? "structured" : "random";
  if (opt.structured_qk) {
    const StructuredQk sq(n_head, n_kv_head, kStructuredSeed);
    sq.fill({.q = q, .k = k, .n_tok = n, .pos0 = 0, .seed = kStructuredSeed});
    device_sync();
  } else {
    fill_random_bf16(q, qe, 21, 1.f);
    fill_random_bf16(k, ke, 22, 1.f);
  }
  fill_random_bf16(v, ke, 23, 1.f);
  PrefillParams dp;
  dp.q = q;
  dp.k = k;
  dp.v = v;
  dp.o = o;
  dp.n_q = dp.n_kv = n;
  dp.n_head = n_head;
  dp.n_kv_head = n_kv_head;
  dp.head_dim = head_dim;
  Stream st = stream_create();
  // Dense causal prefill grows as T^2 (~15 s at 1M): one timed run, no warm-up, past kLongPrefill;
  // none past dense_max (torch cuDNN in the same device call is the baseline there).
  const bool long_run = n > kLongPrefill, run_dense = n <= dense_max;
  const double dense = run_dense ? time_ms([&] { attention_prefill(dp, st); }, long_run ? 0 : 1, long_run ? 1 : 3,
                                           static_cast<cudaStream_t>(st))
                                 : 0.0;

  const int64_t n_qblk = (n + kSparseQBlock - 1) / kSparseQBlock, entries = n_qblk * n_head, R = cfg.ranges_per_row();
  auto* range_ptr = static_cast<int64_t*>(dev_malloc(size_t(entries + 1) * 8));
  auto* col_ptr = static_cast<int64_t*>(dev_malloc(size_t(entries + 1) * 8));
  auto* ranges = static_cast<int32_t*>(dev_malloc(size_t(entries * R) * 8));
  HipPrefillParams hp;
  hp.cfg = cfg;
  hp.q = q;
  hp.k = k;
  hp.n_q = hp.n_kv = n;
  hp.n_head = n_head;
  hp.n_kv_head = n_kv_head;
  hp.head_dim = head_dim;
  hp.range_ptr = range_ptr;
  hp.ranges = ranges;
  hp.col_ptr = col_ptr;
  const double estimate = time_ms([&] { hip_estimate_prefill(hp, st); }, 1, 3, static_cast<cudaStream_t>(st));
#ifdef LONGCTX_HIP_PHASE_CLOCKS
  {  // one more estimate with the phase clocks (bench-only build): where a CTA's cycles go
    uint64_t ph[kHipPhaseSlots];
    stream_sync(st);
    hip_estimate_phase_clocks(ph);  // clears the timed runs' sums
    hip_estimate_prefill(hp, st);
    stream_sync(st);
    hip_estimate_phase_clocks(ph);
    const char* names[] = {"prologue", "score", "score_wait", "radix", "compact", "end_wait", "epilogue"};
    double total = 0;
    for (int i = 0; i < 7; ++i) total += double(ph[i]);
    std::fprintf(stderr, "phase clocks n=%lld: %llu CTAs, %.2f iterations a CTA, %.0f cycles a CTA (%.0f an iteration):",
                 (long long)n, (unsigned long long)ph[8], double(ph[7]) / double(ph[8]), total / double(ph[8]),
                 (double(ph[1]) + ph[2] + ph[3] + ph[4] + ph[5]) / double(ph[7]));
    for (int i = 0; i < 7; ++i) std::fprintf(stderr, " %s %.1f%%", names[i], 100.0 * double(ph[i]) / total);
    std::fprintf(stderr, "\n");
  }
#endif
  std::string per_cta;
  for (int64_t cta : opt.ctas) {
    HipPrefillParams hc = hp;
    hc.cta_threads = int(cta);
    const double ms = time_ms([&] { hip_estimate_prefill(hc, st); }, 1, 3, static_cast<cudaStream_t>(st));
    std::fprintf(stderr, "prefill %d/%d/%d n=%lld: hip estimate, CTA of %lld threads: %.2f ms\n", n_head, n_kv_head,
                 head_dim, (long long)n, (long long)cta, ms);
    char one[96];
    std::snprintf(one, sizeof one, "%s\"%lld\": %.4f", per_cta.empty() ? "" : ", ", (long long)cta, ms);
    per_cta += one;
  }
  if (opt.estimate_only) {
    stream_sync(st);
    stream_destroy(st);
    for (void* p : {q, k, v, o, (void*)range_ptr, (void*)col_ptr, (void*)ranges}) dev_free(p);
    std::fprintf(stderr, "prefill %d/%d/%d n=%lld: hip estimate %.2f ms (%.2f us per query block)\n", n_head, n_kv_head,
                 head_dim, (long long)n, estimate, 1e3 * estimate / double(n_qblk));
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "{\"case\": \"prefill_estimate\", \"n_head\": %d, \"n_kv_head\": %d, \"head_dim\": %d, \"len\": %lld, "
                  "\"hip_estimate_ms\": %.4f, \"hip_estimate_per_qblock_us\": %.3f, \"hip_estimate_ms_by_cta\": {%s}}",
                  n_head, n_kv_head, head_dim, (long long)n, estimate, 1e3 * estimate / double(n_qblk), per_cta.c_str());
    return buf;
  }
  // The same estimate over an fp8 copy of K (half the key bytes), and the copy's own cost.
  void* k8 = dev_malloc(size_t(ke));
  auto* amax = static_cast<unsigned*>(dev_malloc(4));
  const double copy = time_ms([&] { fp8_copy(k, ke, k8, amax, st); }, 1, 3, static_cast<cudaStream_t>(st));
  HipPrefillParams hp8 = hp;
  hp8.k_fp8 = k8;
  const double estimate8 = time_ms([&] { hip_estimate_prefill(hp8, st); }, 1, 3, static_cast<cudaStream_t>(st));
  const double jaccard = fp8_block_agreement(hp, hp8, n_qblk * n_head, st);
  hip_estimate_prefill(hp, st);  // the bf16 index for the sparse attention below
  SparseAttnParams sa;
  sa.q = q;
  sa.k = k;
  sa.v = v;
  sa.o = o;
  sa.n_q = sa.n_kv = n;
  sa.n_head = n_head;
  sa.n_kv_head = n_kv_head;
  sa.head_dim = head_dim;
  sa.index.n_index_head = n_head;
  sa.index.n_qblk = n_qblk;
  sa.index.range_ptr = range_ptr;
  sa.index.ranges = ranges;
  sa.index.col_ptr = col_ptr;
  sa.index.cols = nullptr;
  sa.index.n_ranges = entries * R;
  sa.index.n_cols = 0;
  sa.workspace_bytes = sparse_attention_workspace_bytes(sa.index);
  sa.workspace = dev_malloc(sa.workspace_bytes);
  const double sparse = time_ms([&] { sparse_attention(sa, st); }, 1, 3, static_cast<cudaStream_t>(st));
  // At head_dim 256 also the generic mma.sync kernel on the same index (the dispatch before the
  // Hopper kernel took 256): the A/B of that change.
  const bool ab_generic = head_dim == 256;
  const double sparse_generic =
      ab_generic ? time_ms([&] { sparse_attention_generic(sa, st); }, 1, 3, static_cast<cudaStream_t>(st)) : 0.0;
  // --window W: HiP + Self-Extend's near part on both kernels, and its far part (same index).
  double near = 0.0, near_generic = 0.0, far = 0.0;
  if (opt.window > 0) {
    SparseAttnParams sn = sa;
    sn.window = opt.window;
    near = time_ms([&] { sparse_attention(sn, st); }, 1, 3, static_cast<cudaStream_t>(st));
    near_generic = time_ms([&] { sparse_attention_generic(sn, st); }, 1, 3, static_cast<cudaStream_t>(st));
    SparseAttnParams sf = sa;
    sf.q_pos0 = -opt.window;
    far = time_ms([&] { sparse_attention(sf, st); }, 1, 3, static_cast<cudaStream_t>(st));
    std::fprintf(stderr, "prefill %d/%d/%d n=%lld: HiP + Self-Extend W=%lld: near (window) %.2f ms on "
                 "sparse_attention (generic kernel %.2f ms, %.2fx), far (q_pos0 -W) %.2f ms; near + far %.2f ms = "
                 "%.2fx plain HiP's %.2f ms\n", n_head, n_kv_head, head_dim, (long long)n, (long long)opt.window, near,
                 near_generic, near_generic / near, far, near + far, (near + far) / sparse, sparse);
  }
  // --fp8-tiles: the same index over e4m3 K (k8, from the estimate's copy) and V; scales read back
  double sparse8 = 0.0;
  if (opt.fp8_tiles) {
    void* v8 = dev_malloc(size_t(ke));
    fp8_copy(k, ke, k8, amax, st);
    const float k_scale = fp8_scale(amax, st);
    fp8_copy(v, ke, v8, amax, st);
    const float v_scale = fp8_scale(amax, st);
    SparseAttnParams s8 = sa;
    s8.k = k8;
    s8.v = v8;
    s8.kv_dtype = KvDtype::fp8_e4m3;
    s8.k_scale = k_scale;
    s8.v_scale = v_scale;
    sparse8 = time_ms([&] { sparse_attention(s8, st); }, 1, 3, static_cast<cudaStream_t>(st));
    std::fprintf(stderr, "prefill %d/%d/%d n=%lld: sparse attention, fp8 K/V tiles %.2f ms (bf16 %.2f ms, %.2fx); "
                 "fp8 cache total (fp8 estimate + fp8 tiles) %.2f ms\n", n_head, n_kv_head, head_dim, (long long)n,
                 sparse8, sparse, sparse / sparse8, estimate8 + sparse8);
    dev_free(v8);
  }
  stream_sync(st);
  stream_destroy(st);
  for (void* p : {q, k, v, o, k8, sa.workspace, (void*)amax, (void*)range_ptr, (void*)col_ptr, (void*)ranges}) dev_free(p);
  const double total = estimate + sparse, total8 = copy + estimate8 + sparse;
  const double est_per_block_us = 1e3 * estimate / double(n_qblk);  // all heads of one 64-query block
  std::fprintf(stderr,
               "prefill %d/%d/%d n=%lld (%s inputs): dense %.2f ms | hip estimate %.2f ms (%.2f us per query block) + sparse "
               "attention %.2f ms = %.2f ms | fp8 K: copy %.2f + estimate %.2f (%.2fx, block Jaccard vs bf16 %.4f) -> total %.2f ms | "
               "dense/hip %.2fx | generic sparse kernel %.2f ms\n",
               n_head, n_kv_head, head_dim, (long long)n, inputs, dense, estimate, est_per_block_us, sparse, total, copy,
               estimate8, estimate / estimate8, jaccard, total8, run_dense ? dense / total : 0.0, sparse_generic);
  char buf[2048];
  std::snprintf(buf, sizeof buf,
                "{\"case\": \"prefill\", \"inputs\": \"%s\", \"n_head\": %d, \"n_kv_head\": %d, \"head_dim\": %d, \"len\": %lld, "
                "\"dense_ms\": %.4f, \"dense_reps\": %d, \"hip_estimate_ms\": %.4f, \"hip_estimate_per_qblock_us\": %.3f, "
                "\"hip_sparse_attention_ms\": %.4f, \"hip_total_ms\": %.4f, \"fp8_copy_ms\": %.4f, "
                "\"hip_estimate_fp8_ms\": %.4f, \"hip_total_fp8_ms\": %.4f, \"ratio_dense_over_hip\": %.3f, "
                "\"hip_sparse_attention_generic_ms\": %.4f, \"hip_sparse_attention_fp8_tiles_ms\": %.4f, "
                "\"hip_total_fp8_cache_ms\": %.4f, \"fp8_block_jaccard\": %.5f, \"hip_estimate_ms_by_cta\": {%s}, "
                "\"se_window\": %lld, \"se_near_sparse_attention_ms\": %.4f, \"se_near_generic_ms\": %.4f, "
                "\"se_far_sparse_attention_ms\": %.4f}",
                inputs, n_head, n_kv_head, head_dim, (long long)n, dense, run_dense ? (long_run ? 1 : 3) : 0, estimate,
                est_per_block_us, sparse, total, copy, estimate8, total8, run_dense ? dense / total : 0.0, sparse_generic,
                sparse8, opt.fp8_tiles ? estimate8 + sparse8 : 0.0, jaccard, per_cta.c_str(), (long long)opt.window, near,
                near_generic, far);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> lens = {131072, 1048576};
  std::vector<int64_t> prefill = {131072};
  std::vector<Geometry> geometries = {Geometry{}};
  PrefillOptions popt;
  const char* json_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--lens") && i + 1 < argc) lens = bench::parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--prefill") && i + 1 < argc) prefill = bench::parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--dense-max") && i + 1 < argc) popt.dense_max = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--cta") && i + 1 < argc) popt.ctas = bench::parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--estimate-only")) popt.estimate_only = true;
    else if (!std::strcmp(argv[i], "--fp8-tiles")) popt.fp8_tiles = true;
    else if (!std::strcmp(argv[i], "--structured-qk")) popt.structured_qk = true;
    else if (!std::strcmp(argv[i], "--window") && i + 1 < argc) {
      popt.window = std::atoll(argv[++i]);
      if (popt.window <= 0) {
        std::fprintf(stderr, "longctx_bench_hip: --window wants a positive key count (Self-Extend's W), got '%s'\n",
                     argv[i]);
        return 2;
      }
    }
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--geometry") && i + 1 < argc) {
      geometries.clear();
      for (const char* t = argv[++i]; *t;) {
        Geometry g;
        int used = 0;
        if (std::sscanf(t, "%d/%d/%d%n", &g.heads, &g.kv_heads, &g.head_dim, &used) != 3 || g.kv_heads < 1 ||
            g.heads % g.kv_heads != 0) {
          std::fprintf(stderr, "longctx_bench_hip: --geometry wants H/KV/D,... (H a multiple of KV), got '%s'\n", t);
          return 2;
        }
        geometries.push_back(g);
        t += used;
        if (*t == ',') ++t;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--lens N,..] [--prefill N,..] [--geometry H/KV/D,..] [--dense-max N] [--cta 128,256,512] "
                   "[--estimate-only] [--fp8-tiles] [--structured-qk] [--window W] [--json FILE]\n",
                   argv[0]);
      return 2;
    }
  }
  for (const Geometry& g : geometries)
    if (popt.structured_qk && g.head_dim != 128) {
      std::fprintf(stderr, "longctx_bench_hip: --structured-qk needs head_dim 128 (structured_qk.h), got %d\n",
                   g.head_dim);
      return 2;
    }
  try {
    require_hopper();
    const HipEstimateConfig cfg;  // the paper's defaults
    char extra[320];
    std::snprintf(extra, sizeof extra,
                  "\"page_size\": %d, "
                  "\"hip\": {\"k\": %lld, \"b_q\": %d, \"b_sq\": %d, \"b_k\": %d, \"b_sk\": %d, \"window\": %lld, "
                  "\"sinks\": %lld, \"refresh\": %d}",
                  kPageSize, (long long)cfg.k, cfg.b_q, cfg.b_sq, cfg.b_k, cfg.b_sk, (long long)cfg.window,
                  (long long)cfg.sinks, kRefresh);
    bench::JsonRecord js(device_info(0), extra);
    // A case that fails (e.g. out of memory at a large geometry) is reported and the rest still run.
    int failed = 0;
    auto run_case = [&](const std::function<std::string()>& one) {
      try {
        js.add(one());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "longctx_bench_hip: case failed: %s\n", e.what());
        ++failed;
      }
    };
    for (const Geometry& g : geometries) {
      for (int64_t n : lens) run_case([&] { return bench_decode(n, cfg, g); });
      for (int64_t n : prefill) run_case([&] { return bench_prefill(n, cfg, g, popt); });
    }
    js.finish(json_path);
    if (failed) return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "longctx_bench_hip: %s\n", e.what());
    return 1;
  }
  return 0;
}

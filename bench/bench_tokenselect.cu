// bench_tokenselect.cu (bench): one decode step of TokenSelect, one layer of Llama-3-8B geometry
// (32 query / 8 KV heads, d = 128, bf16 KV), against dense decode over every key.
//
// What, at each --lens length (default 128K and 1M keys), batch 1, the paper's budget
// (128 initial + top-2048 + 512 local = 2688 keys):
//   - the selection of a cache miss, split: scoring (cuda::paged_dot over the M = N - 640
//     candidates' slots), softmax + head sum (cuda::soft_vote), top-k (cuda::top_k_select, M read
//     from the device's length as the engine's step does; CUB's sort, cuda::top_k_sorted, beside it), and
//     the attention over the selected slots (cuda::sparse_decode: ranges for the initial and
//     local keys + the k selected columns, page size 1);
//   - the whole miss step and a hit step (attention only: the selection cache reuses the slots),
//     eagerly and replayed from a CUDA graph;
//   - dense cuda::attention_decode over all N keys (page size 64), the baseline the engine runs.
// torch SDPA (cuDNN) dense decode on the same shapes runs beside it in the same device call
// (bench/torch_baseline.py; scripts/gpu-tokenselect.sh). One pool serves both views: dense reads
// it through a shuffled 64-token page table, TokenSelect through the equivalent slot table.
// Keys are read as stored (rotated) in these decode rows.
// Then, at each --chunk-lens length (default 128K, 512K, 1M), one 512-token prefill chunk after
// that many keys through TokenSelectGpuStep (methods/tokenselect/tokenselect_gpu.h: pre-RoPE
// keys, selection by the chunk's rotated mean query, the budget's keys gathered, re-rotated at
// 0..L-1 and attended densely), split into selection query, scoring, softmax+sum, top-k,
// compaction (gather + RoPE) and attention, against our dense chunked prefill over all N keys
// (cuda::attention_prefill, q_pos0 = N - 512); the pre-RoPE decode step (hit: compaction +
// attention of one query) beside them. torch SDPA's dense chunk (cuDNN, flash) runs in the same
// device call (bench/torch_baseline.py --chunk).
// Scoring over fp8 e4m3 keys (the pool's keys quantized as an fp8 cache stores them) beside the
// bf16 scan, in the decode rows and the chunk's split, with the soft vote's per-head max / sum
// fused into the scan (cuda::paged_dot's head_stats); the selection overlap of the two scorings
// (on these random keys); decode per token vs the selection cache's hit rate (--hit-rates: runs
// of 40 decode steps, hits and misses interleaved at that rate, each replayed from its graph).
// The chunk rows also run with the per-head scores stored as fp16 (TokenSelectGpuShape::scores)
// and over an fp8 cache (e4m3 K and V: the compaction widens the budget's rows), and the chunk
// at head_dim 256 (Gemma 3's global layers, 4 query / 1 KV head; --d256-lens, default 128K).
// Inputs random (never zeros); CUDA events, warmup, median.
// Run: build-gpu/bench/longctx_bench_tokenselect [--lens 131072,1048576]
//        [--chunk-lens 131072,524288,1048576] [--d256-lens 131072]
//        [--hit-rates 0.967,0.639,0.205,0.026,0,1] [--json out.json]   (an empty list skips)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/paged_decode.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/fp8_vec.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/paged_dot.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/soft_vote.h"
#include "kernels/cuda/sparse_decode.h"
#include "kernels/cuda/topk_select.h"
#include "methods/tokenselect/tokenselect_gpu.h"

using namespace longctx;
using namespace longctx::cuda;
using longctx::bench::time_ms;
using longctx::bench::time_step;
using longctx::bench::Timing;

namespace {

constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128;  // Llama-3-8B attention geometry
constexpr int kInit = 128, kTopK = 2048, kLocal = 512;     // the paper's 2K+512 budget
constexpr int kPageSize = 64;                              // dense decode's page size
constexpr int kChunk = 512;                                // the paper's prefill chunk

// The pool's keys as an fp8 cache stores them: e4m3(k / scale), n a multiple of 8.
__global__ void quantize_keys_kernel(const uint4* __restrict__ k, uint2* __restrict__ k8, int64_t n8, float inv_scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n8; i += int64_t(gridDim.x) * blockDim.x)
    k8[i] = fp8vec::quantize8(k[i], inv_scale);
}
// fill_random_bf16(.., scale 1) draws from [-1, 1): amax 1, the fp8 cache's scale rule amax / 448.
constexpr float kKeyFp8Scale = 1.f / 448.f;
void* fp8_keys(const void* k, int64_t elems) {
  void* k8 = dev_malloc(size_t(elems));
  quantize_keys_kernel<<<fp8vec::blocks_for(elems / 8), fp8vec::kThreads>>>(static_cast<const uint4*>(k),
                                                                             static_cast<uint2*>(k8), elems / 8,
                                                                             1.f / kKeyFp8Scale);
  LC_LAUNCH_CHECK("quantize_keys (%lld)", (long long)elems);
  return k8;
}

// Decode per token vs the selection cache's hit rate: a run of kSeq decode steps whose hits
// (attention over the last selection) and misses (selection + attention) follow the rate
// evenly, each kind replayed from its CUDA graph; ms per step.
constexpr int kSeq = 40;
double decode_run_ms(const std::function<void(Stream)>& miss, const std::function<void(Stream)>& hit, double rate) {
  Stream st = stream_create();
  CudaGraph gm, gh;
  miss(st);
  hit(st);
  gm.begin_capture(st);
  miss(st);
  gm.end_capture(st);
  gh.begin_capture(st);
  hit(st);
  gh.end_capture(st);
  const double ms = time_ms(
      [&] {
        double acc = 0;  // Bresenham: step i hits when the running hit count crosses an integer
        for (int i = 0; i < kSeq; ++i) {
          const double next = acc + rate;
          if (int(next) > int(acc)) gh.launch(st);
          else gm.launch(st);
          acc = next;
        }
      },
      2, 10, static_cast<cudaStream_t>(st));
  stream_destroy(st);
  return ms / kSeq;
}

std::string run_len(int64_t N) {
  const int n_pages = int((N + kPageSize - 1) / kPageSize);
  const std::vector<int32_t> pages = bench::shuffled_pages(n_pages);  // [1, n_pages]
  const std::vector<int32_t> slots = bench::page_slots(pages, kPageSize, N);  // the page-size-1 slot table of the same pool
  const int64_t rows = int64_t(n_pages) * kPageSize, elems = rows * kKvHeads * kHeadDim;
  void* k = dev_malloc(size_t(elems) * 2);
  void* v = dev_malloc(size_t(elems) * 2);
  fill_random_bf16(k, elems, 12, 1.f);
  fill_random_bf16(v, elems, 13, 1.f);
  void* q = dev_malloc(kHeads * kHeadDim * 2);
  void* o = dev_malloc(kHeads * kHeadDim * 2);
  fill_random_bf16(q, kHeads * kHeadDim, 11, 1.f);
  using bench::upload_i32;
  int32_t* d_pages = upload_i32(pages);
  int32_t* d_slots = upload_i32(slots);
  int32_t* d_len = upload_i32({int32_t(N)});
  const int64_t M = N - kInit - kLocal;
  auto* scores = static_cast<float*>(dev_malloc(size_t(kHeads) * M * 4));
  auto* vote = static_cast<float*>(dev_malloc(size_t(M) * 4));
  void* vote_ws = dev_malloc(soft_vote_workspace_bytes(kHeads));
  const size_t topk_bytes = top_k_workspace_bytes(M, kTopK);
  void* topk_ws = dev_malloc(topk_bytes);
  // The decode index: one shared row, ranges (initial, local) + the k selected columns.
  int32_t* range_ptr = upload_i32({0, 2});
  int32_t* ranges = upload_i32({0, kInit, int32_t(N - kLocal), int32_t(N)});
  int32_t* col_ptr = upload_i32({0, kTopK});
  auto* cols = static_cast<int32_t*>(dev_malloc(kTopK * 4));

  SparseDecodeParams sp;
  sp.q = q;
  sp.o = o;
  sp.n_head = kHeads;
  // Dense reads the pool through 64-token pages, TokenSelect through the page-size-1 slots.
  const KvView paged{.k_pool = k, .v_pool = v, .elem = KvElem::bf16, .block_table = d_pages, .seq_lens = d_len,
                     .n_seq = 1, .max_pages_per_seq = n_pages, .page_size = kPageSize, .n_pages = n_pages,
                     .n_kv_head = kKvHeads, .head_dim = kHeadDim, .on_device = true};
  KvView slotted = paged;
  slotted.block_table = d_slots;
  slotted.max_pages_per_seq = int(N);
  slotted.page_size = 1;
  slotted.n_pages = rows;
  sp.kv = slotted;
  sp.index = {.n_seq = 1, .n_index_head = 1, .range_ptr = range_ptr, .ranges = ranges, .col_ptr = col_ptr,
              .cols = cols, .range_capacity = 2, .col_capacity = kTopK, .on_device = true};
  sp.max_keys_per_row = kInit + kTopK + kLocal;
  bench::alloc_sparse_decode_workspace(sp);

  const PagedDotParams dp{.q = q, .k_pool = k, .slots = d_slots + kInit, .scores = scores, .n_slot = M,
                          .n_head = kHeads, .n_kv_head = kKvHeads, .head_dim = kHeadDim};
  const SoftVoteParams vp{.scores = scores, .vote = vote, .n_head = kHeads, .M = M, .naive = false, .workspace = vote_ws};
  const TopKParams tp{.vote = vote, .M = M, .k = kTopK, .offset = kInit, .out = cols, .workspace = topk_ws,
                      .workspace_bytes = topk_bytes};

  const DecodeParams d = bench::dense_decode_over(paged, q, o, kHeads, N);

  const int reps = N > (int64_t(1) << 20) - 1 ? 30 : 100;
  const Timing t_score = time_step([&](Stream s) { paged_dot(dp, s); }, reps);
  const Timing t_vote = time_step([&](Stream s) { soft_vote(vp, s); }, reps);
  // The soft vote's max / sum fused into the scan, and the scan over fp8 keys.
  void* stats = dev_malloc(size_t(kHeads) * paged_dot_max_stats_parts() * 8);
  PagedDotParams dpf = dp;
  dpf.head_stats = static_cast<float*>(stats);
  SoftVoteParams vpf = vp;
  vpf.head_stats = dpf.head_stats;
  vpf.stats_parts = paged_dot_stats_parts(M, kKvHeads);
  void* k8 = fp8_keys(k, elems);
  PagedDotParams dp8 = dpf;
  dp8.k_pool = k8, dp8.k_elem = PagedDotKeys::fp8_e4m3, dp8.k_scale = kKeyFp8Scale;
  const Timing t_score_f = time_step([&](Stream s) { paged_dot(dpf, s); }, reps);
  const Timing t_vote_f = time_step([&](Stream s) { soft_vote(vpf, s); }, reps);
  const Timing t_score8 = time_step([&](Stream s) { paged_dot(dp8, s); }, reps);
  const TopKSelectParams sel{.vote = vote, .max_M = M, .m_dev = d_len, .m_sub = int32_t(kInit + kLocal), .k = kTopK,
                             .offset = kInit, .out = cols, .workspace = dev_malloc(top_k_select_workspace_bytes())};
  const Timing t_topk_cub = time_step([&](Stream s) { top_k_sorted(tp, s); }, reps);
  const Timing t_topk = time_step([&](Stream s) { top_k_select(sel, s); }, reps);
  const Timing t_attn = time_step([&](Stream s) { sparse_decode(sp, s); }, 300);
  const Timing t_miss = time_step(
      [&](Stream s) {
        paged_dot(dp, s);
        soft_vote(vp, s);
        top_k_select(sel, s);
        sparse_decode(sp, s);
      },
      reps);
  const Timing t_miss8 = time_step(
      [&](Stream s) {
        paged_dot(dp8, s);
        soft_vote(vpf, s);
        top_k_select(sel, s);
        sparse_decode(sp, s);
      },
      reps);
  const Timing t_dense = time_step([&](Stream s) { attention_decode(d, s); }, reps);
  device_sync();

  const double cand_gb = double(M) * kKvHeads * kHeadDim * 2 / 1e9;  // keys read by scoring
  std::fprintf(stderr,
               "N=%lld: miss step %.4f ms graph (%.4f eager) = score %.4f (%.0f GB/s K) + softmax+sum %.4f + top-k %.4f (CUB sort %.4f) "
               "+ attention %.4f | hit step (attention) %.4f ms | dense decode %.4f ms | dense/miss %.2fx, "
               "dense/hit %.1fx\n",
               (long long)N, t_miss.graph_ms, t_miss.eager_ms, t_score.graph_ms, cand_gb / (t_score.graph_ms * 1e-3),
               t_vote.graph_ms, t_topk.graph_ms, t_topk_cub.graph_ms, t_attn.graph_ms, t_attn.graph_ms, t_dense.graph_ms,
               t_dense.graph_ms / t_miss.graph_ms, t_dense.graph_ms / t_attn.graph_ms);
  std::fprintf(stderr,
               "N=%lld fused/fp8: score+stats bf16 %.4f ms, fp8 %.4f ms (%.0f GB/s K) | softmax+sum from stats %.4f ms | "
               "fp8 miss step %.4f ms, dense/miss %.2fx\n",
               (long long)N, t_score_f.graph_ms, t_score8.graph_ms, cand_gb / 2 / (t_score8.graph_ms * 1e-3),
               t_vote_f.graph_ms, t_miss8.graph_ms, t_dense.graph_ms / t_miss8.graph_ms);
  char buf[1536];
  std::snprintf(buf, sizeof buf,
                "{\"n_kv\": %lld, \"candidates\": %lld, \"score_ms\": %.5f, \"score_K_GBps\": %.1f, "
                "\"softmax_sum_ms\": %.5f, \"topk_ms\": %.5f, \"topk_cub_sort_ms\": %.5f, \"attention_ms\": %.5f, \"miss_step_ms_graph\": %.5f, "
                "\"miss_step_ms_eager\": %.5f, \"hit_step_ms_graph\": %.5f, \"dense_decode_ms_graph\": %.5f, "
                "\"dense_decode_ms_eager\": %.5f, \"dense_over_miss\": %.3f, \"dense_over_hit\": %.3f, "
                "\"score_stats_bf16_ms\": %.5f, \"score_stats_fp8_ms\": %.5f, \"softmax_sum_from_stats_ms\": %.5f, "
                "\"miss_step_fp8_ms_graph\": %.5f}",
                (long long)N, (long long)M, t_score.graph_ms, cand_gb / (t_score.graph_ms * 1e-3), t_vote.graph_ms,
                t_topk.graph_ms, t_topk_cub.graph_ms, t_attn.graph_ms, t_miss.graph_ms, t_miss.eager_ms, t_attn.graph_ms, t_dense.graph_ms,
                t_dense.eager_ms, t_dense.graph_ms / t_miss.graph_ms, t_dense.graph_ms / t_attn.graph_ms,
                t_score_f.graph_ms, t_score8.graph_ms, t_vote_f.graph_ms, t_miss8.graph_ms);
  for (void* p : {stats, k8, sel.workspace, k, v, q, o, (void*)d_pages, (void*)d_slots, (void*)d_len, (void*)scores, (void*)vote, vote_ws, topk_ws,
                  (void*)range_ptr, (void*)ranges, (void*)col_ptr, (void*)cols, sp.workspace, d.workspace})
    dev_free(p);
  return buf;
}


// One 512-token prefill chunk after N - 512 keys: TokenSelect's step by stages vs dense.
// The attention geometry of a chunk row: Llama-3-8B (the paper's scale) or Gemma 3's global
// layers (issue 19: head_dim 256, 4 query / 1 KV head).
struct Geo {
  const char* name;
  int heads, kv_heads, head_dim;
};
constexpr Geo kLlama3{"llama3-8b", kHeads, kKvHeads, kHeadDim};
constexpr Geo kGemma3Global{"gemma3-global", 4, 1, 256};

std::string run_chunk(int64_t N, const Geo& g, const std::vector<double>& hit_rates) {
  const int H = g.heads, Hkv = g.kv_heads, D = g.head_dim;
  const int64_t W = int64_t(Hkv) * D;
  void* k = dev_malloc(size_t(N * W) * 2);
  void* v = dev_malloc(size_t(N * W) * 2);
  fill_random_bf16(k, N * W, 22, 1.f);
  fill_random_bf16(v, N * W, 23, 1.f);
  void* q = dev_malloc(size_t(kChunk) * H * D * 2);
  void* o = dev_malloc(size_t(kChunk) * H * D * 2);
  fill_random_bf16(q, int64_t(kChunk) * H * D, 21, 1.f);
  // 64-token pages in shuffled order (a seed of its own), seen as page-size-1 slots
  const std::vector<int32_t> slots = bench::page_slots(bench::shuffled_pages(N / kPageSize, 9), kPageSize, N);
  int32_t* d_slots = bench::upload_i32(slots);
  std::vector<float> inv(size_t(D / 2));
  for (int i = 0; i < D / 2; ++i) inv[size_t(i)] = 1.f / std::pow(500000.f, float(2 * i) / float(D));
  auto* d_inv = static_cast<float*>(dev_malloc(inv.size() * 4));
  copy_h2d(d_inv, inv.data(), inv.size() * 4);

  const TokenSelectParams t;  // the paper's defaults: 128 + 2048 + 512, chunk 512
  const TokenSelectGpuShape shape{.n_head = H, .n_kv_head = Hkv, .head_dim = D, .max_kv = N, .max_rows = kChunk};
  TokenSelectGpuShape shape16 = shape;
  shape16.scores = ScoreElem::f16;
  TokenSelectGpuStep step(t, shape), step16(t, shape16);  // fp32 / fp16 per-head scores
  const TokenSelectGpuInput in{.q = q, .n_rows = kChunk, .n_kv = N, .k_pool = k, .v_pool = v, .slots = d_slots,
                               .inv_freq = d_inv, .o = o};
  TokenSelectGpuInput in1 = in;  // a decode step: the chunk's first query
  in1.n_rows = 1;

  PrefillParams dp;  // dense: the chunk against every key (rows of the pool in position order)
  dp.q = q;
  dp.k = k;
  dp.v = v;
  dp.o = o;
  dp.n_q = kChunk;
  dp.n_kv = N;
  dp.n_head = H;
  dp.n_kv_head = Hkv;
  dp.head_dim = D;
  dp.q_pos0 = N - kChunk;
  dp.causal = true;

  // The same step scoring e4m3 keys (a bf16 cache's fp8 shadow), and over an fp8 cache (e4m3 K
  // and V: scored as is, the budget's rows widened to bf16 by the compaction).
  void* k8 = fp8_keys(k, N * W);
  void* v8 = fp8_keys(v, N * W);
  TokenSelectGpuInput in8 = in;
  in8.k_score = k8, in8.k_score_scale = kKeyFp8Scale;
  TokenSelectGpuInput in8_1 = in8;
  in8_1.n_rows = 1;
  TokenSelectGpuInput in_pool8 = in;
  in_pool8.k_pool = k8, in_pool8.v_pool = v8, in_pool8.pool_fp8 = true;
  in_pool8.k_scale = in_pool8.v_scale = kKeyFp8Scale;

  const int reps = N >= (int64_t(1) << 20) ? 20 : 50;
  struct Split {
    Timing query, score, vote, topk, compact, attn, step;
  };
  auto split = [&](TokenSelectGpuStep& st_, const TokenSelectGpuInput& x) {
    Split r{};
    r.query = time_step([&](Stream s) { st_.stage_query(x, s); }, reps);
    r.score = time_step([&](Stream s) { st_.stage_score(x, s); }, reps);
    r.vote = time_step([&](Stream s) { st_.stage_vote(x, s); }, reps);
    r.topk = time_step([&](Stream s) { st_.stage_top_k(x, s); }, reps);
    r.compact = time_step([&](Stream s) { st_.stage_compact(x, s); }, reps);
    r.attn = time_step([&](Stream s) { st_.stage_attention(x, s); }, reps);
    r.step = time_step([&](Stream s) { st_.step(x, s); }, reps);
    return r;
  };
  // Variants: keys read by the scan (bf16 / e4m3 shadow / the fp8 cache) x scores' storage.
  struct Variant {
    const char* name;
    TokenSelectGpuStep* st;
    const TokenSelectGpuInput* in;
    double key_bytes;  // per key element read by the scan
    Split r;
  };
  std::vector<Variant> vars = {{"bf16_keys", &step, &in, 2, {}},          {"fp8_keys", &step, &in8, 1, {}},
                               {"bf16_keys_f16_scores", &step16, &in, 2, {}}, {"fp8_keys_f16_scores", &step16, &in8, 1, {}},
                               {"fp8_cache", &step, &in_pool8, 1, {}},   {"fp8_cache_f16_scores", &step16, &in_pool8, 1, {}}};
  for (auto& x : vars) x.r = split(*x.st, *x.in);
  const Timing t_hit1 = time_step([&](Stream s) { step.attend(in1, s); }, 100);
  const Timing t_miss1 = time_step([&](Stream s) { step.step(in1, s); }, reps);
  const Timing t_miss1_8 = time_step([&](Stream s) { step.step(in8_1, s); }, reps);
  const Timing t_miss1_8_16 = time_step([&](Stream s) { step16.step(in8_1, s); }, reps);
  const Timing t_dense = time_step([&](Stream s) { attention_prefill(dp, s); }, N >= (int64_t(1) << 20) ? 5 : 10);
  // Decode per token vs the hit rate (bf16 and fp8 scoring), the rates of the CPU theta sweep.
  std::string per_rate;
  for (double rate : hit_rates) {
    const double ms_b = decode_run_ms([&](Stream s) { step.step(in1, s); }, [&](Stream s) { step.attend(in1, s); }, rate);
    const double ms_f = decode_run_ms([&](Stream s) { step.step(in8_1, s); }, [&](Stream s) { step.attend(in8_1, s); }, rate);
    char one[160];
    std::snprintf(one, sizeof one, "%s{\"hit_rate\": %.3f, \"bf16_ms\": %.5f, \"fp8_ms\": %.5f}", per_rate.empty() ? "" : ", ",
                  rate, ms_b, ms_f);
    per_rate += one;
    std::fprintf(stderr, "decode N=%lld hit rate %.3f: %.4f ms per step (bf16 scoring), %.4f ms (fp8)\n", (long long)N,
                 rate, ms_b, ms_f);
  }
  // Selection overlaps on these (random) keys, |I_a ∩ I_b| / k: fp8 vs bf16 keys; fp16 vs fp32 scores.
  const int64_t n_sel = TokenSelectParams{}.k;
  auto selected = [&](TokenSelectGpuStep& st_, const TokenSelectGpuInput& x) {
    st_.select(x, nullptr);
    std::vector<int32_t> h(static_cast<size_t>(n_sel));
    copy_d2h(h.data(), st_.selected(), h.size() * 4);
    std::sort(h.begin(), h.end());
    return h;
  };
  auto overlap_of = [&](const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    std::vector<int32_t> common;
    std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(common));
    return double(common.size()) / double(n_sel);
  };
  const std::vector<int32_t> sel_b = selected(step, in), sel_f = selected(step, in8);
  const std::vector<int32_t> sel_b16 = selected(step16, in), sel_f16 = selected(step16, in8);
  const double overlap = overlap_of(sel_b, sel_f), overlap16_b = overlap_of(sel_b, sel_b16),
               overlap16_f = overlap_of(sel_f, sel_f16);
  device_sync();

  const double key_elems = double(N - kInit - kLocal) * W;
  const double dense_tflops = 4.0 * kChunk * double(N) * H * D / (t_dense.graph_ms * 1e-3) / 1e12;
  std::string rows;
  for (const Variant& v_ : vars) {
    const Split& x = v_.r;
    const double gb = key_elems * v_.key_bytes / 1e9;
    std::fprintf(stderr,
                 "chunk %s N=%lld %s: tokenselect step %.4f ms graph (%.4f eager) = query %.4f + score+stats %.4f "
                 "(%.0f GB/s K) + softmax+sum %.4f + top-k %.4f + compact %.4f + attention %.4f | dense chunk %.3f ms "
                 "(%.0f TFLOP/s) = %.1fx\n",
                 g.name, (long long)N, v_.name, x.step.graph_ms, x.step.eager_ms, x.query.graph_ms, x.score.graph_ms,
                 gb / (x.score.graph_ms * 1e-3), x.vote.graph_ms, x.topk.graph_ms, x.compact.graph_ms, x.attn.graph_ms,
                 t_dense.graph_ms, dense_tflops, t_dense.graph_ms / x.step.graph_ms);
    char one[512];
    std::snprintf(one, sizeof one,
                  "\"%s\": {\"query_ms\": %.5f, \"score_ms\": %.5f, \"score_K_GBps\": %.1f, \"softmax_sum_ms\": %.5f, "
                  "\"topk_ms\": %.5f, \"compact_ms\": %.5f, \"attention_ms\": %.5f, \"step_ms_graph\": %.5f, "
                  "\"step_ms_eager\": %.5f, \"dense_over_step\": %.3f}, ",
                  v_.name, x.query.graph_ms, x.score.graph_ms, gb / (x.score.graph_ms * 1e-3), x.vote.graph_ms,
                  x.topk.graph_ms, x.compact.graph_ms, x.attn.graph_ms, x.step.graph_ms, x.step.eager_ms,
                  t_dense.graph_ms / x.step.graph_ms);
    rows += one;
  }
  std::fprintf(stderr,
               "chunk %s N=%lld: pre-RoPE decode hit %.4f ms, miss %.4f ms (fp8 scoring %.4f, + fp16 scores %.4f) | "
               "selection overlap (random keys): fp8 vs bf16 keys %.4f, fp16 vs fp32 scores %.4f (bf16 keys) %.4f (fp8)\n",
               g.name, (long long)N, t_hit1.graph_ms, t_miss1.graph_ms, t_miss1_8.graph_ms, t_miss1_8_16.graph_ms, overlap,
               overlap16_b, overlap16_f);
  char head[256];
  std::snprintf(head, sizeof head,
                "{\"geometry\": \"%s\", \"n_head\": %d, \"n_kv_head\": %d, \"head_dim\": %d, \"chunk_after_n_kv\": %lld, "
                "\"chunk\": %d, ",
                g.name, H, Hkv, D, (long long)N, kChunk);
  std::string buf = head + rows;
  char tail[768];
  std::snprintf(tail, sizeof tail,
                "\"dense_chunk_ms\": %.5f, \"dense_chunk_tflops\": %.1f, \"pre_rope_decode_hit_ms\": %.5f, "
                "\"pre_rope_decode_miss_ms\": %.5f, \"pre_rope_decode_miss_fp8_ms\": %.5f, "
                "\"pre_rope_decode_miss_fp8_f16_scores_ms\": %.5f, "
                "\"selection_overlap_fp8_vs_bf16_random_keys\": %.5f, "
                "\"selection_overlap_f16_vs_f32_scores_bf16_keys\": %.5f, "
                "\"selection_overlap_f16_vs_f32_scores_fp8_keys\": %.5f, \"fp8_key_scale\": %.6g, \"decode_vs_hit_rate\": [",
                t_dense.graph_ms, dense_tflops, t_hit1.graph_ms, t_miss1.graph_ms, t_miss1_8.graph_ms,
                t_miss1_8_16.graph_ms, overlap, overlap16_b, overlap16_f, double(kKeyFp8Scale));
  buf += tail + per_rate + "]}";
  dev_free(k8);
  dev_free(v8);
  for (void* p : {k, v, q, o, (void*)d_slots, (void*)d_inv}) dev_free(p);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> lens = {131072, 1048576}, chunk_lens = {131072, 524288, 1048576}, d256_lens = {131072};
  // The selection cache's hit rates at theta 0.5 / 0.8 / 0.9 / 0.95 / off on the default model
  // (docs/benchmarks.md, bench/tokenselect_cache.cpp), and every step a hit.
  std::vector<double> hit_rates = {0.967, 0.639, 0.205, 0.026, 0.0, 1.0};
  const char* json_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--lens") && i + 1 < argc) lens = bench::parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--chunk-lens") && i + 1 < argc) chunk_lens = bench::parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--d256-lens") && i + 1 < argc) d256_lens = bench::parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--hit-rates") && i + 1 < argc) {
      hit_rates.clear();
      for (char* c = argv[++i]; *c;) {
        char* end = nullptr;
        const double r = std::strtod(c, &end);
        if (end == c || r < 0.0 || r > 1.0 || (*end && *end != ',')) {
          std::fprintf(stderr, "longctx_bench_tokenselect: --hit-rates wants rates in [0, 1], e.g. 0.5,0.9\n");
          return 2;
        }
        hit_rates.push_back(r);
        c = *end ? end + 1 : end;
      }
    }
    else {
      std::fprintf(stderr, "usage: %s [--lens N,..] [--chunk-lens N,..] [--d256-lens N,..] [--hit-rates r,..] [--json FILE]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    require_hopper();
    char extra[256];
    std::snprintf(extra, sizeof extra,
                  "\"shape\": {\"n_head\": %d, \"n_kv_head\": %d, \"head_dim\": %d, \"kv\": \"bf16\", \"n_init\": %d, "
                  "\"k\": %d, \"n_local\": %d}",
                  kHeads, kKvHeads, kHeadDim, kInit, kTopK, kLocal);
    bench::JsonRecord js(device_info(0), extra);
    for (int64_t n : lens) js.add(run_len(n));
    for (int64_t n : chunk_lens) js.add(run_chunk(n, kLlama3, hit_rates));
    for (int64_t n : d256_lens) js.add(run_chunk(n, kGemma3Global, {}));
    js.finish(json_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "longctx_bench_tokenselect: %s\n", e.what());
    return 1;
  }
  return 0;
}

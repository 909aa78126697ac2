// bench_infinitehip.cu (bench): InfiniteHiP decode attention on one layer of Llama-3-8B geometry
// (32 query / 8 KV heads, d = 128, bf16, paged cache with page 64 and a shuffled block table),
// against our dense decode (torch SDPA cuDNN runs beside it in scripts/gpu-infinitehip.sh,
// bench/torch_baseline.py, on the same shapes).
//
// What, at each --lens length, batch 1, the 3K preset (l_c 256/32/8, k 32768/8192/2048, sinks
// 256, window 1024), every step replayed from its own CUDA graph:
//   None   stage 1 + stage 2 + stage 3 (ihip_prune_stage_decode) + index + cuda::sparse_decode
//   S1     stages 2, 3 (stage 1's output cached) + index + sparse decode
//   S1&2   stage 3 + index + sparse decode
//   All    sparse decode over the cached index
// and their averages over the paper's schedule (16, 8, 4): (None + S1 + 2 S1&2 + 12 All) / 16,
// and 3K-fast's (32, 16, 8): (None + S1 + 2 S1&2 + 28 All) / 32. Pruning RoPE: none (rope=off:
// keys rotated in the cache) for the steps; each stage alone is also timed with relative RoPE
// (rope=on's pruning: every probed key rotated from the cos/sin table).
// Prefill (--prefix): a chunk of --chunk queries (32K) after each prefix of keys, contiguous bf16
// K/V as the GPU model holds a layer: the three stages over every 64-query block
// (ihip_prune_stage_prefill; score and select timed apart), the index (ihip_prefill_index) and
// cuda::sparse_attention over it, against our dense causal prefill (attention_prefill) of the same
// chunk; torch cuDNN runs beside it (torch_baseline.py --chunk-lens). Pruning RoPE none (rope=off),
// or --prefill-rope relative (rope=on's pruning; --prefill-scorer mma, the default: tensor cores on
// bf16-rounded rotated operands where one query tile holds a KV head's block queries, or fma: the
// fp32 scorer bit-equal to the CPU reference; RoPE none scores on wgmma, or on mma.sync with
// --prefill-scorer mma-sync: the A/B in one binary); --prefill-shape H,Hkv,D sets the
// prefill case's heads (4,1,256: gemma-3-270m's global layers). Also timed: rope=on's attention
// (per block: compact_kv + rotated queries + dense causal kernel over the block's ~3.4K keys),
// blocks one after another (main's order) and on 8 streams (IhipCompactAttention::attend_blocks).
// --kv bf16,fp8: the decode steps also over the fp8 cache (--kv-cache fp8: e4m3 K/V, one scale
// each; the pruning stages read e4m3 keys, sparse and dense decode e4m3 K/V), each cache in turn.
// Each decode length also times rope=on's steps (bench_rope_on_decode: relative pruning RoPE, the
// key list, the gather dequantising / rotating the set, dense decode over it), over either cache.
// Inputs are random (never zeros): the pruning cost does not depend on the values.
// Run: build-gpu/bench/longctx_bench_infinitehip [--lens 131072,1048576] [--kv bf16,fp8]
//      [--prefix 131072,..] [--chunk 32768] [--prefill-shape 4,1,256] [--prefill-rope relative]
//      [--prefill-scorer mma|mma-sync|fma] [--prefill-prefetch on|off] [--prefill-skip-dense]
//      [--rank paper|local] [--json F]
// --prefill-prefetch on: the RoPE-none scorer also warms L2 with the next step's candidate keys
// (IhipPrefillGpuParams::l2_prefetch, off by default: the A/B in one binary); --prefill-skip-dense
// leaves out the dense and rope=on attention timings (0 in the line) so a variant's run costs the
// InfiniteHiP steps only. --rank local: rank=local's pruning (IhipPrefillGpuParams::offset: each
// stage's offsets kernel, timed apart, then the scorer subtracting them; --prefill-scorer fma with
// --prefill-rope relative forces the fp32 FMA scorer it ran on before the tensor cores took it),
// or paper (the default).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/paged_decode.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/compact_kv.h"
#include "kernels/cuda/fp8_vec.cuh"
#include "kernels/cuda/ihip_decode_cache.h"
#include "kernels/cuda/ihip_prune.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/sparse_attention.h"
#include "kernels/cuda/sparse_decode.h"

using namespace longctx;
using namespace longctx::cuda;
using longctx::bench::graph_ms;
using longctx::bench::time_ms;

namespace {

constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128;  // Llama-3-8B attention geometry
constexpr int kPageSize = 64;
constexpr int64_t kSink = 256, kStream = 1024;
constexpr int kLc[3] = {256, 32, 8};
constexpr int64_t kK[3] = {32768, 8192, 2048};

// The fp8 cache's random values: N(0, 1) bf16 values quantized with the scale of amax = kFp8Amax
// (values past it saturate, as the cache's rule never lets them).
constexpr float kFp8Amax = 5.f;
__global__ void quantize_kernel(const __nv_bfloat16* x, uint8_t* y, int64_t n, float inv_scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = fp8vec::to_e4m3(__bfloat162float(x[i]) * inv_scale);
}
// Random pool of n elements (bf16, or e4m3 with *scale = kFp8Amax / 448).
void* random_pool(int64_t n, uint64_t seed, bool fp8, float* scale) {
  void* x = dev_malloc(size_t(n) * 2);
  fill_random_bf16(x, n, seed, 1.f);
  *scale = 1.f;
  if (!fp8) return x;
  void* y = dev_malloc(size_t(n));
  *scale = kFp8Amax / 448.f;
  quantize_kernel<<<fp8vec::blocks_for(n), fp8vec::kThreads>>>(static_cast<const __nv_bfloat16*>(x),
                                                               static_cast<uint8_t*>(y), n, 1.f / *scale);
  device_sync();
  dev_free(x);
  return y;
}

// rope=on's decode step (IhipGpu::attend_decode): the stages with relative pruning RoPE (the
// un-rotated cache; rope=on's layers past the first), the key list from the last stage's cache
// (ihip_decode_keys: sinks, survivors, window), then IhipCompactAttention::attend_decode: the
// list's keys gathered and rotated at 0..L-1 (compact_kv; the fp8 cache: e4m3 rows dequantised
// first), the query rotated at L - 1, the dense split-KV decode over the L gathered keys.
struct RopeOnDecode {
  double none = 0, s1 = 0, s12 = 0, all = 0;  // step types as bench_decode's, each with the attention
  double attend = 0, keys = 0;                // the gather + rotate + decode alone; ihip_decode_keys alone
  double avg() const { return (none + s1 + 2 * s12 + 12 * all) / 16; }
};

RopeOnDecode bench_rope_on_decode(int64_t len, bool fp8, const KvView& kv, const IhipStageGpuParams* stages,
                                  const void* q, void* o, const std::vector<int32_t>& page_of, int reps) {
  // position -> pool row through the shuffled block table (compact_kv's page-size-1 slots)
  const std::vector<int32_t> slot = bench::page_slots(page_of, kPageSize, len);
  const int64_t max_keys = std::min<int64_t>(len, kSink + kK[2] + kStream + 16);  // + refresh[0] - 1 window growth
  std::vector<float> f(kHeadDim / 2);
  for (int i = 0; i < kHeadDim / 2; ++i) f[size_t(i)] = float(std::pow(500000.0, -2.0 * i / kHeadDim));
  auto* d_slot = static_cast<int32_t*>(dev_malloc(slot.size() * 4));
  auto* d_f = static_cast<float*>(dev_malloc(f.size() * 4));
  auto* d_keys = static_cast<int32_t*>(dev_malloc(size_t(max_keys) * 4));
  auto* d_ints = static_cast<int32_t*>(dev_malloc(8));  // n_keys, q_pos
  copy_h2d(d_slot, slot.data(), slot.size() * 4);
  copy_h2d(d_f, f.data(), f.size() * 4);
  const size_t kv_bytes = size_t(max_keys) * kKvHeads * kHeadDim * 2, q_bytes = size_t(kHeads) * kHeadDim * 2;
  void* kc = dev_malloc(kv_bytes);
  void* vc = dev_malloc(kv_bytes);
  void* q_rot = dev_malloc(q_bytes);
  const size_t ws_bytes = decode_workspace_bytes(1, kHeads, kHeadDim, max_keys);
  void* ws = dev_malloc(ws_bytes);
  decode_workspace_init(ws, ws_bytes);
  IhipStageGpuParams sp[3];
  for (int i = 0; i < 3; ++i) sp[i] = stages[i], sp[i].rope_mode = 1;
  IhipDecodeKeysParams kp;
  kp.seq_len = kv.seq_lens;
  kp.sel = sp[2].out;
  kp.sel_len = sp[2].out_len;
  kp.win_begin = sp[0].win_begin;
  kp.n_sink = kSink;
  kp.keys = d_keys;
  kp.cap = max_keys;
  kp.n_keys = d_ints;
  kp.q_pos = d_ints + 1;
  CompactKvParams cp{.k_pool = kv.k_pool, .v_pool = kv.v_pool, .slots = d_slot, .keys = d_keys, .n_keys = max_keys,
                     .k_out = kc, .v_out = vc, .inv_freq = d_f, .attn_factor = 1.f, .n_kv_head = kKvHeads,
                     .head_dim = kHeadDim, .fp8 = fp8, .k_scale = kv.k_scale, .v_scale = kv.v_scale};
  RopeParams rp;
  rp.q = q_rot;
  rp.n_q_heads = kHeads;
  rp.head_dim = kHeadDim;
  rp.n_tokens = 1;
  rp.positions = kp.q_pos;
  rp.inv_freq = d_f;
  DecodeParams dp;
  dp.q = q_rot;
  dp.k = kc;
  dp.v = vc;
  dp.o = o;
  dp.n_seq = 1;
  dp.n_kv = max_keys;
  dp.kv_lens = kp.n_keys;
  dp.n_head = kHeads;
  dp.n_kv_head = kKvHeads;
  dp.head_dim = kHeadDim;
  dp.workspace = ws;
  dp.workspace_bytes = ws_bytes;
  auto attend = [&](Stream s) {
    compact_kv(cp, s);
    copy_d2d(q_rot, q, q_bytes, s);
    rope(rp, s);
    attention_decode(dp, s);
  };
  auto from = [&](int first, Stream s) {
    for (int i = first; i < 3; ++i) ihip_prune_stage_decode(sp[i], s);
    ihip_decode_keys(kp, s);
    attend(s);
  };
  RopeOnDecode r;
  r.none = graph_ms([&](Stream s) { from(0, s); }, reps);  // first: fills the caches the others read
  r.s1 = graph_ms([&](Stream s) { from(1, s); }, reps);
  r.s12 = graph_ms([&](Stream s) { from(2, s); }, reps);
  r.all = graph_ms([&](Stream s) { from(3, s); }, reps);
  r.attend = graph_ms(attend, reps);
  r.keys = graph_ms([&](Stream s) { ihip_decode_keys(kp, s); }, reps);
  device_sync();
  for (void* x : {(void*)d_slot, (void*)d_f, (void*)d_keys, (void*)d_ints, kc, vc, q_rot, ws}) dev_free(x);
  return r;
}

std::string bench_decode(int64_t len, bool fp8) {
  const int max_pages = int((len + kPageSize - 1) / kPageSize);
  const std::vector<int32_t> tab = bench::shuffled_pages(max_pages);  // [1, max_pages]
  const int64_t elems = int64_t(max_pages) * kPageSize * kKvHeads * kHeadDim;
  float k_scale = 1.f, v_scale = 1.f;
  void* k = random_pool(elems, 12, fp8, &k_scale);  // [max_pages * kPageSize, kKvHeads, kHeadDim]
  void* v = random_pool(elems, 13, fp8, &v_scale);
  void* q = dev_malloc(kHeads * kHeadDim * 2);  // bf16 [1, kHeads, kHeadDim]
  void* o = dev_malloc(kHeads * kHeadDim * 2);
  fill_random_bf16(q, kHeads * kHeadDim, 11, 1.f);
  int32_t* table = bench::upload_i32(tab);
  int32_t* d_len = bench::upload_i32({int32_t(len)});  // [1]
  const KvView kv{.k_pool = k, .v_pool = v, .elem = fp8 ? KvElem::fp8_e4m3 : KvElem::bf16, .k_scale = k_scale,
                  .v_scale = v_scale, .block_table = table, .seq_lens = d_len, .n_seq = 1, .max_pages_per_seq = max_pages,
                  .page_size = kPageSize, .n_pages = max_pages, .n_kv_head = kKvHeads, .head_dim = kHeadDim,
                  .on_device = true};
  const DecodeParams d = bench::dense_decode_over(kv, q, o, kHeads, len);
  const double dense = graph_ms([&](Stream s) { attention_decode(d, s); }, len > (1 << 20) - 1 ? 30 : 100);

  // The relative-RoPE table: positions 0, 1 and n_stream + 1 (cos/sin of a plain RoPE, base 500000).
  const int64_t n_pos = kStream + 2;
  std::vector<float> cs(size_t(n_pos) * 64), sn(size_t(n_pos) * 64);
  for (int64_t p = 0; p < n_pos; ++p)
    for (int i = 0; i < 64; ++i) {
      const float a = float(p) * float(std::pow(500000.0, -2.0 * i / kHeadDim));
      cs[size_t(p * 64 + i)] = std::cos(a);
      sn[size_t(p * 64 + i)] = std::sin(a);
    }
  auto* d_cos = static_cast<float*>(dev_malloc(cs.size() * 4));
  auto* d_sin = static_cast<float*>(dev_malloc(sn.size() * 4));
  copy_h2d(d_cos, cs.data(), cs.size() * 4);
  copy_h2d(d_sin, sn.data(), sn.size() * 4);

  int32_t* out[3];
  int32_t* out_len[3];
  for (int i = 0; i < 3; ++i) {
    out[i] = static_cast<int32_t*>(dev_malloc(size_t(kK[i]) * 4));
    out_len[i] = static_cast<int32_t*>(dev_malloc(4));
  }
  const int64_t max_chunks[3] = {(len + kLc[0] - 1) / kLc[0], kK[0] / kLc[1], kK[1] / kLc[2]};
  auto* scores = static_cast<float*>(dev_malloc(size_t(max_chunks[0]) * 4));
  auto* win = static_cast<int32_t*>(dev_malloc(4));
  IhipStageGpuParams sp[3];
  for (int i = 0; i < 3; ++i) {
    IhipStageGpuParams& p = sp[i];
    p.l_c = kLc[i];
    p.k = kK[i];
    p.rope_mode = 0;
    p.n_sink = kSink;
    p.n_stream = kStream;
    p.q = q;
    p.kv = kv;
    p.n_head = kHeads;
    p.rope_cos = d_cos;
    p.rope_sin = d_sin;
    p.rope_n_pos = n_pos;
    p.in = i ? out[i - 1] : nullptr;
    p.in_len = i ? out_len[i - 1] : nullptr;
    p.in_cap = i ? kK[i - 1] : 0;
    p.out = out[i];
    p.out_len = out_len[i];
    p.out_cap = kK[i];
    p.scores = scores;
    p.max_chunks = max_chunks[i];
    p.win_begin = i == 0 ? win : nullptr;
  }
  IhipIndexGpuParams ip;
  ip.sel = out[2];
  ip.sel_len = out_len[2];
  ip.sel_cap = kK[2];
  ip.l_c = kLc[2];
  ip.n_sink = kSink;
  ip.win_begin = win;
  ip.n_seq = 1;
  const int64_t R = ip.ranges_per_seq();
  auto* range_ptr = static_cast<int32_t*>(dev_malloc(8));
  auto* col_ptr = static_cast<int32_t*>(dev_malloc(8));
  auto* ranges = static_cast<int32_t*>(dev_malloc(size_t(R) * 8));
  ip.range_ptr = range_ptr;
  ip.ranges = ranges;
  ip.col_ptr = col_ptr;
  SparseDecodeParams sd;
  sd.q = q;
  sd.o = o;
  sd.n_head = kHeads;
  sd.kv = kv;
  sd.index = {.n_seq = 1, .n_index_head = 1, .range_ptr = range_ptr, .ranges = ranges, .col_ptr = col_ptr,
              .range_capacity = R, .on_device = true};  // ranges only, no columns
  sd.max_keys_per_row = kSink + kK[2] + kStream + 96;  // the window grows by up to n_refresh(1) - 1 keys
  bench::alloc_sparse_decode_workspace(sd);

  auto stages_from = [&](int first, Stream s) {
    for (int i = first; i < 3; ++i) ihip_prune_stage_decode(sp[i], s);
    ihip_decode_index(ip, s);
    sparse_decode(sd, s);
  };
  const int reps = 200;
  const double none = graph_ms([&](Stream s) { stages_from(0, s); }, reps);
  const double s1 = graph_ms([&](Stream s) { stages_from(1, s); }, reps);
  const double s12 = graph_ms([&](Stream s) { stages_from(2, s); }, reps);
  const double all = graph_ms([&](Stream s) { sparse_decode(sd, s); }, reps);
  double stage[2][3];
  for (int mode = 0; mode < 2; ++mode)
    for (int i = 0; i < 3; ++i) {
      IhipStageGpuParams p = sp[i];
      p.rope_mode = mode;
      stage[mode][i] = graph_ms([&](Stream s) { ihip_prune_stage_decode(p, s); }, reps);
    }
  double score_only[3], select_only[3];  // rope none: the stage's two launches apart
  for (int i = 0; i < 3; ++i) {
    score_only[i] = graph_ms([&](Stream s) { ihip_score_decode(sp[i], s); }, reps);
    select_only[i] = graph_ms([&](Stream s) { ihip_select_decode(sp[i], s); }, reps);
  }
  const double index_only = graph_ms([&](Stream s) { ihip_decode_index(ip, s); }, reps);
  const RopeOnDecode ro = bench_rope_on_decode(len, fp8, kv, sp, q, o, tab, reps);
  std::vector<int32_t> lens(3);
  for (int i = 0; i < 3; ++i) copy_d2h(&lens[size_t(i)], out_len[i], 4);
  const double avg = (none + s1 + 2 * s12 + 12 * all) / 16, avg_fast = (none + s1 + 2 * s12 + 28 * all) / 32;
  device_sync();
  for (void* p : {k, v, q, o, d.workspace, sd.workspace, (void*)table, (void*)d_len, (void*)d_cos, (void*)d_sin, (void*)scores,
                  (void*)win, (void*)range_ptr, (void*)col_ptr, (void*)ranges})
    dev_free(p);
  for (int i = 0; i < 3; ++i) dev_free(out[i]), dev_free(out_len[i]);
  std::fprintf(stderr,
               "decode len=%lld kv=%s rope=on: None %.4f All %.4f ms (gather+attend %.4f, keys %.4f) | avg(16,8,4) "
               "%.4f ms = %.1fx dense\n",
               (long long)len, fp8 ? "fp8" : "bf16", ro.none, ro.all, ro.attend, ro.keys, ro.avg(), dense / ro.avg());
  std::fprintf(stderr,
               "decode len=%lld kv=%s: dense %.4f ms | infinitehip None %.4f S1 %.4f S1&2 %.4f All %.4f ms | avg(16,8,4) "
               "%.4f ms = %.1fx dense, avg(32,16,8) %.4f ms | stages (rope none) %.4f %.4f %.4f, (relative) %.4f "
               "%.4f %.4f ms (score %.4f %.4f %.4f, select %.4f %.4f %.4f, index %.4f) | kept %d/%d/%d\n",
               (long long)len, fp8 ? "fp8" : "bf16", dense, none, s1, s12, all, avg, dense / avg, avg_fast,
               stage[0][0], stage[0][1],
               stage[0][2], stage[1][0], stage[1][1], stage[1][2], score_only[0], score_only[1], score_only[2],
               select_only[0], select_only[1], select_only[2], index_only, lens[0], lens[1], lens[2]);
  char buf[2000];
  std::snprintf(buf, sizeof buf,
                "{\"case\": \"decode\", \"len\": %lld, \"kv\": \"%s\", \"dense_ms\": %.5f, \"none_ms\": %.5f, \"s1_cached_ms\": %.5f, "
                "\"s12_cached_ms\": %.5f, \"all_cached_ms\": %.5f, \"avg_16_8_4_ms\": %.5f, \"avg_32_16_8_ms\": %.5f, "
                "\"stage_ms_rope_none\": [%.5f, %.5f, %.5f], \"stage_ms_rope_relative\": [%.5f, %.5f, %.5f], "
                "\"score_ms\": [%.5f, %.5f, %.5f], \"select_ms\": [%.5f, %.5f, %.5f], \"index_ms\": %.5f, "
                "\"kept\": [%d, %d, %d], \"ratio_dense_over_avg\": %.2f, \"ratio_dense_over_none\": %.2f, "
                "\"rope_on\": {\"none_ms\": %.5f, \"s1_cached_ms\": %.5f, \"s12_cached_ms\": %.5f, "
                "\"all_cached_ms\": %.5f, \"avg_16_8_4_ms\": %.5f, \"attend_ms\": %.5f, \"keys_ms\": %.5f, "
                "\"ratio_dense_over_avg\": %.2f}}",
                (long long)len, fp8 ? "fp8" : "bf16", dense, none, s1, s12, all, avg, avg_fast, stage[0][0],
                stage[0][1], stage[0][2],
                stage[1][0], stage[1][1], stage[1][2], score_only[0], score_only[1], score_only[2], select_only[0],
                select_only[1], select_only[2], index_only, lens[0], lens[1], lens[2], dense / avg, dense / none, ro.none,
                ro.s1, ro.s12, ro.all, ro.avg(), ro.attend, ro.keys, dense / ro.avg());
  return buf;
}

// The prefill case's attention shape and pruning RoPE (--prefill-shape, --prefill-rope).
struct PrefillShape {
  int H = kHeads, Hkv = kKvHeads, D = kHeadDim;
  int rope_mode = 0;  // 0 none, 1 relative (rope=on's pruning)
  bool rope_tensor_cores = true;  // --prefill-scorer mma (true) or fma
  bool wgmma = true;              // RoPE none: wgmma, or mma.sync (--prefill-scorer mma-sync)
  bool prefetch = false;          // RoPE none: L2 prefetch of the next step's keys (--prefill-prefetch on|off)
  bool skip_dense = false;        // --prefill-skip-dense: no dense / rope=on attention timing (variant runs)
  bool local = false;             // --rank local: rank=local's offsets and scoring
};

// rope=on's attention of a chunk (IhipCompactAttention): per 64-row block, its key set gathered and
// rotated at 0..L-1 (compact_kv), the rows' queries rotated at L - rows.. (copy + rope), then the
// dense causal kernel over the L keys; blocks one after another on one stream (main's order) or
// round-robin over n_lanes streams, each with its own gather slice (attend_blocks). The key sets
// here: sinks + kK[2] keys strided over the middle + the window and the rows (the method's sizes).
double compact_attention_ms(const PrefillShape& sh, const void* q, const void* k, const void* v, void* o,
                            int64_t prefix, int64_t chunk, int n_lanes, int reps) {
  const int64_t n_kv = prefix + chunk, n_blk = (chunk + 63) / 64, per = kSink + kK[2] + kStream + 64;
  std::vector<int32_t> keys(static_cast<size_t>(n_blk * per));
  std::vector<int64_t> n_keys(static_cast<size_t>(n_blk));
  for (int64_t b = 0; b < n_blk; ++b) {
    const int64_t end = prefix + std::min(chunk, (b + 1) * 64), w = std::max<int64_t>(0, end - kStream - 64);
    int32_t* set = keys.data() + b * per;
    int64_t n = 0;
    for (int64_t j = 0; j < std::min<int64_t>(kSink, w); ++j) set[n++] = int32_t(j);
    const int64_t mid = w - std::min<int64_t>(kSink, w), take = std::min<int64_t>(kK[2], mid);
    for (int64_t i = 0; i < take; ++i) set[n++] = int32_t(kSink + i * mid / take);
    for (int64_t j = w; j < end; ++j) set[n++] = int32_t(j);
    n_keys[size_t(b)] = n;
  }
  std::vector<int32_t> id(static_cast<size_t>(n_kv));
  std::iota(id.begin(), id.end(), 0);
  std::vector<float> f(static_cast<size_t>(sh.D / 2));
  for (int i = 0; i < sh.D / 2; ++i) f[size_t(i)] = float(std::pow(10000.0, -2.0 * i / sh.D));
  auto* d_keys = static_cast<int32_t*>(dev_malloc(keys.size() * 4));
  auto* d_id = static_cast<int32_t*>(dev_malloc(id.size() * 4));
  auto* d_f = static_cast<float*>(dev_malloc(f.size() * 4));
  copy_h2d(d_keys, keys.data(), keys.size() * 4);
  copy_h2d(d_id, id.data(), id.size() * 4);
  copy_h2d(d_f, f.data(), f.size() * 4);
  const size_t kv_slice = size_t(per) * sh.Hkv * sh.D * 2, q_row = size_t(sh.H) * sh.D * 2;
  char* kc = static_cast<char*>(dev_malloc(kv_slice * size_t(n_lanes)));
  char* vc = static_cast<char*>(dev_malloc(kv_slice * size_t(n_lanes)));
  char* q_rot = static_cast<char*>(dev_malloc(size_t(chunk) * q_row));
  std::vector<Stream> lanes(static_cast<size_t>(n_lanes));
  for (auto& l : lanes) l = n_lanes > 1 ? stream_create() : nullptr;
  auto run = [&] {
    for (int64_t b = 0; b < n_blk; ++b) {
      const int lane = int(b % n_lanes);
      const Stream s = lanes[size_t(lane)];
      const int64_t row0 = b * 64, rows = std::min<int64_t>(64, chunk - row0), L = n_keys[size_t(b)];
      compact_kv({.k_pool = k, .v_pool = v, .slots = d_id, .keys = d_keys + b * per, .n_keys = L,
                  .k_out = kc + size_t(lane) * kv_slice, .v_out = vc + size_t(lane) * kv_slice, .inv_freq = d_f,
                  .attn_factor = 1.f, .n_kv_head = sh.Hkv, .head_dim = sh.D},
                 s);
      copy_d2d(q_rot + size_t(row0) * q_row, static_cast<const char*>(q) + size_t(row0) * q_row, size_t(rows) * q_row, s);
      RopeParams rp;
      rp.q = q_rot + size_t(row0) * q_row;
      rp.n_q_heads = sh.H;
      rp.head_dim = sh.D;
      rp.n_tokens = rows;
      rp.pos0 = L - rows;
      rp.inv_freq = d_f;
      rope(rp, s);
      PrefillParams ap;
      ap.q = q_rot + size_t(row0) * q_row;
      ap.k = kc + size_t(lane) * kv_slice;
      ap.v = vc + size_t(lane) * kv_slice;
      ap.o = static_cast<char*>(o) + size_t(row0) * q_row;
      ap.n_q = rows;
      ap.n_kv = L;
      ap.n_head = sh.H;
      ap.n_kv_head = sh.Hkv;
      ap.head_dim = sh.D;
      ap.q_pos0 = L - rows;
      attention_prefill(ap, s);
    }
    for (const Stream l : lanes) stream_sync(l);  // the join (the method's attend_blocks syncs too)
  };
  const double ms = time_ms(run, 1, reps);
  for (const Stream l : lanes)
    if (l) stream_destroy(l);
  for (void* x : {(void*)d_keys, (void*)d_id, (void*)d_f, (void*)kc, (void*)vc, (void*)q_rot}) dev_free(x);
  return ms;
}

std::string bench_prefill(int64_t prefix, int64_t chunk, const PrefillShape& sh) {
  const int kHeads = sh.H, kKvHeads = sh.Hkv, kHeadDim = sh.D;  // this case's shape
  const int64_t n_kv = prefix + chunk, n_blk = (chunk + 63) / 64;
  void* k = dev_malloc(size_t(n_kv * kKvHeads * kHeadDim) * 2);
  void* v = dev_malloc(size_t(n_kv * kKvHeads * kHeadDim) * 2);
  void* q = dev_malloc(size_t(chunk * kHeads * kHeadDim) * 2);
  void* o = dev_malloc(size_t(chunk * kHeads * kHeadDim) * 2);
  fill_random_bf16(k, n_kv * kKvHeads * kHeadDim, 22, 1.f);
  fill_random_bf16(v, n_kv * kKvHeads * kHeadDim, 23, 1.f);
  fill_random_bf16(q, chunk * kHeads * kHeadDim, 21, 1.f);
  PrefillParams dp;
  dp.q = q;
  dp.k = k;
  dp.v = v;
  dp.o = o;
  dp.n_q = chunk;
  dp.n_kv = n_kv;
  dp.n_head = kHeads;
  dp.n_kv_head = kKvHeads;
  dp.head_dim = kHeadDim;
  dp.q_pos0 = prefix;
  const int reps = prefix >= (int64_t(1) << 20) ? 2 : 3;
  const double dense = sh.skip_dense ? 0.0 : time_ms([&] { attention_prefill(dp); }, 1, reps);

  IhipPrefillGpuParams p;
  p.q = q;
  p.k = k;
  p.n_q = chunk;
  p.n_kv = n_kv;
  p.q_pos0 = prefix;
  p.n_head = kHeads;
  p.n_kv_head = kKvHeads;
  p.head_dim = kHeadDim;
  p.rope_mode = sh.rope_mode;
  p.rope_tensor_cores = sh.rope_tensor_cores;
  p.wgmma_scorer = sh.wgmma;
  p.l2_prefetch = sh.prefetch;
  // rank=local: the stages' offsets [n_blk, n_kv_head, group * 64]
  p.offset = sh.local ? static_cast<float*>(dev_malloc(size_t(n_blk * kHeads * 64) * 4)) : nullptr;
  // The relative-RoPE table (rope=on's pruning): positions 0, 1 and n_stream + 1, base 10000.
  const int64_t n_pos = kStream + 2;
  std::vector<float> cs(static_cast<size_t>(n_pos * kHeadDim / 2)), sn(cs.size());
  for (int64_t ps = 0; ps < n_pos; ++ps)
    for (int i = 0; i < kHeadDim / 2; ++i) {
      const float a = float(ps) * float(std::pow(10000.0, -2.0 * i / kHeadDim));
      cs[size_t(ps * kHeadDim / 2 + i)] = std::cos(a);
      sn[size_t(ps * kHeadDim / 2 + i)] = std::sin(a);
    }
  auto* d_cos = static_cast<float*>(dev_malloc(cs.size() * 4));
  auto* d_sin = static_cast<float*>(dev_malloc(sn.size() * 4));
  copy_h2d(d_cos, cs.data(), cs.size() * 4);
  copy_h2d(d_sin, sn.data(), sn.size() * 4);
  if (sh.rope_mode != 0) {
    p.rope_cos = d_cos;
    p.rope_sin = d_sin;
    p.rope_n_pos = n_pos;
  }
  p.n_sink = kSink;
  p.n_stream = kStream;
  int32_t* out[3];
  int32_t* out_len[3];
  for (int i = 0; i < 3; ++i) {
    out[i] = static_cast<int32_t*>(dev_malloc(size_t(n_blk * kK[i]) * 4));
    out_len[i] = static_cast<int32_t*>(dev_malloc(size_t(n_blk) * 4));
  }
  const int64_t n_cand = std::max<int64_t>(1, prefix + chunk - kStream - kSink);
  const int64_t max_chunks[3] = {(n_cand + kLc[0] - 1) / kLc[0], kK[0] / kLc[1], kK[1] / kLc[2]};
  const int64_t most_chunks = *std::max_element(max_chunks, max_chunks + 3);
  auto* scores = static_cast<float*>(dev_malloc(size_t(n_blk * kKvHeads * most_chunks) * 4));
  IhipPrefillStage st[3];
  for (int i = 0; i < 3; ++i) {
    st[i].l_c = kLc[i];
    st[i].k = kK[i];
    st[i].in = i ? out[i - 1] : nullptr;
    st[i].in_len = i ? out_len[i - 1] : nullptr;
    st[i].in_cap = i ? kK[i - 1] : 0;
    st[i].out = out[i];
    st[i].out_len = out_len[i];
    st[i].out_cap = kK[i];
    st[i].scores = scores;
    st[i].max_chunks = max_chunks[i];
  }
  IhipPrefillIndexParams ip;
  ip.sel = out[2];
  ip.sel_len = out_len[2];
  ip.sel_cap = kK[2];
  ip.l_c = kLc[2];
  ip.n_q = chunk;
  ip.q_pos0 = prefix;
  ip.n_sink = kSink;
  ip.n_stream = kStream;
  const int64_t R = ip.ranges_per_blk();
  ip.range_ptr = static_cast<int64_t*>(dev_malloc(size_t(n_blk + 1) * 8));
  ip.col_ptr = static_cast<int64_t*>(dev_malloc(size_t(n_blk + 1) * 8));
  ip.ranges = static_cast<int32_t*>(dev_malloc(size_t(n_blk * R) * 8));
  SparseAttnParams sp;
  sp.q = q;
  sp.k = k;
  sp.v = v;
  sp.o = o;
  sp.n_q = chunk;
  sp.n_kv = n_kv;
  sp.n_head = kHeads;
  sp.n_kv_head = kKvHeads;
  sp.head_dim = kHeadDim;
  sp.q_pos0 = prefix;
  sp.index.n_index_head = 1;
  sp.index.n_qblk = n_blk;
  sp.index.range_ptr = ip.range_ptr;
  sp.index.ranges = ip.ranges;
  sp.index.col_ptr = ip.col_ptr;
  sp.index.n_ranges = n_blk * R;
  sp.workspace_bytes = sparse_attention_workspace_bytes(sp.index);
  sp.workspace = dev_malloc(sp.workspace_bytes);
  auto whole = [&] {
    for (int i = 0; i < 3; ++i) ihip_prune_stage_prefill(p, st[i]);
    ihip_prefill_index(ip);
    sparse_attention(sp);
  };
  const double total = time_ms(whole, 1, reps);
  double score[3], select[3], offsets[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    // rank=local: the stage's offsets (then in the workspace for its score timing)
    if (sh.local) offsets[i] = time_ms([&] { ihip_offsets_prefill(p, st[i]); }, 0, reps);
    score[i] = time_ms([&] { ihip_score_prefill(p, st[i]); }, 0, reps);
    select[i] = time_ms([&] { ihip_select_prefill(p, st[i]); }, 0, reps);
  }
  const double index = time_ms([&] { ihip_prefill_index(ip); }, 1, reps);
  const double attn = time_ms([&] { sparse_attention(sp); }, 1, reps);
  // rope=on's attention (compacted key sets per block): blocks one after another, and on 8 lanes
  const double compact_serial = sh.skip_dense ? 0.0 : compact_attention_ms(sh, q, k, v, o, prefix, chunk, 1, reps);
  const double compact_lanes = sh.skip_dense ? 0.0 : compact_attention_ms(sh, q, k, v, o, prefix, chunk, 8, reps);
  std::vector<int32_t> kept(3);
  for (int i = 0; i < 3; ++i) copy_d2h(&kept[size_t(i)], out_len[i] + n_blk - 1, 4);  // the last block's
  device_sync();
  if (p.offset) dev_free(p.offset);
  for (void* x : {k, v, q, o, (void*)d_cos, (void*)d_sin, (void*)scores, (void*)ip.range_ptr, (void*)ip.col_ptr, (void*)ip.ranges, sp.workspace})
    dev_free(x);
  for (int i = 0; i < 3; ++i) dev_free(out[i]), dev_free(out_len[i]);
  const double prune = offsets[0] + score[0] + select[0] + offsets[1] + score[1] + select[1] + offsets[2] +
                       score[2] + select[2];
  std::fprintf(stderr,
               "prefill %d/%d/%d rope %d scorer %s%s prefetch %d rank %s chunk=%lld after %lld: dense %.2f ms | infinitehip %.2f ms = %.2fx dense (stages "
               "%.2f: offsets %.2f %.2f %.2f, score %.2f %.2f %.2f, select %.2f %.2f %.2f; index %.3f; sparse attention %.2f) | rope=on "
               "attention: blocks serial %.2f ms, 8 lanes %.2f ms | last block kept %d/%d/%d\n",
               kHeads, kKvHeads, kHeadDim, sh.rope_mode, sh.rope_tensor_cores ? "mma" : "fma", sh.wgmma ? "" : "-sync", int(sh.prefetch),
               sh.local ? "local" : "paper", (long long)chunk, (long long)prefix, dense, total, dense / total, prune,
               offsets[0], offsets[1], offsets[2], score[0], score[1], score[2], select[0], select[1], select[2], index, attn, compact_serial,
               compact_lanes, kept[0], kept[1], kept[2]);
  char buf[1800];
  std::snprintf(buf, sizeof buf,
                "{\"case\": \"prefill\", \"heads\": [%d, %d, %d], \"pruning_rope\": \"%s\", \"rope_scorer\": \"%s\", "
                "\"rope_none_scorer\": \"%s\", \"l2_prefetch\": %s, \"rank\": \"%s\", "
                "\"prefix\": %lld, "
                "\"chunk\": %lld, \"dense_ms\": %.4f, \"infinitehip_ms\": "
                "%.4f, \"offsets_ms\": [%.4f, %.4f, %.4f], \"score_ms\": [%.4f, %.4f, %.4f], \"select_ms\": [%.4f, %.4f, %.4f], \"index_ms\": %.4f, "
                "\"sparse_attention_ms\": %.4f, \"rope_on_attention_serial_ms\": %.4f, "
                "\"rope_on_attention_8_lanes_ms\": %.4f, \"kept_last_block\": [%d, %d, %d], "
                "\"ratio_dense_over_infinitehip\": %.2f}",
                kHeads, kKvHeads, kHeadDim, sh.rope_mode ? "relative" : "none", sh.rope_tensor_cores ? "mma" : "fma",
                sh.wgmma ? "wgmma" : "mma.sync", sh.prefetch ? "true" : "false", sh.local ? "local" : "paper",
                (long long)prefix, (long long)chunk,
                dense, total, offsets[0], offsets[1], offsets[2], score[0], score[1], score[2], select[0], select[1], select[2], index, attn,
                compact_serial, compact_lanes, kept[0], kept[1], kept[2], dense / total);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> lens = {131072, 1048576}, prefixes;
  int64_t chunk = 32768;
  const char* json_path = nullptr;
  PrefillShape shape;
  std::vector<bool> caches = {false};  // fp8?
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--lens") && i + 1 < argc) lens = bench::parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--kv") && i + 1 < argc) {
      caches.clear();
      for (std::string rest = argv[++i]; !rest.empty();) {
        const size_t c = rest.find(',');
        const std::string name = rest.substr(0, c);
        rest = c == std::string::npos ? "" : rest.substr(c + 1);
        if (name != "bf16" && name != "fp8") {
          std::fprintf(stderr, "longctx_bench_infinitehip: --kv takes bf16 and/or fp8, got '%s'\n", name.c_str());
          return 2;
        }
        caches.push_back(name == "fp8");
      }
    }
    else if (!std::strcmp(argv[i], "--prefix") && i + 1 < argc) prefixes = bench::parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--chunk") && i + 1 < argc) chunk = bench::parse_list(argv[++i]).at(0);
    else if (!std::strcmp(argv[i], "--prefill-shape") && i + 1 < argc) {
      const auto v = bench::parse_list(argv[++i]);
      if (v.size() != 3 || v[1] < 1 || v[0] % v[1] || (v[2] != 64 && v[2] != 128 && v[2] != 256)) {
        std::fprintf(stderr, "longctx_bench_infinitehip: --prefill-shape takes H,Hkv,D (H a multiple of Hkv, D 64, "
                             "128 or 256), got '%s'\n", argv[i]);
        return 2;
      }
      shape.H = int(v[0]), shape.Hkv = int(v[1]), shape.D = int(v[2]);
    } else if (!std::strcmp(argv[i], "--prefill-rope") && i + 1 < argc) {
      const std::string r = argv[++i];
      if (r != "none" && r != "relative") {
        std::fprintf(stderr, "longctx_bench_infinitehip: --prefill-rope takes none or relative, got '%s'\n", r.c_str());
        return 2;
      }
      shape.rope_mode = r == "relative" ? 1 : 0;
    } else if (!std::strcmp(argv[i], "--prefill-scorer") && i + 1 < argc) {
      const std::string r = argv[++i];
      if (r != "mma" && r != "mma-sync" && r != "fma") {
        std::fprintf(stderr, "longctx_bench_infinitehip: --prefill-scorer takes mma, mma-sync or fma, got '%s'\n",
                     r.c_str());
        return 2;
      }
      shape.rope_tensor_cores = r != "fma";
      shape.wgmma = r != "mma-sync";
    } else if (!std::strcmp(argv[i], "--prefill-prefetch") && i + 1 < argc) {
      const std::string r = argv[++i];
      if (r != "on" && r != "off") {
        std::fprintf(stderr, "longctx_bench_infinitehip: --prefill-prefetch takes on or off, got '%s'\n", r.c_str());
        return 2;
      }
      shape.prefetch = r == "on";
    } else if (!std::strcmp(argv[i], "--prefill-skip-dense")) {
      shape.skip_dense = true;
    } else if (!std::strcmp(argv[i], "--rank") && i + 1 < argc) {
      const std::string r = argv[++i];
      if (r != "paper" && r != "local") {
        std::fprintf(stderr, "longctx_bench_infinitehip: --rank takes paper or local, got '%s'\n", r.c_str());
        return 2;
      }
      shape.local = r == "local";
    }
    else {
      std::fprintf(stderr,
                   "usage: %s [--lens N,..] [--kv bf16,fp8] [--prefix N,..] [--chunk N] [--prefill-shape H,Hkv,D] "
                   "[--prefill-rope none|relative] [--prefill-scorer mma|mma-sync|fma] [--prefill-prefetch on|off] "
                   "[--prefill-skip-dense] [--rank paper|local] [--json FILE]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    require_hopper();
    char extra[400];
    std::snprintf(extra, sizeof extra,
                  "\"shape\": {\"n_head\": %d, \"n_kv_head\": %d, \"head_dim\": %d, \"page_size\": %d}, "
                  "\"infinitehip\": {\"preset\": \"3k\", \"l_c\": [256, 32, 8], \"k\": [32768, 8192, 2048], "
                  "\"n_sink\": %lld, \"n_stream\": %lld}",
                  kHeads, kKvHeads, kHeadDim, kPageSize, (long long)kSink, (long long)kStream);
    bench::JsonRecord js(device_info(0), extra);
    for (int64_t n : lens)
      for (const bool fp8 : caches) js.add(bench_decode(n, fp8));
    for (int64_t n : prefixes) js.add(bench_prefill(n, chunk, shape));
    js.finish(json_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "longctx_bench_infinitehip: %s\n", e.what());
    return 1;
  }
  return 0;
}

// bench_offload.cu (bench): HiP decode with the KV cache offloaded to host memory (kv/cuda/
// offload_tier.h), one layer of Llama-3-8B geometry (32 query / 8 KV heads, d = 128, bf16),
// beside the same HiP decode over a GPU-resident cache, in one process on one GPU.
//
// What, per --lens length (default 1M): three variants of the same decode loop, each a CUDA graph
// of one step replayed --warm + --steps times (the length grows by one token per step; HiP
// re-estimates every r_m = 8 steps, decided on the device):
//   device   append K/V to the GPU cache, hip_estimate_decode, sparse_decode (the baseline)
//   offload  append to the host tier (zero-copy write; written through to resident cache lines),
//            the estimator through the keys cache (admission after misses in 2 steps; also run
//            admitting at the first miss, "offload_keys_admit1"),
//            sparse decode through the K/V cache, the LRU update of both caches
//   uvm      the host tier with no GPU cache: every read crosses PCIe (the paper's "HiP UVM")
// Reported per step type (refresh: the estimator runs; cached: it returns at once): mean time,
// hit ratios of both caches, bytes over PCIe (misses, inserted lines, the append) and bytes read
// from HBM banks, and the physical bound of each (bytes / measured H2D copy bandwidth, bytes /
// measured D2D copy bandwidth). Also: the average over r_m = 8 steps and that average x 32 layers
// (an EXTRAPOLATION of attention + offload cost to the whole model, not a whole-model run), the
// host and GPU bytes of the tier for 32 layers, and whether the device and offload variants'
// outputs after the last step are bit-identical (the uvm variant runs at most 16 measured steps).
// Cache sizes per (layer, KV head): --keys-slots lines (default 16384 = 32K tokens) and
// --kv-slots lines (default 4096 = 8K tokens); lines of b_k = 2 tokens.
// Run: build-gpu/bench/longctx_bench_offload [--lens 1048576,..] [--steps 64] [--warm 8] [--json F]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/cuda/hip_estimate.h"
#include "kernels/cuda/kv_offload.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/sparse_decode.h"
#include "kv/cuda/kv_scatter.h"
#include "kv/cuda/offload_tier.h"

using namespace longctx;
using namespace longctx::cuda;

namespace {

constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128;  // Llama-3-8B attention geometry
constexpr int kLayers = 32;                               // for the extrapolation
constexpr int kRefresh = 8;                               // r_m
constexpr int64_t kRowBytes = kHeadDim * 2;               // one head's K (or V) row, bf16

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

__global__ void advance_len(int32_t* len) { ++*len; }

struct Bandwidth {
  double h2d_gbs = 0, d2d_gbs = 0;  // GB/s (1e9)
};

Bandwidth measure_bandwidth(const void* pinned_host, size_t bytes) {
  void* a = dev_malloc(bytes);
  void* b = dev_malloc(bytes);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  auto timed = [&](auto fn) {
    fn();
    cudaEventRecord(e0);
    for (int i = 0; i < 3; ++i) fn();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    return ms / 3;
  };
  Bandwidth bw;
  bw.h2d_gbs = double(bytes) / (timed([&] { check(cudaMemcpy(a, pinned_host, bytes, cudaMemcpyHostToDevice), "h2d"); }) * 1e6);
  bw.d2d_gbs = 2.0 * double(bytes) / (timed([&] { check(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice), "d2d"); }) * 1e6);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  dev_free(a);
  dev_free(b);
  return bw;
}

// One decode path's index, output and workspace buffers and the kernels' params.
struct Path {
  void* rpos;
  void* rptr;
  void* ranges;
  void* cptr;
  void* o;
  void* ws;
  size_t ws_bytes;
  HipDecodeParams hp;
  SparseDecodeParams sp;
};

Path make_path(const HipEstimateConfig& cfg, const KvView& kv, const void* q) {
  Path p{};
  const int64_t R = cfg.ranges_per_row(), rows = kHeads;
  p.rpos = dev_malloc(rows * 4);
  p.rptr = dev_malloc((rows + 1) * 4);
  p.cptr = dev_malloc((rows + 1) * 4);
  p.ranges = dev_malloc(size_t(rows * R) * 8);
  p.o = dev_malloc(kHeads * kHeadDim * 2);
  p.hp.cfg = cfg;
  p.hp.refresh = kRefresh;
  p.hp.q = q;
  p.hp.kv = kv;
  p.hp.n_head = kHeads;
  p.hp.refresh_pos = static_cast<int32_t*>(p.rpos);
  p.hp.range_ptr = static_cast<int32_t*>(p.rptr);
  p.hp.ranges = static_cast<int32_t*>(p.ranges);
  p.hp.col_ptr = static_cast<int32_t*>(p.cptr);
  p.sp.q = q;
  p.sp.o = p.o;
  p.sp.n_head = kHeads;
  p.sp.kv = kv;
  p.sp.index.n_seq = 1;
  p.sp.index.n_index_head = kHeads;
  p.sp.index.range_ptr = p.hp.range_ptr;
  p.sp.index.ranges = p.hp.ranges;
  p.sp.index.col_ptr = p.hp.col_ptr;
  p.sp.index.range_capacity = rows * R;
  p.sp.index.on_device = true;
  p.sp.max_keys_per_row = cfg.sinks + cfg.k + cfg.window + kRefresh;
  p.ws_bytes = sparse_decode_workspace_bytes(sparse_decode_bounds(p.sp));
  p.ws = dev_malloc(p.ws_bytes);
  p.sp.workspace = p.ws;
  p.sp.workspace_bytes = p.ws_bytes;
  return p;
}

void free_path(Path& p) {
  for (void* x : {p.rpos, p.rptr, p.cptr, p.ranges, p.o, p.ws}) dev_free(x);
}

struct TypeStats {  // sums over the measured steps of one type
  int n = 0;
  double ms = 0;
  kv::OffloadCounters keys, kv;
  void add(double t, const kv::OffloadCounters& dk, const kv::OffloadCounters& dv) {
    ++n;
    ms += t;
    keys.reads += dk.reads, keys.misses += dk.misses, keys.inserted += dk.inserted;
    kv.reads += dv.reads, kv.misses += dv.misses, kv.inserted += dv.inserted;
  }
  double mean_ms() const { return n ? ms / n : 0; }
  // Per step: bytes over PCIe (missed rows read zero-copy, inserted lines copied in, the append
  // of one token's K and V) and bytes read from the GPU banks (hits).
  double pcie_bytes(bool with_append) const {
    if (!n) return 0;
    const double b = double(keys.misses) * kRowBytes + double(kv.misses) * 2 * kRowBytes +
                     double(keys.inserted) * 2 * kRowBytes + double(kv.inserted) * 2 * 2 * kRowBytes;
    return b / n + (with_append ? 2.0 * kKvHeads * kRowBytes : 0.0);
  }
  double hbm_bytes() const {
    if (!n) return 0;
    return (double(keys.reads - keys.misses) * kRowBytes + double(kv.reads - kv.misses) * 2 * kRowBytes) / n;
  }
};

kv::OffloadCounters minus(const kv::OffloadCounters& a, const kv::OffloadCounters& b) {
  return {a.reads - b.reads, a.misses - b.misses, a.inserted - b.inserted};
}

enum class Kind { device, offload, uvm };
const char* kind_name(Kind k) { return k == Kind::device ? "device" : k == Kind::offload ? "offload" : "uvm"; }

struct Result {
  TypeStats refresh, cached;
  std::vector<uint16_t> out;  // the last step's output
};

// keys_admit: the keys cache's admission (offload only; the tier's caches with this override).
Result run(Kind kind, Path& p, kv::OffloadTier& tier, int32_t* dlen, int64_t len, const KvView& view, const void* knew,
           const void* vnew, int warm, int steps, int keys_admit = 2) {
  int32_t* lenp = kind == Kind::device ? dlen : tier.seq_len();
  const int32_t start = int32_t(len - 1);  // the first step's advance makes it len
  copy_h2d(lenp, &start, 4);
  memset_async(p.rpos, 0xff, kHeads * 4);
  sparse_decode_workspace_init(p.ws, p.ws_bytes);
  tier.reset(nullptr);
  KvOffloadLayer layer;
  if (kind == Kind::offload) {
    layer = tier.caches(0);
    layer.keys.admit_steps = keys_admit;
  }
  p.hp.offload = layer.keys;
  p.sp.offload = layer.kv;
  Stream st = stream_create();
  auto step = [&](Stream s) {
    advance_len<<<1, 1, 0, static_cast<cudaStream_t>(s)>>>(lenp);
    if (kind == Kind::offload) kv_offload_begin_step(tier.tick(), s);
    kv::KvScatterParams sc;
    sc.view = view;
    sc.k_pool = const_cast<void*>(view.k_pool);
    sc.v_pool = const_cast<void*>(view.v_pool);
    sc.k_new = knew;
    sc.v_new = vnew;
    sc.n_seq = 1;
    kv::kv_scatter(sc, s);
    if (kind == Kind::offload) kv_offload_append(layer, view, knew, vnew, s);
    hip_estimate_decode(p.hp, s);
    sparse_decode(p.sp, s);
    if (kind == Kind::offload) kv_offload_update(layer, view, s);
  };
  // One eager step sets every kernel's one-time attributes, then capture (the eager step counts:
  // the loop below starts from the next length).
  step(st);
  stream_sync(st);
  CudaGraph graph;
  graph.begin_capture(st);
  step(st);
  graph.end_capture(st);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  Result r;
  kv::OffloadCounters k0 = tier.keys_counters(), v0 = tier.kv_counters();
  for (int i = 1; i <= warm + steps; ++i) {  // step i: length len + i; refresh when i % r_m == 0
    cudaEventRecord(e0, static_cast<cudaStream_t>(st));
    graph.launch(st);
    cudaEventRecord(e1, static_cast<cudaStream_t>(st));
    check(cudaEventSynchronize(e1), "step");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    const kv::OffloadCounters k1 = tier.keys_counters(), v1 = tier.kv_counters();
    if (i > warm) (i % kRefresh == 0 ? r.refresh : r.cached).add(ms, minus(k1, k0), minus(v1, v0));
    k0 = k1, v0 = v1;
  }
  r.out.resize(kHeads * kHeadDim);
  copy_d2h(r.out.data(), p.o, r.out.size() * 2);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  stream_destroy(st);
  return r;
}

std::string bench_len(int64_t len, int warm, int steps, int32_t keys_slots, int32_t kv_slots, const Bandwidth& bw,
                      const HipEstimateConfig& cfg) {
  const int64_t cap = len + warm + steps + 8;
  const size_t pool = size_t(cap) * kKvHeads * kRowBytes;
  void* dk = dev_malloc(pool);
  void* dv = dev_malloc(pool);
  fill_random_bf16(dk, int64_t(pool / 2), 12, 1.f);
  fill_random_bf16(dv, int64_t(pool / 2), 13, 1.f);
  kv::OffloadSpec spec;
  spec.n_layer = 1;
  spec.n_kv_head = kKvHeads;
  spec.head_dim = kHeadDim;
  spec.capacity = cap;
  spec.line_tokens = cfg.b_k;
  spec.keys_slots = keys_slots;
  spec.kv_slots = kv_slots;
  kv::OffloadTier tier(spec);
  tier.copy_in(0, 0, cap, dk, dv, nullptr);
  void* q = dev_malloc(kHeads * kHeadDim * 2);
  void* knew = dev_malloc(kKvHeads * kRowBytes);
  void* vnew = dev_malloc(kKvHeads * kRowBytes);
  fill_random_bf16(q, kHeads * kHeadDim, 11, 1.f);
  fill_random_bf16(knew, kKvHeads * kHeadDim, 14, 1.f);
  fill_random_bf16(vnew, kKvHeads * kHeadDim, 15, 1.f);
  auto* table = static_cast<int32_t*>(dev_malloc(4));
  auto* dlen = static_cast<int32_t*>(dev_malloc(4));
  memset_async(table, 0, 4);
  device_sync();
  KvView dev;
  dev.k_pool = dk;
  dev.v_pool = dv;
  dev.elem = KvElem::bf16;
  dev.block_table = table;
  dev.seq_lens = dlen;
  dev.n_seq = 1;
  dev.max_pages_per_seq = 1;
  dev.page_size = int(cap);
  dev.n_pages = 1;
  dev.n_kv_head = kKvHeads;
  dev.head_dim = kHeadDim;
  dev.on_device = true;
  const KvView host = tier.host_view(0);

  Path pd = make_path(cfg, dev, q), ph = make_path(cfg, host, q), p1 = make_path(cfg, host, q),
       pu = make_path(cfg, host, q);
  // Every variant appends the same rows at the same positions (the device variant to the GPU
  // pools, the others to the host tier), so each starts from the same bytes.
  const Result rd = run(Kind::device, pd, tier, dlen, len, dev, knew, vnew, warm, steps);
  const Result ro = run(Kind::offload, ph, tier, dlen, len, host, knew, vnew, warm, steps, 2);
  const Result r1 = run(Kind::offload, p1, tier, dlen, len, host, knew, vnew, warm, steps, 1);
  const Result ru = run(Kind::uvm, pu, tier, dlen, len, host, knew, vnew, warm, std::min(steps, 16));
  const bool same = rd.out == ro.out && rd.out == r1.out;
  for (Path* p : {&pd, &ph, &p1, &pu}) free_path(*p);
  for (void* x : {dk, dv, q, knew, vnew, (void*)table, (void*)dlen}) dev_free(x);

  auto avg = [](const Result& r) { return (r.refresh.mean_ms() + (kRefresh - 1) * r.cached.mean_ms()) / kRefresh; };
  const double a_dev = avg(rd), a_off = avg(ro), a_uvm = avg(ru), a_1 = avg(r1);
  auto hit = [](const kv::OffloadCounters& c) { return c.hit_ratio(); };
  const TypeStats &oref = ro.refresh, &ocac = ro.cached;
  // 32-layer tier sizes (the spec above is one layer).
  kv::OffloadSpec all = spec;
  all.n_layer = kLayers;
  const kv::OffloadSizes z = kv::offload_sizes(all);
  auto bound_us = [&](double pcie, double hbm) {
    return std::max(pcie / (bw.h2d_gbs * 1e3), hbm / (bw.d2d_gbs * 1e3));
  };
  std::fprintf(stderr,
               "len=%lld | device: refresh %.4f cached %.4f avg/8 %.4f ms | offload: refresh %.4f cached %.4f avg/8 "
               "%.4f ms (%.2fx device) | uvm: refresh %.4f cached %.4f avg/8 %.4f ms\n"
               "  offload hit ratios: refresh keys %.4f kv %.4f | cached kv %.5f; PCIe bytes/step refresh %.0f cached "
               "%.0f; bank bytes/step refresh %.0f cached %.0f; bound (max of PCIe, HBM) refresh %.2f us cached %.2f "
               "us\n  x%d layers (extrapolated, attention+offload only): device %.3f ms/token, offload %.3f ms/token; "
               "tier for %d layers: host %.1f GiB, GPU %.2f GiB | outputs identical: device==offload %s\n"
               "  keys cache admitting at the first miss: refresh %.4f cached %.4f avg/8 %.4f ms, keys hit on refresh "
               "%.4f, PCIe bytes/step refresh %.0f\n",
               (long long)len, rd.refresh.mean_ms(), rd.cached.mean_ms(), a_dev, oref.mean_ms(), ocac.mean_ms(), a_off,
               a_off / a_dev, ru.refresh.mean_ms(), ru.cached.mean_ms(), a_uvm, hit(oref.keys), hit(oref.kv),
               hit(ocac.kv), oref.pcie_bytes(true), ocac.pcie_bytes(true), oref.hbm_bytes(), ocac.hbm_bytes(),
               bound_us(oref.pcie_bytes(true), oref.hbm_bytes()), bound_us(ocac.pcie_bytes(true), ocac.hbm_bytes()),
               kLayers, a_dev * kLayers, a_off * kLayers, kLayers, double(z.host_bytes) / (1 << 30),
               double(z.gpu_bytes) / (1 << 30), same ? "yes" : "NO", r1.refresh.mean_ms(), r1.cached.mean_ms(), a_1,
               hit(r1.refresh.keys), r1.refresh.pcie_bytes(true));
  char buf[3072];
  std::snprintf(
      buf, sizeof buf,
      "{\"len\": %lld, \"steps\": %d, \"warm\": %d, \"keys_slots\": %d, \"kv_slots\": %d, "
      "\"device\": {\"refresh_ms\": %.5f, \"cached_ms\": %.5f, \"avg_ms\": %.5f}, "
      "\"offload\": {\"refresh_ms\": %.5f, \"cached_ms\": %.5f, \"avg_ms\": %.5f, "
      "\"keys_hit_refresh\": %.5f, \"kv_hit_refresh\": %.5f, \"kv_hit_cached\": %.6f, "
      "\"pcie_bytes_refresh\": %.0f, \"pcie_bytes_cached\": %.0f, \"bank_bytes_refresh\": %.0f, "
      "\"bank_bytes_cached\": %.0f, \"bound_us_refresh\": %.3f, \"bound_us_cached\": %.3f}, "
      "\"offload_keys_admit1\": {\"refresh_ms\": %.5f, \"cached_ms\": %.5f, \"avg_ms\": %.5f, "
      "\"keys_hit_refresh\": %.5f, \"kv_hit_cached\": %.6f, \"pcie_bytes_refresh\": %.0f}, "
      "\"uvm\": {\"refresh_ms\": %.5f, \"cached_ms\": %.5f, \"avg_ms\": %.5f, \"steps\": %d}, "
      "\"ratio_offload_over_device_avg\": %.3f, \"ratio_uvm_over_offload_avg\": %.3f, "
      "\"extrapolated_32_layers\": {\"note\": \"one layer x 32, attention + offload only\", "
      "\"device_ms_per_token\": %.4f, \"offload_ms_per_token\": %.4f, \"host_gib\": %.2f, \"gpu_cache_gib\": %.3f}, "
      "\"identical_outputs_device_offload\": %s}",
      (long long)len, steps, warm, keys_slots, kv_slots, rd.refresh.mean_ms(), rd.cached.mean_ms(), a_dev,
      oref.mean_ms(), ocac.mean_ms(), a_off, hit(oref.keys), hit(oref.kv), hit(ocac.kv), oref.pcie_bytes(true),
      ocac.pcie_bytes(true), oref.hbm_bytes(), ocac.hbm_bytes(), bound_us(oref.pcie_bytes(true), oref.hbm_bytes()),
      bound_us(ocac.pcie_bytes(true), ocac.hbm_bytes()), r1.refresh.mean_ms(), r1.cached.mean_ms(), a_1,
      hit(r1.refresh.keys), hit(r1.cached.kv), r1.refresh.pcie_bytes(true), ru.refresh.mean_ms(), ru.cached.mean_ms(), a_uvm,
      std::min(steps, 16), a_off / a_dev, a_uvm / a_off, a_dev * kLayers, a_off * kLayers,
      double(z.host_bytes) / (1 << 30), double(z.gpu_bytes) / (1 << 30), same ? "true" : "false");
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> lens = {1048576};
  int steps = 64, warm = 8;
  int32_t keys_slots = 16384, kv_slots = 4096;
  const char* json_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--lens") && i + 1 < argc) lens = bench::parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--warm") && i + 1 < argc) warm = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--keys-slots") && i + 1 < argc) keys_slots = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--kv-slots") && i + 1 < argc) kv_slots = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: %s [--lens N,..] [--steps N] [--warm N] [--keys-slots N] [--kv-slots N] [--json FILE]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    require_hopper();
    const HipEstimateConfig cfg;  // the paper's defaults: k 512, b_k 2, window 256, sinks 16
    Bandwidth bw;
    {
      const size_t bytes = size_t(1) << 30;
      void* h = nullptr;
      check(cudaHostAlloc(&h, bytes, cudaHostAllocDefault), "pinned buffer");
      std::memset(h, 1, bytes);
      bw = measure_bandwidth(h, bytes);
      cudaFreeHost(h);
    }
    std::fprintf(stderr, "measured: H2D copy %.1f GB/s, D2D copy %.1f GB/s (read + write)\n", bw.h2d_gbs, bw.d2d_gbs);
    char extra[512];
    std::snprintf(extra, sizeof extra,
                  "\"shape\": {\"n_head\": %d, \"n_kv_head\": %d, \"head_dim\": %d, \"kv\": \"bf16\"}, "
                  "\"hip\": {\"k\": %lld, \"b_k\": %d, \"window\": %lld, \"sinks\": %lld, \"refresh\": %d}, "
                  "\"bandwidth\": {\"h2d_gbs\": %.2f, \"d2d_gbs\": %.2f}",
                  kHeads, kKvHeads, kHeadDim, (long long)cfg.k, cfg.b_k, (long long)cfg.window, (long long)cfg.sinks,
                  kRefresh, bw.h2d_gbs, bw.d2d_gbs);
    bench::JsonRecord js(device_info(0), extra);
    for (int64_t n : lens) js.add(bench_len(n, warm, steps, keys_slots, kv_slots, bw, cfg));
    js.finish(json_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "longctx_bench_offload: %s\n", e.what());
    return 1;
  }
  return 0;
}

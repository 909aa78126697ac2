// offload_tier.cpp: see offload_tier.h.
#include "kv/cuda/offload_tier.h"

#include <cuda_runtime.h>

#include <vector>

#include "kv/cuda/kv_cuda_check.h"
#include "util/error.h"

namespace longctx::kv {

namespace {

// Offsets of one cache's parts from its start (sizes: OffloadCacheSizes).
struct CacheParts {
  int64_t bank_k, bank_v, table, slot_line, last_use, miss_lines, miss_count, stats;
};
CacheParts parts(const OffloadCacheSizes& c, bool with_v) {
  CacheParts p{};
  int64_t o = 0;
  p.bank_k = o, o += c.bank;
  p.bank_v = with_v ? o : -1, o += with_v ? c.bank : 0;
  p.table = o, o += c.table;
  p.slot_line = o, o += c.slot_meta;
  p.last_use = o, o += c.slot_meta;
  p.miss_lines = o, o += c.slot_meta;
  p.miss_count = o, o += c.miss_count;
  p.stats = o;
  return p;
}

std::string device_name() {
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return "the GPU";
  return prop.name;
}

}  // namespace

OffloadTier::OffloadTier(const OffloadSpec& spec) : spec_(spec), sizes_(offload_sizes(spec)) {
  size_t free_b = 0, total_b = 0;
  detail::cuda_check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  const std::string problem = offload_fit_problem(spec_, host_available_bytes(), int64_t(free_b), device_name());
  if (!problem.empty()) fail("{}", problem);
  void* h = nullptr;
  detail::cuda_check(cudaHostAlloc(&h, size_t(sizes_.host_bytes), cudaHostAllocMapped | cudaHostAllocPortable),
                     "cudaHostAlloc (pinned, mapped) of the KV offload host tier");
  host_ = static_cast<char*>(h);
  void* hd = nullptr;
  void* g = nullptr;
  try {
    detail::cuda_check(cudaHostGetDevicePointer(&hd, h, 0), "cudaHostGetDevicePointer of the host tier");
    host_dev_ = static_cast<char*>(hd);
    detail::cuda_check(cudaMalloc(&g, size_t(sizes_.gpu_bytes)), "cudaMalloc of the KV offload caches");
  } catch (...) {
    cudaFreeHost(host_);
    throw;
  }
  gpu_ = static_cast<char*>(g);
  char* tail = gpu_ + int64_t(spec_.n_layer) * sizes_.gpu_layer_bytes;
  tick_ = reinterpret_cast<int32_t*>(tail);
  seq_len_ = tick_ + 1;
  block_table_ = tick_ + 2;
  try {
    reset(nullptr);
    detail::cuda_check(cudaMemset(seq_len_, 0, 8), "zeroing the offload length and block table");
    detail::cuda_check(cudaDeviceSynchronize(), "KV offload tier set-up");
  } catch (...) {
    cudaFree(gpu_);
    cudaFreeHost(host_);
    throw;
  }
}

OffloadTier::~OffloadTier() {
  cudaFree(gpu_);
  cudaFreeHost(host_);
}

void* OffloadTier::host_k(int layer) const {
  if (layer < 0 || layer >= spec_.n_layer) fail("KV offload: layer {} of {}", layer, spec_.n_layer);
  return host_ + 2 * int64_t(layer) * sizes_.host_pool_bytes;
}
void* OffloadTier::host_v(int layer) const { return static_cast<char*>(host_k(layer)) + sizes_.host_pool_bytes; }

KvView OffloadTier::host_view(int layer) const {
  const int64_t off = static_cast<char*>(host_k(layer)) - host_;
  KvView v;
  v.k_pool = host_dev_ + off;
  v.v_pool = host_dev_ + off + sizes_.host_pool_bytes;
  v.elem = spec_.elem;
  v.block_table = block_table_;  // {0}: the one page is the whole pool
  v.seq_lens = seq_len_;
  v.n_seq = 1;
  v.max_pages_per_seq = 1;
  v.page_size = int(spec_.capacity);
  v.n_pages = 1;
  v.n_kv_head = spec_.n_kv_head;
  v.head_dim = spec_.head_dim;
  v.on_device = true;
  return v;
}

void OffloadTier::copy_in(int layer, int64_t t0, int64_t n, const void* k_dev, const void* v_dev, void* stream) {
  if (t0 < 0 || n < 0 || t0 + n > spec_.capacity)
    fail("KV offload: rows [{}, {}) past the tier's {} tokens", t0, t0 + n, spec_.capacity);
  const auto st = static_cast<cudaStream_t>(stream);
  const size_t off = size_t(t0 * sizes_.row_bytes), bytes = size_t(n * sizes_.row_bytes);
  detail::cuda_check(cudaMemcpyAsync(static_cast<char*>(host_k(layer)) + off, k_dev, bytes, cudaMemcpyDeviceToHost, st),
                     "copying K rows to the host tier");
  detail::cuda_check(cudaMemcpyAsync(static_cast<char*>(host_v(layer)) + off, v_dev, bytes, cudaMemcpyDeviceToHost, st),
                     "copying V rows to the host tier");
}

KvOffloadCache OffloadTier::cache_at(int layer, bool kv) const {
  if (layer < 0 || layer >= spec_.n_layer) fail("KV offload: layer {} of {}", layer, spec_.n_layer);
  const OffloadCacheSizes& z = kv ? sizes_.kv : sizes_.keys;
  KvOffloadCache c;
  if (z.total == 0) return c;
  const CacheParts p = parts(z, kv);
  char* base = gpu_ + int64_t(layer) * sizes_.gpu_layer_bytes + (kv ? sizes_.keys.total : 0);
  c.bank_k = base + p.bank_k;
  c.bank_v = kv ? base + p.bank_v : nullptr;
  c.table = reinterpret_cast<int32_t*>(base + p.table);
  c.slot_line = reinterpret_cast<int32_t*>(base + p.slot_line);
  c.last_use = reinterpret_cast<int32_t*>(base + p.last_use);
  c.miss_lines = reinterpret_cast<int32_t*>(base + p.miss_lines);
  c.miss_count = reinterpret_cast<int32_t*>(base + p.miss_count);
  const int32_t buckets = kv ? spec_.kv_buckets : spec_.keys_buckets;
  if (buckets > 0) c.hash_used = c.miss_count + spec_.n_kv_head;
  c.n_buckets = buckets;
  c.stats = reinterpret_cast<unsigned long long*>(base + p.stats);
  c.tick = tick_;
  c.n_kv_head = spec_.n_kv_head;
  c.line_tokens = spec_.line_tokens;
  c.n_lines = sizes_.n_lines;
  c.n_slots = kv ? spec_.kv_slots : spec_.keys_slots;
  c.admit_steps = kv ? spec_.kv_admit_steps : spec_.keys_admit_steps;
  return c;
}
KvOffloadCache OffloadTier::keys_cache(int layer) const { return cache_at(layer, false); }
KvOffloadCache OffloadTier::kv_cache(int layer) const { return cache_at(layer, true); }

void OffloadTier::reset(void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  for (int l = 0; l < spec_.n_layer; ++l)
    for (bool kv : {false, true}) {
      const OffloadCacheSizes& z = kv ? sizes_.kv : sizes_.keys;
      if (z.total == 0) continue;
      const KvOffloadCache c = cache_at(l, kv);
      // table (hash map: every bucket empty), slot_line, last_use, miss_lines: -1; miss_count
      // (hash map: and hash_used), stats: 0 (contiguous parts).
      detail::cuda_check(cudaMemsetAsync(c.table, 0xff, size_t(z.table + 3 * z.slot_meta), st), "offload reset");
      detail::cuda_check(cudaMemsetAsync(c.miss_count, 0, size_t(z.miss_count + z.stats), st), "offload reset");
    }
  detail::cuda_check(cudaMemsetAsync(tick_, 0, 4, st), "offload tick reset");
}

OffloadCounters OffloadTier::counters(bool kv) const {
  OffloadCounters sum;
  if ((kv ? sizes_.kv : sizes_.keys).total == 0) return sum;
  detail::cuda_check(cudaDeviceSynchronize(), "reading the offload counters");
  // One strided copy for all layers (a layer's counters sit gpu_layer_bytes after the previous
  // layer's): the GPU model reads them after every decode step.
  constexpr size_t kRow = kOffloadStats * sizeof(unsigned long long);
  std::vector<unsigned long long> s(size_t(spec_.n_layer) * kOffloadStats);
  detail::cuda_check(cudaMemcpy2D(s.data(), kRow, cache_at(0, kv).stats, size_t(sizes_.gpu_layer_bytes), kRow,
                                  size_t(spec_.n_layer), cudaMemcpyDeviceToHost),
                     "offload counters");
  for (int l = 0; l < spec_.n_layer; ++l) {
    sum.reads += s[size_t(l) * kOffloadStats + kStatReads];
    sum.misses += s[size_t(l) * kOffloadStats + kStatMisses];
    sum.inserted += s[size_t(l) * kOffloadStats + kStatInserted];
  }
  return sum;
}
OffloadCounters OffloadTier::keys_counters() const { return counters(false); }
OffloadCounters OffloadTier::kv_counters() const { return counters(true); }

}  // namespace longctx::kv

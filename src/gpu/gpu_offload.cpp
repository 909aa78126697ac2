// gpu_offload.cpp: see gpu_offload.h. The split plan, the HBM block + host tier of one sequence.
#include "gpu/gpu_offload.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "gpu/memory_plan.h"
#include "kernels/cuda/runtime.h"
#include "util/error.h"

namespace longctx::gpu {

namespace {

kv::OffloadSpec tier_spec(const ModelConfig& c, const KvOffloadOptions& o, const OffloadBudget& b, int host_layers,
                          kv::PageTable table) {
  const int64_t capacity = b.capacity;
  const int line = b.line_tokens;
  kv::OffloadSpec s;
  s.n_layer = std::max(host_layers, 1);
  s.n_kv_head = c.n_kv_head;
  s.head_dim = c.head_dim;
  s.elem = b.elem;  // host pools and GPU caches hold the cache's element (HiP reads bf16 and e4m3 keys)
  s.capacity = capacity;
  s.line_tokens = line;
  // More slots than lines would never fill: a short context gets one slot per line.
  const int64_t lines = (capacity + line - 1) / line;
  s.keys_slots = int32_t(std::min<int64_t>(o.keys_slots, lines));
  s.kv_slots = int32_t(std::min<int64_t>(o.kv_slots, lines));
  if (table == kv::PageTable::hash) {
    s.keys_buckets = offload_hash_buckets(s.keys_slots);
    s.kv_buckets = offload_hash_buckets(s.kv_slots);
  }
  return s;
}

// The layer-major prefill's bf16 K/V of one layer, [capacity, KV] each.
size_t stage_kv_of(const ModelConfig& c, int64_t cap) {
  return stage_layout(c, cap, KvCacheType::fp8, true).total - stage_layout(c, cap, KvCacheType::bf16, true).total;
}

struct Split {
  int hbm = 0;           // layers kept whole in HBM
  size_t gpu_need = 0;   // everything on the GPU for this split (reserve included)
  size_t host_need = 0;  // pinned host tier + the host reserve
};

std::mutex g_mu;
GpuOffloadStats g_stats;

}  // namespace

GpuOffloadStats last_gpu_offload_stats() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_stats;
}

void publish_offload_stats(const GpuOffloadStats& s) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_stats = s;
}

std::string offload_plan_problem(const ModelConfig& c, const KvOffloadOptions& opts, const OffloadBudget& b) {
  try {
    (void)plan_offload(c, opts, b);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

PageTableChoice parse_page_table(const std::string& s) {
  if (s == "auto") return PageTableChoice::automatic;
  if (s == "vector") return PageTableChoice::vector;
  if (s == "hash") return PageTableChoice::hash;
  fail("--kv-page-table '{}': known are auto, vector, hash", s);
}

namespace {
OffloadPlan plan_with(const ModelConfig& c, const KvOffloadOptions& opts, const OffloadBudget& b, kv::PageTable table);
}  // namespace

OffloadPlan plan_offload(const ModelConfig& c, const KvOffloadOptions& opts, const OffloadBudget& b) {
  switch (opts.page_table) {
    case PageTableChoice::vector: return plan_with(c, opts, b, kv::PageTable::vector);
    case PageTableChoice::hash: return plan_with(c, opts, b, kv::PageTable::hash);
    case PageTableChoice::automatic: break;
  }
  try {
    return plan_with(c, opts, b, kv::PageTable::vector);
  } catch (const Error&) {  // memory is tight: the smaller tables may make it fit
    return plan_with(c, opts, b, kv::PageTable::hash);
  }
}

namespace {
OffloadPlan plan_with(const ModelConfig& c, const KvOffloadOptions& opts, const OffloadBudget& b, kv::PageTable table) {
  const int L = c.n_layer;
  if (opts.host_layers > L)
    fail("--kv-host-layers {}: {} has {} layers", opts.host_layers, c.name, L);
  const int64_t cap = b.capacity;
  const size_t KV = size_t(c.n_kv_head) * size_t(c.head_dim);
  OffloadPlan p;
  p.capacity = cap;
  const size_t eb = size_t(kv_elem_bytes(b.elem));
  p.hbm_layer_bytes = 2 * align_up(size_t(cap) * KV * eb);
  // The layer-major staging of one host layer's K/V (bf16, the whole prompt): needed once any layer
  // is on the host; the fp8 cache stages every layer, so its gpu_fixed holds it already.
  const size_t stage_kv = b.elem == KvElem::bf16 ? stage_kv_of(c, cap) : 0;
  auto split = [&](int hbm) {
    Split s;
    s.hbm = hbm;
    const int host = L - hbm;
    s.gpu_need = b.gpu_fixed + kReserveBytes + size_t(hbm) * p.hbm_layer_bytes;
    s.host_need = b.host_fixed + (b.host_fixed ? size_t(kHostReserveBytes) : 0);
    if (host > 0) {
      const kv::OffloadSizes z = kv::offload_sizes(tier_spec(c, opts, b, host, table));
      s.gpu_need += size_t(z.gpu_bytes) + stage_kv;
      s.host_need = b.host_fixed + size_t(z.host_bytes) + size_t(kHostReserveBytes);
    }
    return s;
  };
  Split s;
  if (opts.host_layers >= 0) {
    s = split(L - opts.host_layers);
  } else {  // as many layers in HBM as fit (the fewest on the host: PCIe is ~80x slower than HBM)
    s = split(0);
    for (int hbm = L; hbm >= 0; --hbm)
      if (const Split t = split(hbm); t.gpu_need <= b.gpu_free) {
        s = t;
        break;
      }
  }
  const int host = L - s.hbm;
  const bool gpu_ok = s.gpu_need <= b.gpu_free, host_ok = s.host_need <= size_t(std::max<int64_t>(b.host_free, 0));
  if (!gpu_ok || !host_ok) {
    const kv::OffloadSizes one = kv::offload_sizes(tier_spec(c, opts, b, 1, table));
    fail("KV offload of {} tokens ({} layers x K,V x {} heads x {} x {}) does not fit: {} layers in HBM and {} in "
         "host memory need {} of GPU memory ({} per HBM layer, {} of caches per host layer, {} of staging, "
         "workspaces and reserve, of which {} grow with the prompt: the prefill's residual stream {} and one "
         "layer's K/V in bf16 {}) while {} has {} free{}, and {} of host memory ({} per host layer, pinned, {} for "
         "the residual stream, + {} for the process) while {} is available{}: use a shorter context or fewer new "
         "tokens{}",
         cap, L, c.n_kv_head, c.head_dim, b.elem == KvElem::bf16 ? "bf16" : "fp8", s.hbm, host, gib(s.gpu_need), gib(p.hbm_layer_bytes),
         gib(size_t(one.gpu_layer_bytes)), gib(b.gpu_fixed + kReserveBytes + (host ? stage_kv : 0)),
         gib(b.gpu_residual + (host || b.elem != KvElem::bf16 ? stage_kv_of(c, cap) : 0)),
         b.host_fixed ? gib(b.gpu_residual) + " (two chunks; the rest in host memory)" : gib(b.gpu_residual),
         gib(host || b.elem != KvElem::bf16 ? stage_kv_of(c, cap) : 0), b.device_name, gib(b.gpu_free),
         gpu_ok ? "" : " (short)", gib(s.host_need), gib(size_t(2 * one.host_pool_bytes)), gib(b.host_fixed),
         gib(size_t(kHostReserveBytes)), gib(size_t(std::max<int64_t>(b.host_free, 0))), host_ok ? "" : " (short)",
         opts.host_layers >= 0 ? ", or another --kv-host-layers" : "");
  }
  // Which layers go to the host: dense-decoding layers stay in HBM first, then the lowest indices.
  std::vector<int> order;
  for (int pass = 0; pass < 2; ++pass)
    for (int l = 0; l < L; ++l)
      if ((b.decodes_dense && b.decodes_dense(l)) == (pass == 0)) order.push_back(l);
  p.tier_layer.assign(size_t(L), -1);
  std::vector<int> host_set(order.begin() + s.hbm, order.end());
  std::sort(host_set.begin(), host_set.end());
  for (size_t i = 0; i < host_set.size(); ++i) p.tier_layer[size_t(host_set[i])] = int(i);
  p.host_layers = host;
  p.hbm_bytes = size_t(s.hbm) * p.hbm_layer_bytes;
  if (host > 0) {
    p.tier = tier_spec(c, opts, b, host, table);
    p.tier_sizes = kv::offload_sizes(p.tier);
  }
  p.stage_kv_bytes = host > 0 || b.elem != KvElem::bf16 ? stage_kv_of(c, cap) : 0;
  p.stage_residual_bytes = b.gpu_residual;
  p.host_residual_bytes = b.host_fixed;
  p.page_table = table;
  return p;
}
}  // namespace

std::string offload_plan_summary(const OffloadPlan& p) {
  const int L = int(p.tier_layer.size());
  return fmt::format(
      "KV offload of {} tokens: {} of {} layers in host memory ({} pinned, {} of GPU caches and {}-map page tables), "
      "{} in HBM ({}); "
      "prefill staging on the GPU {} growing with the prompt (one layer's K/V in bf16 for its attention) + {} of "
      "residual stream{}",
      p.capacity, p.host_layers, L, gib(size_t(p.tier_sizes.host_bytes)), gib(size_t(p.tier_sizes.gpu_bytes)),
      kv::page_table_name(p.page_table),
      L - p.host_layers, gib(p.hbm_bytes), gib(p.stage_kv_bytes), gib(p.stage_residual_bytes),
      p.host_residual_bytes ? fmt::format(" (two chunks; {} pinned in host memory)", gib(p.host_residual_bytes))
                            : std::string(" (whole prompt)"));
}

GpuOffload::GpuOffload(const ModelConfig& c, const OffloadPlan& plan) : cfg_(c), plan_(plan) {
  hbm_index_.assign(size_t(cfg_.n_layer), -1);
  int n_hbm = 0;
  for (int l = 0; l < cfg_.n_layer; ++l)
    if (plan_.tier_layer[size_t(l)] < 0) hbm_index_[size_t(l)] = n_hbm++;
  if (plan_.host_layers > 0) tier_ = std::make_unique<kv::OffloadTier>(plan_.tier);
  if (n_hbm > 0) hbm_ = static_cast<char*>(cuda::dev_malloc(plan_.hbm_bytes));
}

GpuOffload::~GpuOffload() { cuda::dev_free(hbm_); }

void* GpuOffload::rows(int l, int which) const {
  const int t = plan_.tier_layer[size_t(l)];
  if (t >= 0) {
    const KvView v = tier_->host_view(t);  // device addresses of mapped host pools, writable
    return const_cast<void*>(which ? v.v_pool : v.k_pool);
  }
  return hbm_ + size_t(hbm_index_[size_t(l)]) * plan_.hbm_layer_bytes + (which ? plan_.hbm_layer_bytes / 2 : 0);
}

KvView GpuOffload::host_view(int l, const int32_t* seq_lens) const {
  KvView v = tier_->host_view(plan_.tier_layer[size_t(l)]);
  v.seq_lens = seq_lens;  // the model's step length: what a replayed graph reads
  return v;
}

KvOffloadLayer GpuOffload::caches(int l) const { return tier_->caches(plan_.tier_layer[size_t(l)]); }

void GpuOffload::store(int l, int64_t t0, int64_t n, const void* k_dev, const void* v_dev, void* stream) {
  tier_->copy_in(plan_.tier_layer[size_t(l)], t0, n, k_dev, v_dev, stream);
}

void GpuOffload::load(int l, int64_t t0, int64_t n, void* k_dev, void* v_dev, void* stream) const {
  const int t = plan_.tier_layer[size_t(l)];
  const size_t row = size_t(tier_->sizes().row_bytes), off = size_t(t0) * row, bytes = size_t(n) * row;
  const auto st = static_cast<cudaStream_t>(stream);
  for (int which = 0; which < 2; ++which) {
    const char* src = static_cast<const char*>(which ? tier_->host_v(t) : tier_->host_k(t)) + off;
    const cudaError_t e = cudaMemcpyAsync(which ? v_dev : k_dev, src, bytes, cudaMemcpyHostToDevice, st);
    if (e != cudaSuccess) fail("KV offload: reading layer {}'s rows back from host memory: {}", l, cudaGetErrorString(e));
  }
}

void GpuOffload::reset(void* stream) {
  if (tier_) tier_->reset(stream);
  last_keys_ = last_kv_ = {};
}

void GpuOffload::note_step(GpuOffloadStats& s) {
  if (!tier_) return;
  const kv::OffloadCounters k = tier_->keys_counters(), v = tier_->kv_counters();
  kv::OffloadCounters dk{k.reads - last_keys_.reads, k.misses - last_keys_.misses, k.inserted - last_keys_.inserted};
  kv::OffloadCounters dv{v.reads - last_kv_.reads, v.misses - last_kv_.misses, v.inserted - last_kv_.inserted};
  last_keys_ = k;
  last_kv_ = v;
  OffloadStepCounters& c = dk.reads > 0 ? s.refresh : s.cached;  // the estimator reads keys on refresh steps only
  ++c.steps;
  c.keys.reads += dk.reads, c.keys.misses += dk.misses, c.keys.inserted += dk.inserted;
  c.kv.reads += dv.reads, c.kv.misses += dv.misses, c.kv.inserted += dv.inserted;
  const int64_t head_row = int64_t(cfg_.head_dim) * kv_elem_bytes(plan_.tier.elem), line = plan_.tier.line_tokens;
  // misses read one head row each (K; the K/V cache also V), insertions copy whole lines
  c.pcie_bytes += int64_t(dk.misses + dk.inserted * line) * head_row + int64_t(dv.misses + dv.inserted * line) * 2 * head_row;
}

}  // namespace longctx::gpu

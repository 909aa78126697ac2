// gpu_offload.h: KV offload in the GPU model (issue 17): the layers whose K/V live in pinned host
// memory behind the GPU caches of kv/cuda/offload_tier.h, the layers kept whole in HBM, and the
// up-front plan that splits them.
//
// What: with GpuOptions::kv_offload the model's one sequence has no paged pool. Each layer's K/V
// rows [capacity, n_kv_head, head_dim] (bf16, or e4m3 with --kv-cache fp8: 1 byte an element in
// HBM, host pools and GPU caches alike) are either in one HBM block (an "HBM layer", read as
// the pool would be) or in the OffloadTier's host pools (a "host layer", read zero-copy by the
// kernels through a device-mapped pointer, with HiP's keys cache and K/V cache in front).
// plan_offload() decides the split before anything is allocated: the layers that decode dense
// (they read every key at every step: HiP's dense_layers) go to HBM first, then the others in
// order, as many as the GPU memory left after the weights, the activations, the layer-major
// prefill's staging (one layer's K/V in bf16, and the residual stream or, when it lives in pinned
// host memory, two chunks of it), the decode workspace, the method's buffers and the host layers'
// caches allows; the rest go to host memory. When the host
// layers do not fit the host's available memory either, the Error names both budgets.
// How the model uses it (gpu_transformer.cpp, gpu_offload.cpp):
//   prefill (layer-major, the residual stream in host memory by default: prefill_residual.h): a
//     host layer's chunks attend over the staging buffer; at the layer's end
//     its new rows go to the host pools (bf16: OffloadTier::copy_in; fp8: the quantizer writes
//     the codes through the mapped pointer); so prefill GPU memory holds one layer's K/V, never the
//     host layers' (an HBM layer writes its block directly);
//   decode (one CUDA graph): kv_offload_begin_step once; per host layer: kv_append into the mapped
//     host rows, kv_offload_append (write-through to resident lines; fp8: read back from the host
//     row the append quantized), the estimator and the
//     sparse decode with the layer's caches, kv_offload_update; HBM layers run as without offload.
// Outputs equal offload off bit for bit (tests/gpu/test_gpu_offload.cpp): the kernels read the
// same rows (bf16 or e4m3 codes, the same per-layer scales) from either place.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/params/kv_offload.h"
#include "kernels/params/kv_view.h"
#include "kv/cuda/offload_tier.h"
#include "model/config.h"

namespace longctx::gpu {

// --kv-page-table: the host layers' caches' page tables (kv/offload_spec.h). automatic: the vector
// map (one int32 a line, direct) unless the plan does not fit with it and fits with the hash map
// (fixed size, 4 buckets of 8 bytes a slot: 5 MiB a host layer at the default slots).
enum class PageTableChoice { automatic, vector, hash };
PageTableChoice parse_page_table(const std::string& s);  // "auto" | "vector" | "hash"; else Error

// --kv-offload: what the user asks for.
struct KvOffloadOptions {
  bool on = false;
  int host_layers = -1;          // layers in host memory; -1: as few as the GPU needs (plan_offload)
  int32_t keys_slots = 16384;    // HiP keys-cache lines per (host layer, KV head): 8 MiB per layer at d 128
  int32_t kv_slots = 4096;       // K/V-cache lines per (host layer, KV head): 4 MiB per layer (2x with V)
  // The layer-major prefill's residual stream in pinned host memory, streamed through the GPU in
  // chunks (gpu/prefill_residual.h): GPU staging O(chunk) instead of O(T). Not with a method that
  // estimates from the whole prompt's stream (MInference), which keeps it on the GPU.
  bool host_residual = true;
  PageTableChoice page_table = PageTableChoice::automatic;
};

// Host memory kept out of the pinned tier: the process (prompt, logits, binaries) and the OS.
inline constexpr int64_t kHostReserveBytes = int64_t(6) << 30;

// What plan_offload needs besides the model: the budgets and the fixed GPU needs.
struct OffloadBudget {
  int64_t capacity = 0;        // tokens of the sequence (prompt + new tokens)
  int line_tokens = 2;         // cache line: HiP's b_k
  size_t gpu_free = 0;         // free now (weights and activations already held)
  size_t gpu_fixed = 0;        // staging, decode workspace, method buffers: needed whatever the split
  size_t gpu_residual = 0;     // of gpu_fixed: the prefill's residual stream on the GPU (messages)
  int64_t host_free = 0;       // host memory available (MemAvailable)
  size_t host_fixed = 0;       // pinned host memory whatever the split: the residual stream, when there
  std::string device_name;
  std::function<bool(int)> decodes_dense;  // layer -> whether its decode steps read every key
  KvElem elem = KvElem::bf16;  // the cache's element: bf16, or fp8_e4m3 (--kv-cache fp8; gpu_fixed
                               // then holds the layer-major staging, which every layer uses)
};

struct OffloadPlan {
  int64_t capacity = 0;
  std::vector<int> tier_layer;  // [n_layer]: the layer's index in the host tier, -1: whole in HBM
  int host_layers = 0;
  size_t hbm_layer_bytes = 0;   // one HBM layer's K and V
  size_t hbm_bytes = 0;         // all HBM layers
  kv::PageTable page_table = kv::PageTable::vector;  // the host layers' caches'
  kv::OffloadSpec tier;         // the host layers (tier.n_layer = host_layers; unused when 0)
  kv::OffloadSizes tier_sizes;
  // What grows with the prompt on the GPU besides the HBM layers: the prefill staging of one
  // layer's K/V in bf16 (its attention reads every earlier key), and the residual stream unless
  // it is in host memory (then two chunk buffers).
  size_t stage_kv_bytes = 0;
  size_t stage_residual_bytes = 0;
  size_t host_residual_bytes = 0;  // pinned (0: on the GPU)
};
// One line for logs and benchmarks: the split, the caches, and the staging that grows with T.
std::string offload_plan_summary(const OffloadPlan& p);

// The split for `opts` (host_layers < 0: automatic), or an Error naming the GPU and host budgets.
OffloadPlan plan_offload(const ModelConfig& c, const KvOffloadOptions& opts, const OffloadBudget& b);
// "" when plan_offload succeeds, else its message.
std::string offload_plan_problem(const ModelConfig& c, const KvOffloadOptions& opts, const OffloadBudget& b);

// Cumulative counters of one sequence's decode with offload (the host layers' caches, summed over
// layers), split by step kind: a refresh step is one where the estimator read keys (HiP re-estimates),
// a cached step reads only the K/V cache. Bytes over PCIe: missed rows + inserted lines.
struct OffloadStepCounters {
  int64_t steps = 0;
  kv::OffloadCounters keys, kv;
  int64_t pcie_bytes = 0;
};
struct GpuOffloadStats {
  bool on = false;
  int host_layers = 0, hbm_layers = 0;
  size_t host_bytes = 0;      // pinned host tier
  size_t cache_bytes = 0;     // GPU caches and tables of the host layers
  const char* page_table = "vector";
  size_t hbm_kv_bytes = 0;    // HBM layers' K/V
  size_t stage_bytes = 0;     // GPU prefill staging (one layer's bf16 K/V + the residual stream's part)
  size_t residual_host_bytes = 0;  // the prefill's residual stream in pinned host memory (0: on the GPU)
  OffloadStepCounters refresh, cached;
};

// The most recent GpuTransformer's (for benchmarks, as gpu_stats.h): set at reset() and after each
// decode step.
GpuOffloadStats last_gpu_offload_stats();
void publish_offload_stats(const GpuOffloadStats& s);

// The offloaded KV of one sequence: the HBM block and the host tier of a plan.
class GpuOffload {
 public:
  GpuOffload(const ModelConfig& c, const OffloadPlan& plan);  // allocates (Error when it does not fit)
  ~GpuOffload();
  GpuOffload(const GpuOffload&) = delete;
  GpuOffload& operator=(const GpuOffload&) = delete;

  const OffloadPlan& plan() const { return plan_; }
  bool on_host(int l) const { return plan_.tier_layer[size_t(l)] >= 0; }
  // Layer l's K or V rows [capacity, n_kv_head, head_dim] (the plan's element) as kernels address
  // them: HBM, or the device address of the mapped host pool.
  void* rows(int l, int which) const;
  // A host layer's view (one sequence, length from seq_lens: device int32 [1]) and its caches.
  KvView host_view(int l, const int32_t* seq_lens) const;
  KvOffloadLayer caches(int l) const;
  int32_t* tick() const { return tier_ ? tier_->tick() : nullptr; }
  // Host layer l: rows [t0, t0 + n) of K/V (device, the plan's element) out to host memory, and back
  // (stream-ordered).
  void store(int l, int64_t t0, int64_t n, const void* k_dev, const void* v_dev, void* stream);
  void load(int l, int64_t t0, int64_t n, void* k_dev, void* v_dev, void* stream) const;
  void reset(void* stream);  // empties the caches, zeroes the counters (a new sequence)
  // Reads the counters (synchronises) and adds the step since the last call to refresh or cached.
  void note_step(GpuOffloadStats& s);

 private:
  ModelConfig cfg_;
  OffloadPlan plan_;
  std::unique_ptr<kv::OffloadTier> tier_;
  char* hbm_ = nullptr;  // HBM layers' K, V blocks in layer order
  std::vector<int> hbm_index_;  // [n_layer]: index among the HBM layers, -1 on host
  kv::OffloadCounters last_keys_, last_kv_;
};

}  // namespace longctx::gpu

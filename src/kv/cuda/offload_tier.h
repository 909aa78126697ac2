// offload_tier.h (kv/cuda): the KV offload tier: one sequence's whole KV cache in pinned, mapped
// host memory, and per layer two GPU-resident caches in front of it (kernels/params/kv_offload.h):
// the keys cache HiP's mask estimator reads through and the K/V cache its sparse attention reads
// through, each with a page table (a vector map, or a fixed-size hash map: OffloadSpec::*_buckets).
//
// What: the constructor sizes everything from the OffloadSpec (kv/offload_spec.h), checks the
// host part against available host memory and the GPU part against free device memory (one
// Error naming both), then allocates: one cudaHostAlloc(mapped) block for every layer's K and V
// pools, one cudaMalloc block for the caches, the step tick, the sequence length and a one-entry
// identity block table. host_view(l) is a KvView over the host pools (device pointers: kernels
// read them zero-copy), so any kernel that takes a KvView can run over the host tier as is
// (that alone is "HiP over UVM" in the paper's words); keys_cache(l) / kv_cache(l) add the caches.
// How a decode step uses it (all GPU work, graph-capturable): kv_offload_begin_step(tick());
// per layer: write the new token's K/V into host_view(l) (kv_scatter) and through to the
// caches' resident lines (kv_offload_append(caches(l))), HiP's estimator with
// HipDecodeParams::offload = keys_cache(l), sparse_decode with SparseDecodeParams::offload =
// kv_cache(l), then kv_offload_update(caches(l)) (kernels/cuda/kv_offload.h).
// Filling: prefill writes a layer's K/V rows through host_k/host_v (host pointers) or
// copy_in (cudaMemcpyAsync from device rows): the tier then holds prompt K/V off the GPU.
// Built only with CUDA; library longctx_kv_cuda (no kernels: it allocates and hands out views).
#pragma once
#include <cstdint>

#include "kernels/params/kv_offload.h"
#include "kernels/params/kv_view.h"
#include "kv/offload_spec.h"

namespace longctx::kv {

// Cumulative counters of one cache kind summed over layers (OffloadStat).
struct OffloadCounters {
  uint64_t reads = 0, misses = 0, inserted = 0;
  double hit_ratio() const { return reads ? 1.0 - double(misses) / double(reads) : 1.0; }
};

class OffloadTier {
 public:
  explicit OffloadTier(const OffloadSpec& spec);  // Error: bad spec or does not fit (names both budgets)
  ~OffloadTier();
  OffloadTier(const OffloadTier&) = delete;
  OffloadTier& operator=(const OffloadTier&) = delete;

  const OffloadSpec& spec() const { return spec_; }
  const OffloadSizes& sizes() const { return sizes_; }

  // Device view of layer l's host pools: one sequence, page_size = capacity, seq_lens = seq_len().
  KvView host_view(int layer) const;
  void* host_k(int layer) const;  // host pointer: [capacity, n_kv_head, head_dim]
  void* host_v(int layer) const;
  // Copies n rows of layer l's K and V (device, [n, n_kv_head, head_dim] of the tier's type) into
  // positions [t0, t0 + n) of the host pools, on stream s.
  void copy_in(int layer, int64_t t0, int64_t n, const void* k_dev, const void* v_dev, void* stream);
  KvOffloadCache keys_cache(int layer) const;  // disabled (table null) when keys_slots == 0
  KvOffloadCache kv_cache(int layer) const;    // disabled when kv_slots == 0
  KvOffloadLayer caches(int layer) const { return {keys_cache(layer), kv_cache(layer)}; }
  int32_t* tick() const { return tick_; }        // device [1]
  int32_t* seq_len() const { return seq_len_; }  // device [1]: the sequence's length

  // Empties every cache, zeroes the counters and the tick (stream-ordered memsets).
  void reset(void* stream);
  // Reads the counters (synchronises the device).
  OffloadCounters keys_counters() const;
  OffloadCounters kv_counters() const;

 private:
  KvOffloadCache cache_at(int layer, bool kv) const;
  OffloadCounters counters(bool kv) const;

  OffloadSpec spec_;
  OffloadSizes sizes_;
  char* host_ = nullptr;      // pinned, mapped: 2 * n_layer pools
  char* host_dev_ = nullptr;  // its device address
  char* gpu_ = nullptr;       // per layer: keys cache then K/V cache; then tick, seq_len, block table
  int32_t* tick_ = nullptr;
  int32_t* seq_len_ = nullptr;
  int32_t* block_table_ = nullptr;
};

}  // namespace longctx::kv

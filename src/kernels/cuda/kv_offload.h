// kv_offload.h (cuda): the GPU work of KV offload besides the in-kernel reads
// (kernels/params/kv_offload.h, kernels/cuda/kv_offload.cuh): the step tick, the new token's
// write-through, the per-layer cache update, and a gather that reads rows through a cache.
//
// A decode step with offload, all on one stream and graph-capturable (sizes come from the caches'
// fixed shapes, counts from device memory): kv_offload_begin_step (++tick); per layer: kv_scatter
// of the new token into the host view, kv_offload_append, the readers (HiP's estimator and sparse
// decode with their `offload` caches), kv_offload_update.
// kv_offload_update: for each cache of the layer and each KV head (one CTA), the lines recorded
// as missed this step are inserted into the least recently used slots: misses in ascending line
// order go to the slots in ascending (last_use, slot) order, a slot used this step is never
// evicted (the insertions stop there), the evicted lines' table entries go back to kLineAbsent,
// and the lines are copied from the host pools (zero-copy reads) into the banks; then the miss
// list is cleared. A step without misses costs a launch that returns at once. Up to
// kOffloadArgminMisses misses the victims are found by repeated block-wide minima, above by a
// bitonic sort of all slots; both give the same victims (exact LRU, ties by slot id), the CPU
// twin's (kv/offload_ref.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/runtime.h"
#include "kernels/params/kv_offload.h"
#include "kernels/params/kv_view.h"

namespace longctx::cuda {

// Misses per head up to which victims are found by repeated minima (one pass over the slots each).
inline constexpr int kOffloadArgminMisses = 8;

void kv_offload_begin_step(int32_t* tick, Stream s = nullptr);

// Write-through of a decode step's new token: after its K/V row went to the host pools (kv_scatter
// over the host view, at position seq_lens[0] - 1), copies it into this cache's bank wherever its
// line is resident (an inserted line may hold positions not written yet). k_new/v_new
// [n_kv_head, head_dim] of the view's type (v_new ignored for a keys-only cache), or both null:
// the row is read back from the host pools where the scatter wrote it (the fp8 cache, whose
// quantized row exists only there; 2 x n_kv_head x head_dim bytes over PCIe). One launch for both
// caches of the layer, after the scatter and before the step's reads.
void kv_offload_append(const KvOffloadLayer& l, const KvView& host, const void* k_new, const void* v_new,
                       Stream s = nullptr);

// Reads n (KV head, token) rows through the cache, as the consumers do (hits from the banks,
// misses zero-copy from host memory and recorded): k_out/v_out [n, head_dim] of the view's type
// (v_out only with a K/V cache; either may be null). A reader for cached rows outside attention,
// and the tests' handle on the read-through.
struct KvOffloadGatherParams {
  KvOffloadCache cache;
  KvView host;                    // device view of the layer's host pools
  const int32_t* heads = nullptr;  // device [n]
  const int32_t* tokens = nullptr; // device [n], < the view's capacity
  int n = 0;
  void* k_out = nullptr;
  void* v_out = nullptr;
};
void kv_offload_gather(const KvOffloadGatherParams& p, Stream s = nullptr);

// host: the layer's view whose pools hold the whole cache in mapped host memory (batch row 0).
// One launch for both caches of the layer (a disabled one is skipped).
void kv_offload_update(const KvOffloadLayer& l, const KvView& host, Stream s = nullptr);

}  // namespace longctx::cuda

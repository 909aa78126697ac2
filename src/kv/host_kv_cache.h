// host_kv_cache.h: the KV cache manager with its pool in host memory (the CPU engine, tests).
//
// What: KvCache's bookkeeping (kv_cache.h) plus a std::vector-backed pool of f32, bf16 or fp8
// e4m3 elements in kv_cache.h's layout, allocated once (kv_bytes_needed bytes, zeroed).
// write_rows stores fp32 rows, rounding them to the pool's type: bf16 round-to-nearest-even
// (util/half.h), fp8 e4m3(x * (1 / scale)) saturating (fp8_e4m3.h), the same arithmetic as the
// GPU's kv_scatter, so host and device pools hold the same bytes for the same bf16 inputs.
// view(layer) gives the host KvView of the current batch; kv_gather_f32 (kv_gather.h) reads
// rows back through any host view.
#pragma once
#include <cstddef>
#include <vector>

#include "kv/kv_cache.h"

namespace longctx::kv {

class HostKvCache : public KvCache {
 public:
  explicit HostKvCache(const KvSpec& spec);  // Error: bad spec, or std::bad_alloc past host memory

  // Host view of `layer` over the current batch (pointers stay valid for the cache's life).
  KvView view(int layer) const;
  // Pool of `layer`, [n_pages * page_size, n_kv_head, head_dim] of the pool's type, writable:
  // the CPU engine may compute K/V straight into a contiguous run (contiguous_base_row).
  void* k_pool(int layer);
  void* v_pool(int layer);

  // Stores tokens [t0, t0+n) of sequence s in `layer`: k, v fp32 [n, n_kv_head, head_dim]
  // (either may be null to leave that half alone). The tokens must be within the sequence's
  // length (append first); fp8 needs the layer's scales set.
  void write_rows(SeqId s, int layer, int64_t t0, int64_t n, const float* k, const float* v);

 private:
  std::byte* pool_at(int layer, int which) const;  // which: 0 = K, 1 = V
  std::vector<std::byte> pool_;
};

}  // namespace longctx::kv

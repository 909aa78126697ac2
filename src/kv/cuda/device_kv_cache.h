// device_kv_cache.h (kv/cuda): the KV cache manager with its pool in GPU memory.
//
// What: KvCache's bookkeeping (kv_cache.h) plus one cudaMalloc'd block: the pool (bf16 or fp8
// e4m3, kv_cache.h's layout) and device mirrors of the batch tables, int32
// block_table [max_batch, max_pages_per_seq] and seq_lens [max_batch], of FIXED capacity: their
// addresses never change, so a CUDA graph captured over view(l) stays valid while sync_tables
// rewrites their contents between replays.
// How: mutate on the host (append, set_batch, ...), then sync_tables(stream) uploads the block
// table entries that changed since the last sync (per batch row, a dirty range) and all of
// seq_lens, with cudaMemcpyAsync from the host tables. Call it outside stream capture, before
// the kernels that read the tables; do not mutate the cache again until the stream has passed
// those copies (cudaMemcpyAsync from pageable memory does not promise to have read its source
// when it returns) -- a decode loop's per-step stream sync (reading the sampled token) does it.
// Writing K/V: scatter() (kv_scatter.h) for the newest rows of batch sequences; reading back:
// kv_gather_bf16. Built only with CUDA (LONGCTX_CUDA); library longctx_kv_cuda.
#pragma once
#include <cstdint>

#include "kernels/cuda/runtime.h"
#include "kv/cuda/kv_scatter.h"
#include "kv/kv_cache.h"

namespace longctx::kv {

// New K/V rows for scatter(): bf16 [n_seq * n_new, n_kv_head, head_dim], sequence-major; the
// last n_new tokens of batch rows [first_row, first_row + n_seq) (kv_scatter.h).
struct KvNewRows {
  const void* k = nullptr;
  const void* v = nullptr;
  int first_row = 0;
  int n_seq = 0;
  int n_new = 1;
};

class DeviceKvCache : public KvCache {
 public:
  // Checks the fit in the device's free memory first (kv_fit_problem), then allocates; the spec
  // must be bf16 or fp8_e4m3 with n_kv_head * head_dim a multiple of 8. Tables start zeroed.
  explicit DeviceKvCache(const KvSpec& spec);
  ~DeviceKvCache() override;

  // Device view of `layer` over the current batch: the tables as of the last sync_tables.
  KvView view(int layer) const;
  void* k_pool(int layer) const;  // device [n_pages * page_size, n_kv_head, head_dim]
  void* v_pool(int layer) const;
  const int32_t* device_block_table() const { return d_table_; }  // [max_batch, max_pages_per_seq]
  const int32_t* device_seq_lens() const { return d_lens_; }      // [max_batch]

  // Uploads the batch tables' changes (see above).
  void sync_tables(cuda::Stream s);
  // Writes new rows into `layer` at the positions the DEVICE seq_lens give (kv_scatter); checks
  // on the host that each of those sequences holds at least n_new tokens.
  void scatter(int layer, const KvNewRows& rows, cuda::Stream s);

 private:
  char* block_ = nullptr;  // pool, then the block table, then seq_lens
  int32_t* d_table_ = nullptr;
  int32_t* d_lens_ = nullptr;
};

}  // namespace longctx::kv

// kv_scatter.h (kv/cuda): the GPU kernels that write new K/V rows into a paged pool and read
// rows back out of it, addressed through a device KvView's block tables.
//
// kv_scatter: new rows bf16 in, the pool's type out (bf16 copied; fp8 e4m3(x * (1/scale)),
// round to nearest even, saturating at +-448: gpu/kv_fp8.h's rule). It writes, for each of
// `n_seq` consecutive batch rows starting at `first_row`, that sequence's LAST `n_new` tokens:
// input row r belongs to batch row b = first_row + r / n_new at position
// seq_lens[b] - n_new + r % n_new. Positions come from the device seq_lens, so a CUDA graph that
// captured this launch writes the right rows on every replay (append + sync_tables between).
//   decode:  first_row 0, n_seq = batch size, n_new 1  (one new token per sequence)
//   prefill: first_row b, n_seq 1, n_new T             (T new tokens of one sequence)
// Rows whose position or page falls outside the tables / pool are skipped (never out of bounds).
// kv_gather_bf16: tokens [t0, t0+n) of one batch row out to contiguous bf16 (fp8 widened as
// bf16(e4m3 * scale): gpu/kv_fp8.h kv_dequantize), e.g. to stage a layer for a contiguous
// prefill kernel; positions at or past seq_lens[row] are left unwritten.
// Both need n_kv_head * head_dim to be a multiple of 8 (16-byte bf16 vectors).
// Tested in tests/kv/test_kv_gpu.cpp against HostKvCache::write_rows / kv_gather_f32.
#pragma once
#include <cstdint>

#include "kernels/cuda/runtime.h"
#include "kernels/params/kv_view.h"

namespace longctx::kv {

struct KvScatterParams {
  KvView view;               // device view of one layer (tables synced); elem bf16 or fp8_e4m3
  void* k_pool = nullptr;    // view.k_pool, writable
  void* v_pool = nullptr;    // view.v_pool, writable
  const void* k_new = nullptr;  // bf16 [n_seq * n_new, n_kv_head, head_dim], sequence-major
  const void* v_new = nullptr;  // same layout
  int first_row = 0;         // batch row of the first sequence written
  int n_seq = 0;             // consecutive batch rows written
  int n_new = 1;             // tokens per sequence: its last n_new positions
};
void kv_scatter(const KvScatterParams& p, cuda::Stream s);

struct KvGatherParams {
  KvView view;           // device view of one layer
  int row = 0;           // batch row
  int64_t t0 = 0, n = 0;  // tokens [t0, t0+n) of that sequence
  void* k_out = nullptr;  // bf16 [n, n_kv_head, head_dim]
  void* v_out = nullptr;  // same
};
void kv_gather_bf16(const KvGatherParams& p, cuda::Stream s);

}  // namespace longctx::kv

// compact_kv.h (cuda): the device half of a pre-RoPE step (methods/method.h KeyLayout::pre_rope):
// a key set gathered from the paged cache into contiguous K/V and re-numbered 0..L-1, and the
// rotated mean of a chunk's queries that TokenSelect selects with.
//
// What (CPU twins: methods/run_cpu.cpp attend_compacted_ref's gather + rope_apply_ref, and
// TokenSelectMethod::plan's selection query):
//   compact_kv:       k_out[j] = rope(k_pool[slot(keys[j])], position j), v_out[j] = v_pool[slot(keys[j])]
//                     (fp8 pools: the rows dequantized first, stored * k_scale / v_scale, as
//                     kv_gather's widening; the outputs stay bf16 for the dense attention)
//   selection_query:  out[h] = mean_i rope(q[i][h], position pos0 + i)  (fp32)
//   budget_key_ranges: keys[0, n_init) = 0.., keys[n_init + n_select, L) = n_kv - n_local..
//                      (the middle is what top_k_sorted writes, offset by n_init)
// RoPE is rotate-half (NeoX / HF) with the angle pos * inv_freq[i] in fp32 and accurate sincosf,
// cos and sin scaled by attn_factor (1 except YaRN / LongRoPE), as kernels/ref rope_apply_ref.
// Tested against those twins by tests/cuda/test_compact_kv.cpp; timed in bench/bench_tokenselect.cu.
//
// Tensors (bf16 unless noted; device pointers):
//   k_pool, v_pool [pool_rows, n_kv_head, head_dim]   K un-rotated (bf16, or e4m3 with fp8: the
//                                                     fp8 cache's rows, real = stored * scale)
//   slots  int32   [max position + 1]                 position -> pool row (a page-size-1 table)
//   keys   int32   [n_keys]                           positions
//   k_out, v_out   [n_keys, n_kv_head, head_dim]
//   q              [n_rows, n_head, head_dim]         un-rotated queries
//   inv_freq fp32  [head_dim / 2]
// head_dim: even, <= 256.
#pragma once
#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace longctx::cuda {

struct CompactKvParams {
  const void* k_pool = nullptr;
  const void* v_pool = nullptr;
  const int32_t* slots = nullptr;
  const int32_t* keys = nullptr;
  int64_t n_keys = 0;
  void* k_out = nullptr;
  void* v_out = nullptr;
  const float* inv_freq = nullptr;
  float attn_factor = 1.f;
  int n_kv_head = 0;
  int head_dim = 0;
  bool fp8 = false;     // k_pool / v_pool are e4m3 (the fp8 KV cache)
  float k_scale = 1.f;  // fp8: real K = stored * k_scale
  float v_scale = 1.f;  // fp8: real V = stored * v_scale
};
void compact_kv(const CompactKvParams& p, Stream s = nullptr);

struct SelectionQueryParams {
  const void* q = nullptr;
  int64_t n_rows = 0;
  int64_t pos0 = 0;  // row i is rotated at pos0 + i
  const float* inv_freq = nullptr;
  float attn_factor = 1.f;
  int n_head = 0;
  int head_dim = 0;
  float* out = nullptr;  // fp32 [n_head, head_dim]
};
void selection_query(const SelectionQueryParams& p, Stream s = nullptr);

struct BudgetKeyRanges {
  int32_t* keys = nullptr;  // int32 [n_init + n_select + n_local]
  int64_t n_init = 0, n_select = 0, n_local = 0;
  int64_t n_kv = 0;         // keys cached; the local range ends at n_kv
  const int32_t* n_kv_dev = nullptr;  // device int32 [1] or nullptr: n_kv read on the device (graph replay)
};
void budget_key_ranges(const BudgetKeyRanges& p, Stream s = nullptr);

}  // namespace longctx::cuda

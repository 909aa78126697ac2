// attention.h (cuda): dense attention on the GPU, bf16 in/out, fp32 accumulation, with LSE.
//
// Plain C++ (no CUDA types): device pointers are void*, shapes sit next to each pointer.
// Semantics match kernels/params/attention.h (the CPU reference) except the dtype:
//   q   bf16 [n_q,  n_head,    head_dim]   token-major, contiguous
//   k,v bf16 [n_kv, n_kv_head, head_dim]   key j has absolute position j
//   o   bf16 [n_q,  n_head,    head_dim]
//   lse fp32 [n_head, n_q]  (optional)     natural-log log-sum-exp of the scaled scores
// Query i sits at position q_pos0 + i; with causal it sees keys 0..q_pos0+i (chunked prefill
// against a KV prefix is q_pos0 > 0). GQA: query head h reads KV head h / (n_head / n_kv_head).
// Sliding window (window > 0, causal only: Gemma 3's local layers): the query at position p sees
// keys (p - window, p], and the kernels visit only those keys' tiles, so a window layer costs its
// window, not the context. head_dim 64, 128 or 256 (and 16 or 32, the tiny test models). All
// pointers 16-byte aligned.
//
// Decode (flash-decoding): one query per sequence against all n_kv keys, KV split across CTAs,
// partial (O, LSE) pairs merged exactly by merge_attention_states. The caller owns the
// workspace (decode_workspace_bytes) so decode steps never allocate.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace longctx::cuda {

enum class PrefillImpl : int { automatic = 0, fa2_mma_sync = 1, sm90_wgmma = 2 };

struct PrefillParams {
  const void* q = nullptr;  // bf16 [n_q, n_head, head_dim]
  const void* k = nullptr;  // bf16 [n_kv, n_kv_head, head_dim]
  const void* v = nullptr;  // bf16 [n_kv, n_kv_head, head_dim]
  void* o = nullptr;        // bf16 [n_q, n_head, head_dim]
  float* lse = nullptr;     // fp32 [n_head, n_q], optional
  int64_t n_q = 0;
  int64_t n_kv = 0;
  int n_head = 0;
  int n_kv_head = 0;
  int head_dim = 0;
  int64_t q_pos0 = 0;
  float scale = 0.f;  // 0 = 1/sqrt(head_dim)
  bool causal = true;
  int64_t window = 0;  // > 0: sliding window (see above); needs causal
  PrefillImpl impl = PrefillImpl::automatic;
  // Paged KV (optional): k and v are pools [kv_pool_rows, n_kv_head, head_dim]; key j is pool
  // row page_table[j / page_size] * page_size + j % page_size. page_size: a multiple of 64
  // (the Hopper kernel needs a multiple of 128; other sizes take the FA2 kernel).
  const int32_t* page_table = nullptr;  // device int32 [ceil(n_kv / page_size)]
  int page_size = 0;
  int64_t kv_pool_rows = 0;
};

// Picks the Hopper kernel (wgmma + TMA, warp-specialised, FlashAttention-3 style) for
// head_dim 128 without a window on sm_90, else the FlashAttention-2 style kernel (mma.sync m16n8k16, ldmatrix,
// cp.async double buffering). impl forces one (tests and benchmarks compare both).
void attention_prefill(const PrefillParams& p, Stream s = nullptr);

enum class KvDtype : int { bf16 = 0, fp8_e4m3 = 1 };

struct DecodeParams {
  const void* q = nullptr;  // bf16 [n_seq, n_head, head_dim]
  const void* k = nullptr;  // kv_dtype; sequence b at k + b*kv_seq_stride: [n_kv, n_kv_head, head_dim]
  const void* v = nullptr;  // kv_dtype, same layout as k
  // fp8 KV: K and V stored as e4m3 with one scale each (real value = stored * scale); halves
  // the bytes a decode step streams. The math runs in fp16/fp32 (e4m3 -> fp16 is exact).
  KvDtype kv_dtype = KvDtype::bf16;
  float k_scale = 1.f, v_scale = 1.f;
  void* o = nullptr;        // bf16 [n_seq, n_head, head_dim]
  float* lse = nullptr;     // fp32 [n_seq, n_head], optional
  int n_seq = 1;
  int64_t n_kv = 0;           // keys per sequence (all attended: the query is the last position);
                              // with kv_lens: the longest sequence (sizes the split plan)
  int64_t kv_seq_stride = 0;  // contiguous layout: elements (not bytes) between sequences' K (and V);
                              // 0 = n_kv*n_kv_head*head_dim
  const int32_t* kv_lens = nullptr;  // device int32 [n_seq], optional: per-sequence key counts
                                     // (each in 0..n_kv; 0: that row's O = 0, LSE = -inf)
  // Paged KV (optional): k and v are pools [n_pages * page_size, n_kv_head, head_dim]; key j of
  // sequence b is pool row page_table[b * max_pages_per_seq + j / page_size] * page_size
  // + j % page_size. page_size must be a multiple of 64.
  const int32_t* page_table = nullptr;  // device int32 [n_seq, max_pages_per_seq]
  int page_size = 0;
  int max_pages_per_seq = 0;
  int n_head = 0;
  int n_kv_head = 0;  // n_head / n_kv_head <= 16 (one mma row tile holds a GQA group)
  int head_dim = 0;  // 16, 32, 64, 128 or 256 (fp8 KV: 64, 128 or 256)
  float scale = 0.f;  // 0 = 1/sqrt(head_dim)
  int64_t window = 0;  // > 0: sequence b's query (its last position) sees only its last `window` keys
  int n_splits = 0;   // 0 = choose from the SM count; otherwise a cap
  void* workspace = nullptr;  // device memory of decode_workspace_bytes(...)
  size_t workspace_bytes = 0;
};

// Upper bound of the workspace that attention_decode needs for this shape (any n_splits); a
// workspace sized for the largest n_kv serves every smaller one.
size_t decode_workspace_bytes(int n_seq, int n_head, int head_dim, int64_t n_kv);
// Zeroes the workspace; call once after allocating it. It holds self-resetting counters (the
// last split to finish merges), so it must not be shared by decodes running concurrently.
void decode_workspace_init(void* workspace, size_t workspace_bytes, Stream s = nullptr);
// The number of KV splits attention_decode will use for this shape on this device.
int decode_num_splits(const DecodeParams& p);
void attention_decode(const DecodeParams& p, Stream s = nullptr);

// Exact merge of partial attention results over disjoint key sets:
//   lse = log(sum_p exp(lse_p)),  o = sum_p exp(lse_p - lse) * o_p.
// Parts whose lse is -inf (no keys) contribute nothing; a row with no keys at all gets o = 0,
// lse = -inf.
struct MergeParams {
  const float* o_part = nullptr;    // fp32 row r, part j at o_part + r*o_row_stride + j*o_part_stride
  const float* lse_part = nullptr;  // fp32 at lse_part + r*lse_row_stride + j*lse_part_stride
  int64_t o_row_stride = 0, o_part_stride = 0;
  int64_t lse_row_stride = 0, lse_part_stride = 0;
  void* o = nullptr;     // bf16 [n_rows, head_dim]
  float* lse = nullptr;  // fp32 [n_rows], optional
  int64_t n_rows = 0;
  int n_parts = 0;
  int head_dim = 0;  // multiple of 4, <= 256
};
void merge_attention_states(const MergeParams& p, Stream s = nullptr);

}  // namespace longctx::cuda

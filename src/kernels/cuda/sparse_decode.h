// sparse_decode.h (cuda): decode attention over a chosen subset of each sequence's cached keys.
//
// What: for each sequence s and query head h, O = softmax(scale * q K_S^T) V_S and its LSE, where
// S is the set of keys the decode index gives h's row (kernels/params/decode_index.h: ranges plus
// columns, clipped to the sequence's length), read through the paged KV view
// (kernels/params/kv_view.h: any page_size >= 1, bf16 or fp8 e4m3 pools with per-layer scales).
// An empty row gives O = 0, LSE = -inf. CPU twin: kernels/ref/sparse_decode.h. Tested by
// tests/cuda/test_sparse_decode.cpp, timed by bench/bench_sparse_decode.cu.
//   q   bf16 [n_seq, n_head, head_dim]      one query token per sequence
//   o   bf16 [n_seq, n_head, head_dim]
//   lse fp32 [n_seq, n_head] (optional)    natural-log log-sum-exp of the scaled scores
// head_dim 64, 128 or 256 (kv.head_dim); n_head / kv.n_kv_head <= 16.
//
// How (flash-decoding over a gathered key list, no host syncs, so one step can be captured in a
// CUDA graph and replayed while the index contents and kv.seq_lens change):
//   1. plan (one CTA per index row): normalise the row (union of ranges, columns outside them,
//      deduplicated, clipped to the length, or to window/shift's bounds) into disjoint segments with their key offsets; the row's key count.
//   2. expand: every attended key's pool row (block table applied), in a per-row list.
//   3. split kernel (decode_split.cuh, shared with dense decode): each row's keys are cut into
//      n_splits parts of whole 64-key tiles processed by different CTAs; a CTA holds the query
//      heads that share one KV head and one index row (the GQA group when the index is per KV
//      head or shared), and the last CTA of each row merges the parts exactly by log-sum-exp.
// The number of splits is fixed on the host from max_keys_per_row (a bound, not the real
// counts), and each row spreads its real keys over them on the device.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/runtime.h"
#include "kernels/params/decode_index.h"
#include "kernels/params/kv_offload.h"
#include "kernels/params/kv_view.h"

namespace longctx::cuda {

struct SparseDecodeParams {
  const void* q = nullptr;  // bf16 [n_seq, n_head, head_dim]
  void* o = nullptr;        // bf16 [n_seq, n_head, head_dim]
  float* lse = nullptr;     // fp32 [n_seq, n_head], optional
  int n_head = 0;
  KvView kv;                // device view; kv.n_seq sequences, elem bf16 or fp8_e4m3
  DecodeIndex index;        // device arrays; index.n_seq == kv.n_seq
  float scale = 0.f;        // 0 = 1/sqrt(head_dim)
  // Self-Extend's two parts (methods/self_extend/hip_self_extend_gpu.h), applied in the plan only
  // (the attention kernels are unchanged): a sequence of length len attends only its index's keys
  // in [len - shift - window, len - shift): shift > 0 moves the query back (far part: keys <=
  // q - W), window > 0 keeps the last window keys before that bound (near part: keys > q - W);
  // 0 and 0 = keys [0, len).
  int64_t window = 0;
  int64_t shift = 0;
  // Most keys any row attends after clipping (sizes the workspace and the split count); 0 =
  // kv.max_pages_per_seq * kv.page_size, which always suffices. A row attending more keys than
  // this is cut to its first max_keys_per_row keys in the normalised order (ranges, then columns).
  int64_t max_keys_per_row = 0;
  // Splits of the longest row: 0 = automatic (about one wave of CTAs, at least 4 tiles of 64 keys
  // per split); otherwise this many at most. Every row spreads its keys evenly over them.
  int n_splits = 0;
  void* workspace = nullptr;  // device memory of sparse_decode_workspace_bytes(...)
  size_t workspace_bytes = 0;
  // KV offload (kernels/params/kv_offload.h), optional: kv's pools are in mapped host memory and
  // K/V are read through this cache (bank_v required; hits from the banks, misses zero-copy from
  // host memory, recorded for kv_offload_update). One sequence; each index row within one KV
  // head. The output is bit-identical to the same call without it.
  KvOffloadCache offload;
};

// What the workspace size depends on; fixed for the life of a decode loop.
struct SparseDecodeBounds {
  int n_seq = 0;
  int n_head = 0;
  int n_index_head = 0;
  int head_dim = 0;
  int64_t max_keys_per_row = 0;  // as in SparseDecodeParams (after resolving 0)
  int64_t range_capacity = 0;    // the index's capacities
  int64_t col_capacity = 0;
};
SparseDecodeBounds sparse_decode_bounds(const SparseDecodeParams& p);
// Upper bound of the workspace sparse_decode needs for these bounds (any split count).
size_t sparse_decode_workspace_bytes(const SparseDecodeBounds& b);
// Zeroes the workspace; call once after allocating it (it holds self-resetting merge counters, so
// it must not be shared by decodes running concurrently).
void sparse_decode_workspace_init(void* workspace, size_t workspace_bytes, Stream s = nullptr);
// Splits per row sparse_decode will use on this device.
int sparse_decode_num_splits(const SparseDecodeParams& p);
void sparse_decode(const SparseDecodeParams& p, Stream s = nullptr);

// A reusable selection piece: the sinks + window index of A-shape / StreamingLLM decode, built on
// the device from the sequences' lengths (graph-safe: replays follow seq_lens as it changes).
// One shared index head (n_index_head = 1); sequence s attends [0, sinks) and
// [len - window, len) (clipped; overlapping when len < sinks + window, which the format allows).
struct SinkWindowIndexParams {
  const int32_t* seq_lens = nullptr;  // device int32 [n_seq]
  int n_seq = 0;
  int sinks = 0;   // >= 0
  int window = 0;  // >= 0
  int32_t* range_ptr = nullptr;  // device int32 [n_seq + 1]
  int32_t* ranges = nullptr;     // device int32 [2 * n_seq][2]
  int32_t* col_ptr = nullptr;    // device int32 [n_seq + 1] (all zero: no columns)
};
void build_sink_window_index(const SinkWindowIndexParams& p, Stream s = nullptr);
// The DecodeIndex over the arrays build_sink_window_index fills.
DecodeIndex sink_window_index_view(const SinkWindowIndexParams& p);

}  // namespace longctx::cuda

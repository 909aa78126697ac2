// paged_decode.h (bench): the paged KV cache the decode benchmarks build around a method's step,
// set up once: a shuffled block table (a long-running pool's pages are not contiguous, so neither
// kernel gets sequential pages for free), the page-size-1 slot table of the same pool, int32
// arrays on the device, and the baseline every one of them times: dense cuda::attention_decode
// over the same KvView, with its workspace (and a sparse_decode workspace sized the same way).
// Header-only; callers free what they get with dev_free (d.workspace, sp.workspace, uploads).
//   const std::vector<int32_t> pages = bench::shuffled_pages(max_pages);
//   const KvView kv{.k_pool = k, ..., .block_table = bench::upload_i32(pages), ...};
//   const DecodeParams d = bench::dense_decode_over(kv, q, o, n_head, len);
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/sparse_decode.h"
#include "kernels/params/kv_view.h"

namespace longctx::bench {

// The block table's shuffle seed: every decode bench draws the same page order for a length.
constexpr uint64_t kPageShuffleSeed = 7;

// Pages 0 .. n_pages-1 in a random order (fixed seed): host block table [n_pages].
inline std::vector<int32_t> shuffled_pages(int64_t n_pages, uint64_t seed = kPageShuffleSeed) {
  std::vector<int32_t> pages(static_cast<size_t>(n_pages));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), std::mt19937_64(seed));
  return pages;
}

// The same pool seen with page size 1: slot[j] = pool row of position j (j < n), through pages
// of page_size rows. Host [n].
inline std::vector<int32_t> page_slots(const std::vector<int32_t>& pages, int page_size, int64_t n) {
  std::vector<int32_t> slots(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) slots[size_t(j)] = pages[size_t(j / page_size)] * page_size + int32_t(j % page_size);
  return slots;
}

// A device copy of h (at least 4 bytes allocated, so an empty h still gives a pointer).
inline int32_t* upload_i32(const std::vector<int32_t>& h) {
  auto* d = static_cast<int32_t*>(cuda::dev_malloc(std::max<size_t>(h.size() * 4, 4)));
  cuda::copy_h2d(d, h.data(), h.size() * 4);
  return d;
}

// Dense attention_decode over every key of the paged cache kv (bf16 or e4m3 pools, its block
// table, seq_lens and scales): q, o bf16 [kv.n_seq, n_head, kv.head_dim]; n_kv: the longest
// sequence (sizes the split plan). The workspace is allocated and zeroed here; the caller frees
// d.workspace.
inline cuda::DecodeParams dense_decode_over(const KvView& kv, const void* q, void* o, int n_head, int64_t n_kv) {
  const size_t ws_bytes = cuda::decode_workspace_bytes(kv.n_seq, n_head, kv.head_dim, n_kv);
  void* ws = cuda::dev_malloc(ws_bytes);
  cuda::decode_workspace_init(ws, ws_bytes);
  return {.q = q, .k = kv.k_pool, .v = kv.v_pool,
          .kv_dtype = kv.elem == KvElem::fp8_e4m3 ? cuda::KvDtype::fp8_e4m3 : cuda::KvDtype::bf16,
          .k_scale = kv.k_scale, .v_scale = kv.v_scale, .o = o, .n_seq = kv.n_seq, .n_kv = n_kv,
          .kv_lens = kv.seq_lens, .page_table = kv.block_table, .page_size = kv.page_size,
          .max_pages_per_seq = kv.max_pages_per_seq, .n_head = n_head, .n_kv_head = kv.n_kv_head,
          .head_dim = kv.head_dim, .workspace = ws, .workspace_bytes = ws_bytes};
}

// Allocates and zeroes sp's workspace for its bounds (kv, index, max_keys_per_row, n_splits as
// set); the caller frees sp.workspace.
inline void alloc_sparse_decode_workspace(cuda::SparseDecodeParams& sp) {
  sp.workspace_bytes = cuda::sparse_decode_workspace_bytes(cuda::sparse_decode_bounds(sp));
  sp.workspace = cuda::dev_malloc(sp.workspace_bytes);
  cuda::sparse_decode_workspace_init(sp.workspace, sp.workspace_bytes);
}

}  // namespace longctx::bench

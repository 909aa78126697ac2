// kv_spec.h: the shape of a paged KV cache and every size derived from it, computed (and checked
// for overflow) before anything is allocated.
//
// What: KvSpec names the model geometry (layers, KV heads, head size), the page size, the element
// type, the pool's page count and the capacity of the batch tables (sequences per view, tokens
// per sequence). kv_sizes() validates it and derives the byte sizes; kv_bytes_needed() is what
// the pool plus its tables will take (device memory for DeviceKvCache, host memory for
// HostKvCache), so a memory plan can check the fit first (kv_fit_problem: needed vs free, the
// style of gpu/memory_plan.h) and fail with a message instead of running out of memory midway.
// Layout the sizes describe (kv_cache.h): one block holding, for each layer l, its K pool at
// (2l) * layer_pool_bytes and its V pool at (2l+1) * layer_pool_bytes, each pool
// [n_pages * page_size, n_kv_head, head_dim] of `elem` (KvView's layout), each starting on a
// kKvAlign boundary (cudaMalloc's alignment, so 16-byte vector loads stay aligned).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/params/kv_view.h"

namespace longctx::kv {

inline constexpr int64_t kKvAlign = 256;  // bytes; every layer's pool starts on this boundary
// Page ids are int32 in the block tables (the kernels' format), so a pool holds at most this many.
inline constexpr int64_t kMaxPages = INT32_MAX;

struct KvSpec {
  int n_layer = 0;
  int n_kv_head = 0;
  int head_dim = 0;
  int page_size = 0;            // tokens per page, >= 1 (1: token slots, TokenSelect)
  KvElem elem = KvElem::bf16;   // f32 (CPU engine), bf16, fp8_e4m3 (one K and one V scale per layer)
  int64_t n_pages = 0;          // pages in the pool; a page holds page_size tokens of every layer, K and V
  int max_batch = 1;            // rows of the batch tables: sequences one view covers
  int64_t max_seq_tokens = 0;   // longest sequence; sets the tables' row stride (max_pages_per_seq)
};

// Sizes derived from a valid spec (all in bytes unless named otherwise).
struct KvSizes {
  int64_t row_elems = 0;         // n_kv_head * head_dim: one token of one layer, K or V
  int64_t row_bytes = 0;         // row_elems * element bytes
  int64_t page_bytes = 0;        // page_size * row_bytes (one layer, K or V)
  int64_t pool_tokens = 0;       // n_pages * page_size
  int64_t layer_pool_bytes = 0;  // one layer's K (or V) pool, rounded up to kKvAlign
  int64_t pool_bytes = 0;        // 2 * n_layer * layer_pool_bytes
  int max_pages_per_seq = 0;     // ceil(max_seq_tokens / page_size): the tables' row stride
  int64_t table_bytes = 0;       // int32 block table [max_batch, max_pages_per_seq] + seq_lens [max_batch]
  int64_t lens_offset = 0;       // seq_lens' offset from the block table's start (kKvAlign-aligned)
  int64_t total_bytes = 0;       // pool_bytes + table_bytes, each part aligned
};

// Validates the spec and derives its sizes; throws Error naming the bad field (zero page size,
// non-positive dimensions, more than kMaxPages pages, sizes that overflow 64 bits).
KvSizes kv_sizes(const KvSpec& s);
// kv_sizes(s).total_bytes: what the pool and its tables take.
int64_t kv_bytes_needed(const KvSpec& s);
// Pages that hold `tokens` tokens: ceil(tokens / page_size) (tokens >= 0, page_size >= 1).
int64_t pages_for_tokens(int64_t tokens, int page_size);
// "" when the cache of spec `s` fits in `free_bytes` of `where` (e.g. "NVIDIA H100" or "host
// memory"); else a message saying what is needed, what is free and how many pages would fit.
std::string kv_fit_problem(const KvSpec& s, int64_t free_bytes, const std::string& where);
const char* kv_elem_name(KvElem e);  // "f32" | "bf16" | "fp8_e4m3"

}  // namespace longctx::kv

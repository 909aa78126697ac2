// kv_view.h: the paged KV cache of one layer as every attention kernel sees it (CPU and GPU).
//
// What: plain data, no CUDA types, no ownership. The KV cache manager (src/kv) owns the pages and
// block tables and hands out one KvView per layer; kernels only read through it.
// Layout:
//   k_pool, v_pool  [n_pages * page_size, n_kv_head, head_dim] of `dtype` (token-major pages)
//   block_table     int32 [n_seq, max_pages_per_seq]: page p of sequence s holds that
//                   sequence's tokens [p*page_size, (p+1)*page_size)
//   seq_lens        int32 [n_seq]: tokens cached per sequence (each <= max_pages_per_seq*page_size)
// Token t of sequence s (its absolute position t, t < seq_lens[s]) is pool row
//   block_table[s * max_pages_per_seq + t / page_size] * page_size + t % page_size.
// page_size >= 1: 1 gives token slots (TokenSelect's selections are slot lists), larger pages
// make contiguous runs for block methods. Keys are stored after RoPE at their absolute position
// (docs/architecture.md, "Positions").
// fp8 (e4m3): real value = stored * k_scale (K) or * v_scale (V), one scale per layer.
// Pointers are host memory for the CPU kernels and device memory for the CUDA kernels; the
// view says which in `on_device`, so a kernel can refuse the wrong one.
#pragma once
#include <cstdint>

namespace longctx {

enum class KvElem : int { f32 = 0, bf16 = 1, fp8_e4m3 = 2 };

inline constexpr int kv_elem_bytes(KvElem e) { return e == KvElem::f32 ? 4 : e == KvElem::bf16 ? 2 : 1; }

struct KvView {
  const void* k_pool = nullptr;  // [n_pages * page_size, n_kv_head, head_dim]
  const void* v_pool = nullptr;  // same layout as k_pool
  KvElem elem = KvElem::f32;
  float k_scale = 1.f, v_scale = 1.f;  // fp8 only
  const int32_t* block_table = nullptr;  // [n_seq, max_pages_per_seq]
  const int32_t* seq_lens = nullptr;     // [n_seq]
  int n_seq = 0;
  int max_pages_per_seq = 0;
  int page_size = 0;
  int64_t n_pages = 0;  // pages in the pool (bounds checks)
  int n_kv_head = 0;
  int head_dim = 0;
  bool on_device = false;

  // Pool row of token t of sequence s (host-side tables only; kernels compute it inline).
  int64_t row(int s, int64_t t) const {
    return int64_t(block_table[int64_t(s) * max_pages_per_seq + t / page_size]) * page_size + t % page_size;
  }
  int64_t row_elems() const { return int64_t(n_kv_head) * head_dim; }
};

}  // namespace longctx

// kv_spec.cpp: see kv_spec.h.
#include "kv/kv_spec.h"

#include <fmt/format.h>

#include "util/error.h"

namespace longctx::kv {

namespace {

// a * b, or Error naming `what` when it does not fit in int64.
int64_t mul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) fail("KV cache spec: {} overflows 64 bits ({} x {})", what, a, b);
  return r;
}

int64_t add(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) fail("KV cache spec: {} overflows 64 bits ({} + {})", what, a, b);
  return r;
}

int64_t align_up(int64_t n, const char* what) { return mul((add(n, kKvAlign - 1, what)) / kKvAlign, kKvAlign, what); }

std::string gib(int64_t bytes) { return fmt::format("{:.2f} GiB", double(bytes) / double(int64_t(1) << 30)); }

}  // namespace

const char* kv_elem_name(KvElem e) {
  switch (e) {
    case KvElem::f32: return "f32";
    case KvElem::bf16: return "bf16";
    case KvElem::fp8_e4m3: return "fp8_e4m3";
  }
  return "?";
}

int64_t pages_for_tokens(int64_t tokens, int page_size) {
  if (tokens < 0 || page_size < 1) fail("pages_for_tokens: {} tokens with page size {}", tokens, page_size);
  return tokens / page_size + (tokens % page_size != 0);
}

KvSizes kv_sizes(const KvSpec& s) {
  if (s.page_size < 1) fail("KV cache spec: page size {} (must be at least 1 token)", s.page_size);
  if (s.n_layer < 1 || s.n_kv_head < 1 || s.head_dim < 1)
    fail("KV cache spec: {} layers, {} KV heads, head size {} (each must be at least 1)", s.n_layer, s.n_kv_head,
         s.head_dim);
  if (s.elem != KvElem::f32 && s.elem != KvElem::bf16 && s.elem != KvElem::fp8_e4m3)
    fail("KV cache spec: unknown element type {}", int(s.elem));
  if (s.n_pages < 1 || s.n_pages > kMaxPages)
    fail("KV cache spec: {} pages (must be 1..{}: page ids are int32)", s.n_pages, kMaxPages);
  if (s.max_batch < 1) fail("KV cache spec: max_batch {} (must be at least 1)", s.max_batch);
  if (s.max_seq_tokens < 1) fail("KV cache spec: max_seq_tokens {} (must be at least 1)", s.max_seq_tokens);
  KvSizes z;
  z.row_elems = mul(s.n_kv_head, s.head_dim, "a token's row (n_kv_head x head_dim)");
  z.row_bytes = mul(z.row_elems, kv_elem_bytes(s.elem), "a token's row in bytes");
  z.page_bytes = mul(z.row_bytes, s.page_size, "a page in bytes");
  z.pool_tokens = mul(s.n_pages, s.page_size, "the pool's tokens (n_pages x page_size)");
  z.layer_pool_bytes = align_up(mul(s.n_pages, z.page_bytes, "one layer's pool in bytes"), "one layer's pool");
  z.pool_bytes = mul(mul(2, s.n_layer, "layers"), z.layer_pool_bytes, "the pool in bytes (2 x n_layer x layer pool)");
  const int64_t mpps = pages_for_tokens(s.max_seq_tokens, s.page_size);
  if (mpps * s.page_size > INT32_MAX)
    fail("KV cache spec: sequences of up to {} tokens (max_seq_tokens {} in pages of {}) exceed int32 "
         "(seq_lens are int32)",
         mpps * s.page_size, s.max_seq_tokens, s.page_size);
  z.max_pages_per_seq = int(mpps);
  const int64_t table = mul(mul(s.max_batch, mpps, "the block table's entries"), 4, "the block table in bytes");
  z.lens_offset = align_up(table, "the block table");
  z.table_bytes = add(z.lens_offset, align_up(int64_t(s.max_batch) * 4, "seq_lens"), "the tables in bytes");
  z.total_bytes = add(z.pool_bytes, z.table_bytes, "the cache in bytes");
  return z;
}

int64_t kv_bytes_needed(const KvSpec& s) { return kv_sizes(s).total_bytes; }

std::string kv_fit_problem(const KvSpec& s, int64_t free_bytes, const std::string& where) {
  const KvSizes z = kv_sizes(s);
  if (z.total_bytes <= free_bytes) return "";
  const int64_t per_page = 2 * int64_t(s.n_layer) * z.page_bytes;
  const int64_t room = free_bytes - z.table_bytes;
  const int64_t fit = room > 0 ? room / per_page : 0;
  return fmt::format(
      "the KV cache of {} pages x {} tokens ({} tokens: {} layers x K,V x {} heads x {} x {}) needs {} but {} has {} "
      "free; about {} pages ({} tokens) would fit",
      s.n_pages, s.page_size, z.pool_tokens, s.n_layer, s.n_kv_head, s.head_dim, kv_elem_name(s.elem),
      gib(z.total_bytes), where, gib(free_bytes), fit, fit * s.page_size);
}

}  // namespace longctx::kv

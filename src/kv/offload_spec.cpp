// offload_spec.cpp: see offload_spec.h.
#include "kv/offload_spec.h"

#include <fmt/format.h>

#include <climits>
#include <fstream>
#include <string>
#include <tuple>

#include "kernels/params/kv_offload.h"
#include "kv/kv_spec.h"
#include "util/error.h"

namespace longctx::kv {

namespace {

int64_t mul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) fail("KV offload spec: {} overflows 64 bits ({} x {})", what, a, b);
  return r;
}

int64_t aligned(int64_t n) { return (n + kKvAlign - 1) / kKvAlign * kKvAlign; }

std::string gib(int64_t bytes) { return fmt::format("{:.2f} GiB", double(bytes) / double(int64_t(1) << 30)); }

OffloadCacheSizes cache_sizes(const OffloadSpec& s, int64_t row_bytes, int32_t n_lines, int32_t slots, int32_t buckets,
                              int banks) {
  OffloadCacheSizes c;
  if (slots == 0) return c;
  c.bank = aligned(mul(mul(slots, s.line_tokens, "cache rows"), row_bytes, "a cache bank in bytes"));
  c.table = buckets > 0 ? aligned(mul(mul(s.n_kv_head, buckets, "hash buckets"), 8, "a page table in bytes"))
                        : aligned(mul(mul(s.n_kv_head, n_lines, "page table entries"), 4, "a page table in bytes"));
  c.slot_meta = aligned(int64_t(s.n_kv_head) * slots * 4);
  c.miss_count = aligned(int64_t(s.n_kv_head) * 4 * (buckets > 0 ? 2 : 1));
  c.stats = aligned(kOffloadStats * 8);
  c.total = banks * c.bank + c.table + 3 * c.slot_meta + c.miss_count + c.stats;
  return c;
}

}  // namespace

const char* page_table_name(PageTable t) { return t == PageTable::hash ? "hash" : "vector"; }

OffloadSizes offload_sizes(const OffloadSpec& s) {
  if (s.n_layer < 1 || s.n_kv_head < 1 || s.head_dim < 1)
    fail("KV offload spec: {} layers, {} KV heads, head size {} (each must be at least 1)", s.n_layer, s.n_kv_head,
         s.head_dim);
  if (s.elem != KvElem::bf16 && s.elem != KvElem::fp8_e4m3)
    fail("KV offload spec: element type {} (the host tier holds bf16 or fp8_e4m3)", kv_elem_name(s.elem));
  if (int64_t(s.head_dim) * kv_elem_bytes(s.elem) % 16 != 0)
    fail("KV offload spec: head size {} of {} is not a multiple of 16 bytes (the kernels copy 16-byte chunks)",
         s.head_dim, kv_elem_name(s.elem));
  if (s.capacity < 1 || s.capacity > INT32_MAX)
    fail("KV offload spec: capacity {} tokens (must be 1..{}: positions are int32)", s.capacity, INT32_MAX);
  if (s.line_tokens < 1) fail("KV offload spec: line of {} tokens (must be at least 1)", s.line_tokens);
  if (s.keys_slots < 0 || s.kv_slots < 0 || s.keys_slots > kMaxOffloadSlots || s.kv_slots > kMaxOffloadSlots)
    fail("KV offload spec: {} keys-cache and {} K/V-cache slots per head (each 0..{}: the update sorts a head's slots "
         "in shared memory)",
         s.keys_slots, s.kv_slots, kMaxOffloadSlots);
  if (s.keys_admit_steps < 1 || s.keys_admit_steps > 2 || s.kv_admit_steps < 1 || s.kv_admit_steps > 2)
    fail("KV offload spec: admission after {} (keys) and {} (K/V) steps (each 1 or 2)", s.keys_admit_steps,
         s.kv_admit_steps);
  for (const auto& [buckets, slots, what] : {std::tuple{s.keys_buckets, s.keys_slots, "keys"},
                                            std::tuple{s.kv_buckets, s.kv_slots, "K/V"}})
    if (buckets != 0 && (buckets < 0 || buckets > (1 << 30) || (buckets & (buckets - 1)) != 0 ||
                         int64_t(buckets) < int64_t(kBucketsPerSlot) * slots))
      fail("KV offload spec: a {} cache hash map of {} buckets for {} slots (a power of two, at least {} x slots, at "
           "most 2^30; 0: the vector map)",
           what, buckets, slots, kBucketsPerSlot);
  OffloadSizes z;
  z.row_bytes = int64_t(s.n_kv_head) * s.head_dim * kv_elem_bytes(s.elem);
  z.host_pool_bytes = aligned(mul(s.capacity, z.row_bytes, "a layer's host pool in bytes"));
  z.host_bytes = mul(mul(2, s.n_layer, "layers"), z.host_pool_bytes, "the host tier in bytes");
  z.n_lines = int32_t((s.capacity + s.line_tokens - 1) / s.line_tokens);
  z.keys = cache_sizes(s, z.row_bytes, z.n_lines, s.keys_slots, s.keys_buckets, 1);
  z.kv = cache_sizes(s, z.row_bytes, z.n_lines, s.kv_slots, s.kv_buckets, 2);
  z.gpu_layer_bytes = z.keys.total + z.kv.total;
  z.gpu_bytes = mul(s.n_layer, z.gpu_layer_bytes, "the GPU caches in bytes") + 2 * kKvAlign;
  return z;
}

std::string offload_fit_problem(const OffloadSpec& s, int64_t host_free, int64_t gpu_free, const std::string& gpu_name) {
  const OffloadSizes z = offload_sizes(s);
  const bool host_ok = z.host_bytes <= host_free, gpu_ok = z.gpu_bytes <= gpu_free;
  if (host_ok && gpu_ok) return "";
  return fmt::format(
      "KV offload of {} tokens ({} layers x K,V x {} heads x {} x {}) does not fit: host memory needs {} (pinned "
      "K/V) and has {} available{}; {} needs {} (caches of {} + {} lines per layer and head, page tables of {} "
      "lines) and has {} free{}",
      s.capacity, s.n_layer, s.n_kv_head, s.head_dim, kv_elem_name(s.elem), gib(z.host_bytes), gib(host_free),
      host_ok ? "" : " (short)", gpu_name, gib(z.gpu_bytes), s.keys_slots, s.kv_slots, z.n_lines, gib(gpu_free),
      gpu_ok ? "" : " (short)");
}

int64_t host_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

}  // namespace longctx::kv

// offload_spec.h: the shape of a KV offload tier (the KV cache in host memory behind GPU-resident
// caches, kernels/params/kv_offload.h) and every size derived from it, checked before anything
// is allocated.
//
// What: OffloadSpec names the model geometry, the element type, the tokens the host tier holds
// per layer (one sequence), the line size (tokens of one KV head cached together) and the slots
// per (layer, KV head) of the two GPU caches HiP reads through: the keys cache of the mask
// estimator and the K/V cache of the sparse attention. offload_sizes() validates it and derives
// the host bytes (every layer's K and V, pinned) and the GPU bytes (banks, page tables, slot
// metadata). offload_fit_problem() checks both against what is free and names both in its
// message (the style of gpu/memory_plan.h): capacity = what the host holds, at the GPU's cost of
// caches and tables only.
// GPU bytes per layer and cache: banks slots * line * row_bytes (x2 with V), the page table, and 3
// int32 per slot. Page table per cache (kernels/params/kv_offload.h): the vector map, n_kv_head *
// ceil(capacity / line) int32 (O(T)), or the hash map, n_kv_head * buckets uint64 (O(slots)).
// PageTable::hash costs less once ceil(capacity / line) > 2 * buckets (a 16384-slot cache: 256K
// tokens at lines of 2).
#pragma once
#include <cstdint>
#include <string>

#include "kernels/params/kv_view.h"

namespace longctx::kv {

enum class PageTable { vector, hash };
const char* page_table_name(PageTable t);

struct OffloadSpec {
  int n_layer = 0;
  int n_kv_head = 0;
  int head_dim = 0;
  KvElem elem = KvElem::bf16;  // bf16 or fp8_e4m3 (HiP's estimator reads bf16 only)
  int64_t capacity = 0;        // tokens of one sequence held per layer (<= INT32_MAX)
  int line_tokens = 2;         // tokens of one KV head per cache line (HiP's b_k)
  int32_t keys_slots = 0;      // keys-cache lines per (layer, KV head); 0: no keys cache
  int32_t kv_slots = 0;        // K/V-cache lines per (layer, KV head); 0: no K/V cache
  // Steps with a miss before a line enters each cache (kernels/params/kv_offload.h admit_steps):
  // the estimator's reads move with the context length (2 keeps one-off reads out), the
  // attention's selected blocks repeat over the cached steps (1 inserts them at once).
  int keys_admit_steps = 2;
  int kv_admit_steps = 1;
  // Hash-map buckets per (layer, KV head) of each cache; 0: the vector map. A power of two >=
  // kBucketsPerSlot x slots (offload_hash_buckets(slots) is the smallest).
  int32_t keys_buckets = 0;
  int32_t kv_buckets = 0;
};

// Bytes of one cache of one layer, by part (each part kKvAlign-aligned).
struct OffloadCacheSizes {
  int64_t bank = 0;       // one bank: slots * line_tokens rows of row_bytes
  int64_t table = 0;      // int32 [n_kv_head, n_lines], or uint64 [n_kv_head, buckets]
  int64_t slot_meta = 0;  // int32 [n_kv_head, slots] (each of slot_line, last_use, miss_lines)
  int64_t miss_count = 0; // int32 [n_kv_head] (hash map: then hash_used int32 [n_kv_head])
  int64_t stats = 0;      // uint64 [kOffloadStats]
  int64_t total = 0;      // banks (1 or 2) + table + 3 slot_meta + miss_count + stats
};

struct OffloadSizes {
  int64_t row_bytes = 0;         // one token of one layer, K or V
  int64_t host_pool_bytes = 0;   // one layer's K (or V) in host memory, aligned
  int64_t host_bytes = 0;        // 2 * n_layer * host_pool_bytes
  int32_t n_lines = 0;           // lines per head: ceil(capacity / line_tokens)
  OffloadCacheSizes keys, kv;    // per layer
  int64_t gpu_layer_bytes = 0;   // keys.total + kv.total
  int64_t gpu_bytes = 0;         // all layers + the tick and the identity block table
};

// Validates the spec; Error naming the bad field.
OffloadSizes offload_sizes(const OffloadSpec& s);
// "" when the tier fits: host_bytes in host_free (available host memory) and gpu_bytes in
// gpu_free of `gpu_name`; else one message naming both budgets and what each part needs.
std::string offload_fit_problem(const OffloadSpec& s, int64_t host_free, int64_t gpu_free, const std::string& gpu_name);
// MemAvailable of /proc/meminfo in bytes (0 when unreadable).
int64_t host_available_bytes();

}  // namespace longctx::kv

// kv_offload.h: a GPU-resident cache in front of a KV cache held in host memory, as kernels see it.
//
// What: plain data, no CUDA types. With KV offload the whole KV cache of a layer lives in pinned,
// mapped host memory: a KvView (kv_view.h) whose pools are device-addressable host pointers, so a
// kernel reads a missing row straight over PCIe (zero-copy). A KvOffloadCache keeps copies of some
// of its lines in GPU memory; a LINE is `line_tokens` consecutive tokens of ONE KV head (HiP reads
// keys in blocks of b_k = 2 tokens of a head, so lines of 2 waste no bytes).
// Layout of one cache of one layer (h = KV head, n_lines = ceil(capacity / line_tokens)):
//   bank_k, bank_v  [n_slots * line_tokens, n_kv_head, head_dim] of the view's element type; slot s
//                   of head h holds its line's tokens at rows s*line_tokens .., column h (every head
//                   has its own n_slots slots; bank_v is null for a keys-only cache)
//   table           the page table, line -> entry: the slot holding the line, else kLineAbsent,
//                   kLineMissed once its miss is recorded this step, or offload_line_seen(t) (missed
//                   at step t, admit_steps 2). Two kinds, chosen per cache:
//                   vector map (n_buckets 0): int32 [n_kv_head, n_lines], one entry per line (O(T));
//                   hash map (n_buckets > 0): uint64 [n_kv_head, n_buckets] open addressing with
//                     linear probing from offload_hash_bucket(line), a bucket holding
//                     (uint64(line) << 32) | uint32(entry), kBucketEmpty (all ones) or a tombstone
//                     (key kTombKey); a line without a bucket is absent. Fixed size (O(slots)).
//   hash_used       int32 [n_kv_head]           hash map: buckets not empty (entries + tombstones)
//   slot_line       int32 [n_kv_head, n_slots]  the line a slot holds, -1 when empty
//   last_use        int32 [n_kv_head, n_slots]  tick of the slot's last hit or insert, -1 never
//   miss_lines      int32 [n_kv_head, n_slots]  lines recorded as missed this step
//   miss_count      int32 [n_kv_head]           misses recorded this step (may pass n_slots: the
//                                               extra ones are not kept)
//   stats           uint64 [kOffloadStats]      cumulative counters, see OffloadStat
//   tick            int32 [1]                   the decode step (one per tier, all layers)
// Hash map rules (kernels/cuda/kv_offload.cuh, the CPU twin kv/offload_ref.h does the same): a
// reader inserts a line's bucket only while hash_used < offload_hash_limit(n_buckets) (else the
// miss is not recorded, as past n_slots records); evictions and lines not admitted leave
// tombstones; after a step that left hash_used above n_buckets / 2 the update rebuilds the head's
// table from its resident lines (slot_line), dropping tombstones and admission marks. With
// n_buckets >= 4 n_slots a step can always record n_slots misses, so with admit_steps 1 the hash
// map behaves exactly as the vector map; with admit_steps 2 it does while no rebuild drops a mark
// that a later miss would have used.
// Reading token t of head h: s = table[h][t / line_tokens]; s >= 0 is a hit (bank row
// s * line_tokens + t % line_tokens; last_use = tick); otherwise a miss, read from the host pool
// (row kv.row(0, t)), and the first reader of the step records it (kLineAbsent -> kLineMissed,
// line appended to miss_lines). Admission: with admit_steps 2 a line is recorded only when it
// also missed at an earlier step (its first miss leaves offload_line_seen(tick)): reads that do
// not come back (HiP's bisection samples other positions after the context grows) then cost no
// insertion, while lines read step after step still enter the cache. After the layer, kv_offload_update (kernels/cuda/kv_offload.h)
// copies the recorded lines from host memory into the least recently used slots: GPU work only,
// so a decode step stays one replayable CUDA graph. CPU twin: kv/offload_ref.h.
// Offload serves one sequence (batch row 0) per view.
#pragma once
#include <cstdint>

namespace longctx {

inline constexpr int32_t kLineAbsent = -1;
inline constexpr int32_t kLineMissed = -2;
// Table entry of a line first missed at step `tick` (>= 1) and not admitted yet (admit_steps 2):
// -2 - tick, so every such entry is <= -3.
constexpr int32_t offload_line_seen(int32_t tick) { return -2 - tick; }
// Slots per head the update's shared-memory sort holds (64-bit keys + int32 misses: 192 KiB).
inline constexpr int32_t kMaxOffloadSlots = 16384;

// Hash map page table (the helpers below run on host and device).
#if defined(__CUDACC__)
#define LONGCTX_OFFLOAD_HD __host__ __device__
#else
#define LONGCTX_OFFLOAD_HD
#endif
inline constexpr unsigned long long kBucketEmpty = ~0ull;
inline constexpr uint32_t kEmptyKey = 0xffffffffu;
inline constexpr uint32_t kTombKey = 0xfffffffeu;
// Buckets per slot: resident lines (<= n_slots) + one step's recorded misses (<= n_slots) stay under
// half the table, the rest is room for admission marks and tombstones until the next rebuild.
inline constexpr int32_t kBucketsPerSlot = 4;
// Insertions stop at 3/4 full: an absent line's probe then ends within a few buckets on average.
LONGCTX_OFFLOAD_HD constexpr int32_t offload_hash_limit(int32_t n_buckets) { return n_buckets - n_buckets / 4; }
// The hash map's size for n_slots slots: a power of two >= kBucketsPerSlot * n_slots.
constexpr int32_t offload_hash_buckets(int32_t n_slots) {
  int32_t b = 1;
  while (b < kBucketsPerSlot * n_slots) b *= 2;
  return b;
}
// First bucket of a line's probe (Fibonacci hashing: consecutive lines spread over the table).
LONGCTX_OFFLOAD_HD constexpr uint32_t offload_hash_bucket(int32_t line, int32_t n_buckets) {
  const uint32_t h = uint32_t(line) * 0x9e3779b1u;
  return (h ^ (h >> 15)) & uint32_t(n_buckets - 1);
}

enum OffloadStat : int { kStatReads = 0, kStatMisses = 1, kStatInserted = 2, kOffloadStats = 3 };

struct KvOffloadCache {
  void* bank_k = nullptr;           // device [n_slots * line_tokens, n_kv_head, head_dim]
  void* bank_v = nullptr;           // same, or null: a keys-only cache (the estimator's)
  int32_t* table = nullptr;         // [n_kv_head, n_lines]
  int32_t* slot_line = nullptr;     // [n_kv_head, n_slots]
  int32_t* last_use = nullptr;      // [n_kv_head, n_slots]
  int32_t* miss_lines = nullptr;    // [n_kv_head, n_slots]
  int32_t* miss_count = nullptr;    // [n_kv_head]
  int32_t* hash_used = nullptr;     // [n_kv_head], hash map only
  unsigned long long* stats = nullptr;  // [kOffloadStats]
  const int32_t* tick = nullptr;    // [1]
  int n_kv_head = 0;
  int line_tokens = 0;
  int32_t n_lines = 0;              // lines per head (the vector map's width)
  int32_t n_buckets = 0;            // hash map buckets per head (a power of two), 0: the vector map
  int32_t n_slots = 0;              // slots per head
  int admit_steps = 1;              // steps with a miss before a line is inserted: 1 or 2

  bool enabled() const { return table != nullptr; }
};

// The caches of one layer that one launch of the update / append serves (either may be disabled).
struct KvOffloadLayer {
  KvOffloadCache keys;  // the estimator's keys cache
  KvOffloadCache kv;    // the sparse attention's K/V cache
};

}  // namespace longctx

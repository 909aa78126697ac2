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
//   table           int32 [n_kv_head, n_lines]  the slot holding the line, else kLineAbsent,
//                                               kLineMissed once its miss is recorded this step, or
//                                               offload_line_seen(t) (missed at step t, admit_steps 2)
//   slot_line       int32 [n_kv_head, n_slots]  the line a slot holds, -1 when empty
//   last_use        int32 [n_kv_head, n_slots]  tick of the slot's last hit or insert, -1 never
//   miss_lines      int32 [n_kv_head, n_slots]  lines recorded as missed this step
//   miss_count      int32 [n_kv_head]           misses recorded this step (may pass n_slots: the
//                                               extra ones are not kept)
//   stats           uint64 [kOffloadStats]      cumulative counters, see OffloadStat
//   tick            int32 [1]                   the decode step (one per tier, all layers)
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

enum OffloadStat : int { kStatReads = 0, kStatMisses = 1, kStatInserted = 2, kOffloadStats = 3 };

struct KvOffloadCache {
  void* bank_k = nullptr;           // device [n_slots * line_tokens, n_kv_head, head_dim]
  void* bank_v = nullptr;           // same, or null: a keys-only cache (the estimator's)
  int32_t* table = nullptr;         // [n_kv_head, n_lines]
  int32_t* slot_line = nullptr;     // [n_kv_head, n_slots]
  int32_t* last_use = nullptr;      // [n_kv_head, n_slots]
  int32_t* miss_lines = nullptr;    // [n_kv_head, n_slots]
  int32_t* miss_count = nullptr;    // [n_kv_head]
  unsigned long long* stats = nullptr;  // [kOffloadStats]
  const int32_t* tick = nullptr;    // [1]
  int n_kv_head = 0;
  int line_tokens = 0;
  int32_t n_lines = 0;              // table width per head
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

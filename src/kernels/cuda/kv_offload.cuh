// kv_offload.cuh (cuda, internal): the read-through of a GPU-resident KV cache line
// (kernels/params/kv_offload.h) used inside HiP's estimator and sparse decode kernels.
//
// offload_lookup(c, h, t, record): the bank slot of token t's line for KV head h, or -1 (a miss:
// the caller reads host memory). With `record` (one thread per logical read, so the counters
// count reads once) a hit stamps the slot's last_use with the step's tick and a miss is recorded
// for the update: the first recorder of a line this step flips its table entry to kLineMissed
// (atomicCAS: one record per line however many threads miss it; with admit_steps 2 only from an
// earlier step's offload_line_seen mark, a first miss just leaves the mark) and appends it to the
// head's miss list; past n_slots records the line is put back to kLineAbsent (it could not be
// inserted anyway).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/params/kv_offload.h"

namespace longctx::cuda {

// e: the entry as read (< 0).
__device__ inline void offload_record_miss(const KvOffloadCache& c, int h, int32_t line, int32_t* entry, int32_t e) {
  if (e == kLineMissed) return;
  if (c.admit_steps > 1) {
    const int32_t now = offload_line_seen(*c.tick);
    if (e == kLineAbsent) atomicCAS(entry, kLineAbsent, now);  // first miss: remember the step
    if (e == kLineAbsent || e == now) return;
    if (atomicCAS(entry, e, kLineMissed) != e) return;  // missed at an earlier step: admit (once)
  } else if (atomicCAS(entry, kLineAbsent, kLineMissed) != kLineAbsent) {
    return;  // recorded already
  }
  const int i = atomicAdd(c.miss_count + h, 1);
  if (i < c.n_slots) c.miss_lines[int64_t(h) * c.n_slots + i] = line;
  else atomicExch(entry, kLineAbsent);
}

__device__ inline int32_t offload_lookup(const KvOffloadCache& c, int h, int32_t t, bool record) {
  const int32_t line = t / c.line_tokens;
  int32_t* entry = c.table + int64_t(h) * c.n_lines + line;
  const int32_t s = *entry;
  if (s >= 0) {
    if (record) c.last_use[int64_t(h) * c.n_slots + s] = *c.tick;
    return s;
  }
  if (record) offload_record_miss(c, h, line, entry, s);
  return -1;
}

// Adds this thread's counts to the cache's stats: one atomic per warp (all 32 lanes must call).
__device__ inline void offload_add_stats(const KvOffloadCache& c, unsigned reads, unsigned misses) {
  reads = __reduce_add_sync(0xffffffffu, reads);
  misses = __reduce_add_sync(0xffffffffu, misses);
  if ((threadIdx.x & 31) == 0) {
    if (reads) atomicAdd(c.stats + kStatReads, (unsigned long long)reads);
    if (misses) atomicAdd(c.stats + kStatMisses, (unsigned long long)misses);
  }
}

}  // namespace longctx::cuda

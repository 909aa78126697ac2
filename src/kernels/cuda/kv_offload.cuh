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
// Hash map page table (n_buckets > 0, kernels/params/kv_offload.h): the same states and
// transitions, an absent line being one without a bucket: the first recorder inserts the line's
// bucket (kLineMissed, or the admission mark) with a compare-and-swap on an empty bucket, so
// concurrent readers of one line agree on one bucket; a line past n_slots records becomes a
// tombstone; an insertion past offload_hash_limit is not made (the miss is then not recorded).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/params/kv_offload.h"

namespace longctx::cuda {

__device__ inline unsigned long long* offload_hash_table(const KvOffloadCache& c, int h) {
  return reinterpret_cast<unsigned long long*>(c.table) + int64_t(h) * c.n_buckets;
}
__device__ inline unsigned long long offload_bucket_word(uint32_t key, int32_t entry) {
  return (static_cast<unsigned long long>(key) << 32) | uint32_t(entry);
}
inline constexpr unsigned long long kBucketTomb = (static_cast<unsigned long long>(kTombKey) << 32) | 0xffffffffull;

// The bucket of `line` in a head's hash map (its word in *word), or -1: the line is absent.
__device__ inline int32_t offload_hash_find(const unsigned long long* tab, int32_t n_buckets, int32_t line,
                                            unsigned long long* word) {
  const uint32_t mask = uint32_t(n_buckets - 1);
  uint32_t i = offload_hash_bucket(line, n_buckets);
  for (int32_t probe = 0; probe < n_buckets; ++probe, i = (i + 1) & mask) {
    const unsigned long long w = *reinterpret_cast<const volatile unsigned long long*>(tab + i);
    const uint32_t k = uint32_t(w >> 32);
    if (k == uint32_t(line)) {
      *word = w;
      return int32_t(i);
    }
    if (k == kEmptyKey) return -1;
  }
  return -1;
}

// Inserts (line, entry) into head h's hash map: the bucket when this call inserted it, -1 when the
// line has a bucket already (another reader's) or the table is at its limit. The slot in hash_used
// is reserved before the probe, so concurrent insertions never pass the limit.
__device__ inline int32_t offload_hash_insert(const KvOffloadCache& c, int h, int32_t line, int32_t entry) {
  int32_t* used = c.hash_used + h;
  if (atomicAdd(used, 1) >= offload_hash_limit(c.n_buckets)) {
    atomicSub(used, 1);
    return -1;
  }
  unsigned long long* tab = offload_hash_table(c, h);
  const unsigned long long want = offload_bucket_word(uint32_t(line), entry);
  const uint32_t mask = uint32_t(c.n_buckets - 1);
  uint32_t i = offload_hash_bucket(line, c.n_buckets);
  for (int32_t probe = 0; probe < c.n_buckets; ++probe, i = (i + 1) & mask) {
    unsigned long long w = *reinterpret_cast<volatile unsigned long long*>(tab + i);
    if (uint32_t(w >> 32) == kEmptyKey) {
      w = atomicCAS(tab + i, kBucketEmpty, want);
      if (w == kBucketEmpty) return int32_t(i);
    }
    if (uint32_t(w >> 32) == uint32_t(line)) break;  // inserted by another reader
  }
  atomicSub(used, 1);
  return -1;
}

// Hash map: b the line's bucket (-1: none), e its entry (< 0; kLineAbsent when none).
__device__ inline void offload_hash_record_miss(const KvOffloadCache& c, int h, int32_t line, int32_t b, int32_t e) {
  if (e == kLineMissed) return;
  unsigned long long* tab = offload_hash_table(c, h);
  if (c.admit_steps > 1) {
    const int32_t now = offload_line_seen(*c.tick);
    if (e == kLineAbsent) (void)offload_hash_insert(c, h, line, now);  // first miss: remember the step
    if (e == kLineAbsent || e == now) return;
    const unsigned long long seen = offload_bucket_word(uint32_t(line), e);
    if (atomicCAS(tab + b, seen, offload_bucket_word(uint32_t(line), kLineMissed)) != seen) return;  // admit (once)
  } else {
    b = offload_hash_insert(c, h, line, kLineMissed);
    if (b < 0) return;  // recorded already, or the table is at its limit
  }
  const int i = atomicAdd(c.miss_count + h, 1);
  if (i < c.n_slots) c.miss_lines[int64_t(h) * c.n_slots + i] = line;
  else atomicExch(tab + b, kBucketTomb);
}

// The slot holding line `line` of head h, or a negative entry; no recording.
__device__ inline int32_t offload_slot_of(const KvOffloadCache& c, int h, int32_t line) {
  if (c.n_buckets == 0) return c.table[int64_t(h) * c.n_lines + line];
  unsigned long long w = 0;
  return offload_hash_find(offload_hash_table(c, h), c.n_buckets, line, &w) >= 0 ? int32_t(uint32_t(w)) : kLineAbsent;
}

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
  if (c.n_buckets > 0) {
    unsigned long long w = 0;
    const int32_t b = offload_hash_find(offload_hash_table(c, h), c.n_buckets, line, &w);
    const int32_t s = b >= 0 ? int32_t(uint32_t(w)) : kLineAbsent;
    if (s >= 0) {
      if (record) c.last_use[int64_t(h) * c.n_slots + s] = *c.tick;
      return s;
    }
    if (record) offload_hash_record_miss(c, h, line, b, s);
    return -1;
  }
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

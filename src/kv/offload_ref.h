// offload_ref.h: the CPU twin of one KV offload cache (kernels/params/kv_offload.h): the same
// page table, slot metadata, miss recording and LRU update as the GPU's read-through
// (kernels/cuda/kv_offload.cuh) and kv_offload_update (kernels/cuda/kv_offload.h), step for
// step, so tests compare the GPU's state with it exactly.
//
// How to use: begin_step(); read(h, t) for every logical read of the step (returns the bank slot
// or -1 for a miss, recording it); end_step() runs the update. Recording keeps the first n_slots
// distinct missed lines of a step in read order; the GPU keeps the first n_slots to arrive, so the
// two agree whenever a step misses at most n_slots distinct lines per head (more cannot be
// inserted anyway; which of them are is then the GPU's arrival order).
// Update rule: the recorded lines in ascending order go to the slots in ascending
// (last_use, slot) order, stopping at a slot used in this step; evicted lines become absent.
// Admission (admit_steps 2): a line is recorded only at a miss in a later step than its first.
// Hash map (n_buckets > 0): table() stays the logical line -> entry map; the twin counts the
// buckets the GPU's hash map would use (an entry for an absent line takes one, tombstones keep
// theirs), refuses an insertion at offload_hash_limit, and after a step that left more than half
// the buckets used drops admission marks and tombstones as the GPU's rebuild does.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace longctx::kv {

class OffloadCacheRef {
 public:
  // admit_steps: steps with a miss before a line is inserted (1 or 2; kernels/params/kv_offload.h).
  OffloadCacheRef(int n_kv_head, int32_t n_lines, int32_t n_slots, int line_tokens, int admit_steps = 1,
                  int32_t n_buckets = 0);

  void begin_step() { ++tick_; }
  int32_t read(int h, int64_t t);  // bank slot of token t's line for head h, or -1 (miss, recorded)
  void end_step();                 // the LRU update; returns nothing, counts in stats()

  struct Stats {
    uint64_t reads = 0, misses = 0, inserted = 0;
  };
  const Stats& stats() const { return stats_; }
  const std::vector<int32_t>& table() const { return table_; }          // [n_kv_head, n_lines]
  const std::vector<int32_t>& slot_line() const { return slot_line_; }  // [n_kv_head, n_slots]
  const std::vector<int32_t>& last_use() const { return last_use_; }    // [n_kv_head, n_slots]
  int32_t tick() const { return tick_; }
  int32_t hash_used(int h) const { return used_[size_t(h)]; }  // hash map: buckets in use

 private:
  int n_kv_head_;
  int32_t n_lines_, n_slots_;
  int line_tokens_;
  int admit_steps_;
  int32_t n_buckets_;
  int32_t tick_ = 0;
  std::vector<int32_t> used_;  // per head, hash map buckets in use
  bool take_bucket(int h);     // hash map: an absent line gets an entry (false: at the limit)
  std::vector<int32_t> table_, slot_line_, last_use_;
  std::vector<std::vector<int32_t>> recorded_;  // per head, this step's recorded lines
  std::vector<int64_t> miss_count_;             // per head, this step's records (may pass n_slots)
  Stats stats_;
};

}  // namespace longctx::kv

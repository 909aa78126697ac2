// offload_ref.cpp: see offload_ref.h.
#include "kv/offload_ref.h"

#include <algorithm>

#include "kernels/params/kv_offload.h"
#include "util/error.h"

namespace longctx::kv {

OffloadCacheRef::OffloadCacheRef(int n_kv_head, int32_t n_lines, int32_t n_slots, int line_tokens, int admit_steps,
                                 int32_t n_buckets)
    : n_kv_head_(n_kv_head),
      n_lines_(n_lines),
      n_slots_(n_slots),
      line_tokens_(line_tokens),
      admit_steps_(admit_steps),
      n_buckets_(n_buckets),
      used_(size_t(n_kv_head), 0),
      table_(size_t(n_kv_head) * n_lines, kLineAbsent),
      slot_line_(size_t(n_kv_head) * n_slots, -1),
      last_use_(size_t(n_kv_head) * n_slots, -1),
      recorded_(size_t(n_kv_head)),
      miss_count_(size_t(n_kv_head), 0) {
  if (n_kv_head < 1 || n_lines < 1 || n_slots < 1 || line_tokens < 1 || admit_steps < 1 || admit_steps > 2)
    fail("OffloadCacheRef: {} heads, {} lines, {} slots, lines of {} tokens, admit after {} steps (each at least 1, "
         "admit 1 or 2)",
         n_kv_head, n_lines, n_slots, line_tokens, admit_steps);
  if (n_buckets != 0 && (n_buckets < kBucketsPerSlot * int64_t(n_slots) || (n_buckets & (n_buckets - 1)) != 0))
    fail("OffloadCacheRef: a hash map of {} buckets for {} slots (a power of two >= {} x slots)", n_buckets, n_slots,
         kBucketsPerSlot);
}

bool OffloadCacheRef::take_bucket(int h) {
  if (n_buckets_ == 0) return true;
  if (used_[size_t(h)] >= offload_hash_limit(n_buckets_)) return false;
  ++used_[size_t(h)];
  return true;
}

int32_t OffloadCacheRef::read(int h, int64_t t) {
  const int64_t line = t / line_tokens_;
  if (h < 0 || h >= n_kv_head_ || t < 0 || line >= n_lines_) fail("OffloadCacheRef: read of head {} token {}", h, t);
  ++stats_.reads;
  int32_t& e = table_[size_t(h) * n_lines_ + line];
  if (e >= 0) {
    last_use_[size_t(h) * n_slots_ + e] = tick_;
    return e;
  }
  ++stats_.misses;
  if (e == kLineMissed) return -1;
  if (admit_steps_ > 1) {
    const int32_t now = offload_line_seen(tick_);
    if (e == kLineAbsent && take_bucket(h)) e = now;  // first miss: remember the step
    if (e == now || e == kLineAbsent) return -1;
  } else if (!take_bucket(h)) {
    return -1;  // hash map at its limit: not recorded
  }
  e = kLineMissed;  // record (admit 2: the line also missed at an earlier step)
  if (miss_count_[size_t(h)]++ < n_slots_) recorded_[size_t(h)].push_back(int32_t(line));
  else e = kLineAbsent;
  return -1;
}

void OffloadCacheRef::end_step() {
  for (int h = 0; h < n_kv_head_; ++h) {
    std::vector<int32_t>& lines = recorded_[size_t(h)];
    std::sort(lines.begin(), lines.end());
    int32_t* lu = last_use_.data() + size_t(h) * n_slots_;
    int32_t* sl = slot_line_.data() + size_t(h) * n_slots_;
    int32_t* tab = table_.data() + size_t(h) * n_lines_;
    std::vector<int32_t> slots(static_cast<size_t>(n_slots_));
    for (int32_t s = 0; s < n_slots_; ++s) slots[size_t(s)] = s;
    std::stable_sort(slots.begin(), slots.end(), [&](int32_t a, int32_t b) { return lu[a] < lu[b]; });
    size_t n_ins = 0;
    while (n_ins < lines.size() && lu[slots[n_ins]] != tick_) ++n_ins;
    for (size_t j = 0; j < n_ins; ++j)
      if (sl[slots[j]] >= 0) tab[sl[slots[j]]] = kLineAbsent;
    for (size_t j = 0; j < lines.size(); ++j) {
      if (j < n_ins) {
        const int32_t v = slots[j];
        tab[lines[j]] = v;
        sl[v] = lines[j];
        lu[v] = tick_;
      } else {
        tab[lines[j]] = kLineAbsent;
      }
    }
    stats_.inserted += n_ins;
    lines.clear();
    miss_count_[size_t(h)] = 0;
    if (n_buckets_ > 0 && used_[size_t(h)] > n_buckets_ / 2) {  // the rebuild: resident lines only
      int32_t resident = 0;
      for (int32_t line = 0; line < n_lines_; ++line)
        if (tab[line] >= 0) ++resident;
        else tab[line] = kLineAbsent;
      used_[size_t(h)] = resident;
    }
  }
}

}  // namespace longctx::kv

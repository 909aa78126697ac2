// test_offload.cpp: the KV offload tier's CPU parts: sizes and the fit check (kv/offload_spec.h)
// and the CPU twin of a GPU cache (kv/offload_ref.h): hits and misses, miss recording (one record
// per line, none past n_slots), the LRU update (ascending lines into ascending (last_use, slot),
// never evicting a slot used in the step) and admission after 2 steps, on hand-worked steps and
// on a long random run checked against the invariants (table and slot_line inverse maps).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "kernels/params/kv_offload.h"
#include "kv/kv_spec.h"
#include "kv/offload_ref.h"
#include "kv/offload_spec.h"
#include "kv_test_util.h"
#include "util/error.h"

namespace longctx::kv {
namespace {

OffloadSpec llama_1m() {
  OffloadSpec s;
  s.n_layer = 32;
  s.n_kv_head = 8;
  s.head_dim = 128;
  s.capacity = 1 << 20;
  s.line_tokens = 2;
  s.keys_slots = 8192;
  s.kv_slots = 2048;
  return s;
}

TEST(OffloadSpec, SizesOfLlama8BAt1M) {
  const OffloadSpec s = llama_1m();
  const OffloadSizes z = offload_sizes(s);
  EXPECT_EQ(z.row_bytes, 8 * 128 * 2);
  EXPECT_EQ(z.host_pool_bytes, int64_t(1 << 20) * 2048);
  EXPECT_EQ(z.host_bytes, 2 * 32 * z.host_pool_bytes);  // 128 GiB of bf16 K/V
  EXPECT_EQ(z.n_lines, 1 << 19);
  EXPECT_EQ(z.keys.bank, 8192LL * 2 * 2048);
  EXPECT_EQ(z.kv.bank, 2048LL * 2 * 2048);
  EXPECT_EQ(z.keys.table, 8LL * (1 << 19) * 4);  // the vector map: 16 MiB per layer and cache
  EXPECT_EQ(z.keys.total, z.keys.bank + z.keys.table + 3 * z.keys.slot_meta + z.keys.miss_count + z.keys.stats);
  EXPECT_EQ(z.kv.total, 2 * z.kv.bank + z.kv.table + 3 * z.kv.slot_meta + z.kv.miss_count + z.kv.stats);
  EXPECT_EQ(z.gpu_bytes, 32 * (z.keys.total + z.kv.total) + 2 * kKvAlign);
  OffloadSpec f = s;
  f.elem = KvElem::fp8_e4m3;
  EXPECT_EQ(offload_sizes(f).host_bytes, z.host_bytes / 2);
}

TEST(OffloadSpec, BadSpecsAreErrorsNamingTheField) {
  auto msg = [](OffloadSpec s) {
    try {
      offload_sizes(s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  OffloadSpec s = llama_1m();
  s.capacity = 0;
  EXPECT_NE(msg(s).find("capacity"), std::string::npos);
  s = llama_1m();
  s.line_tokens = 0;
  EXPECT_NE(msg(s).find("line"), std::string::npos);
  s = llama_1m();
  s.kv_slots = kMaxOffloadSlots + 1;
  EXPECT_NE(msg(s).find("slots"), std::string::npos);
  s = llama_1m();
  s.elem = KvElem::f32;
  EXPECT_NE(msg(s).find("f32"), std::string::npos);
  s = llama_1m();
  s.head_dim = 4;  // 8 bytes of bf16
  EXPECT_NE(msg(s).find("16 bytes"), std::string::npos);
}

TEST(OffloadSpec, FitProblemNamesHostAndGpu) {
  const OffloadSpec s = llama_1m();
  const OffloadSizes z = offload_sizes(s);
  EXPECT_EQ(offload_fit_problem(s, z.host_bytes, z.gpu_bytes, "NVIDIA H200"), "");
  const std::string host_short = offload_fit_problem(s, z.host_bytes - 1, z.gpu_bytes, "NVIDIA H200");
  EXPECT_NE(host_short.find("host memory needs 128.00 GiB"), std::string::npos) << host_short;
  EXPECT_NE(host_short.find("NVIDIA H200 needs"), std::string::npos) << host_short;
  EXPECT_NE(host_short.find("available (short)"), std::string::npos) << host_short;
  const std::string gpu_short = offload_fit_problem(s, z.host_bytes, z.gpu_bytes - 1, "NVIDIA H200");
  EXPECT_NE(gpu_short.find("free (short)"), std::string::npos) << gpu_short;
  EXPECT_EQ(gpu_short.find("available (short)"), std::string::npos) << gpu_short;
}

// One head, 4 slots, lines of 2 tokens: the hand-worked LRU sequence.
TEST(OffloadCacheRef, HandWorkedLruSteps) {
  OffloadCacheRef c(1, 100, 4, 2);
  c.begin_step();                // tick 1
  EXPECT_EQ(c.read(0, 0), -1);   // line 0
  EXPECT_EQ(c.read(0, 1), -1);   // line 0 again: a miss, recorded once
  EXPECT_EQ(c.read(0, 9), -1);   // line 4
  EXPECT_EQ(c.read(0, 4), -1);   // line 2
  c.end_step();                  // lines 0, 2, 4 -> slots 0, 1, 2
  EXPECT_EQ(c.table()[0], 0);
  EXPECT_EQ(c.table()[2], 1);
  EXPECT_EQ(c.table()[4], 2);
  EXPECT_EQ(c.stats().reads, 4u);
  EXPECT_EQ(c.stats().misses, 4u);
  EXPECT_EQ(c.stats().inserted, 3u);
  c.begin_step();                // tick 2
  EXPECT_EQ(c.read(0, 1), 0);    // hit: slot 0 used at tick 2
  EXPECT_EQ(c.read(0, 20), -1);  // line 10
  EXPECT_EQ(c.read(0, 12), -1);  // line 6
  c.end_step();                  // victims by (last_use, slot): slot 3 (-1), slot 1 (tick 1: line 2 out)
  EXPECT_EQ(c.table()[6], 3);
  EXPECT_EQ(c.table()[10], 1);
  EXPECT_EQ(c.table()[2], kLineAbsent);
  EXPECT_EQ(c.slot_line(), (std::vector<int32_t>{0, 10, 4, 6}));
  EXPECT_EQ(c.last_use(), (std::vector<int32_t>{2, 2, 1, 2}));
  c.begin_step();                // tick 3: all four slots used, so the 2 misses find no victim
  for (int64_t t : {0, 20, 8, 12}) EXPECT_GE(c.read(0, t), 0);
  EXPECT_EQ(c.read(0, 30), -1);
  EXPECT_EQ(c.read(0, 40), -1);
  c.end_step();
  EXPECT_EQ(c.table()[15], kLineAbsent);
  EXPECT_EQ(c.table()[20], kLineAbsent);
  EXPECT_EQ(c.stats().inserted, 5u);
}

// Admission after 2 steps: a line enters only when it also missed at an earlier step.
TEST(OffloadCacheRef, AdmitAfterTwoStepsKeepsOneOffReadsOut) {
  OffloadCacheRef c(1, 100, 4, 2, 2);
  c.begin_step();                // tick 1
  EXPECT_EQ(c.read(0, 10), -1);  // line 5: first miss, marked seen at 1
  EXPECT_EQ(c.read(0, 11), -1);  // again this step: still only seen
  EXPECT_EQ(c.table()[5], offload_line_seen(1));
  c.end_step();
  EXPECT_EQ(c.table()[5], offload_line_seen(1));  // nothing inserted
  EXPECT_EQ(c.stats().inserted, 0u);
  c.begin_step();                // tick 2
  EXPECT_EQ(c.read(0, 10), -1);  // line 5 again: admitted
  EXPECT_EQ(c.table()[5], kLineMissed);
  EXPECT_EQ(c.read(0, 40), -1);  // line 20: first miss
  c.end_step();
  EXPECT_EQ(c.table()[5], 0);
  EXPECT_EQ(c.table()[20], offload_line_seen(2));
  c.begin_step();                // tick 3
  EXPECT_EQ(c.read(0, 11), 0);   // hit
  c.end_step();
  EXPECT_EQ(c.stats().reads, 5u);
  EXPECT_EQ(c.stats().misses, 4u);
  EXPECT_EQ(c.stats().inserted, 1u);
}

TEST(OffloadCacheRef, RecordsAtMostNSlotsLinesPerStep) {
  OffloadCacheRef c(2, 50, 3, 1);
  c.begin_step();
  for (int t = 0; t < 6; ++t) EXPECT_EQ(c.read(1, t), -1);
  // Lines 0..2 recorded (kLineMissed), 3..5 put back to absent.
  EXPECT_EQ(c.table()[50 + 2], kLineMissed);
  EXPECT_EQ(c.table()[50 + 3], kLineAbsent);
  c.end_step();
  for (int t = 0; t < 3; ++t) EXPECT_EQ(c.table()[size_t(50 + t)], t);
  for (int t = 3; t < 6; ++t) EXPECT_EQ(c.table()[size_t(50 + t)], kLineAbsent);
  for (int t = 0; t < 50; ++t) EXPECT_EQ(c.table()[size_t(t)], kLineAbsent);  // head 0 untouched
}

// A long run with locality: table and slot_line stay inverse maps, hits never return a stale slot,
// and a line read twice in a row (with no more distinct lines than slots in between) hits.
TEST(OffloadCacheRef, RandomRunKeepsTheMapsConsistent) {
  const int H = 3, slots = 16, line = 2;
  const int32_t lines = 400;
  OffloadCacheRef c(H, lines, slots, line);
  for (int step = 0; step < 200; ++step) {
    c.begin_step();
    const int64_t center = test::uniform(0, lines * line - 1);
    for (int i = 0; i < 12; ++i) {
      const int h = int(test::uniform(0, H - 1));
      const int64_t t = std::clamp<int64_t>(center + test::uniform(-20, 20), 0, lines * line - 1);
      c.read(h, t);
    }
    c.end_step();
    for (int h = 0; h < H; ++h) {
      int held = 0;
      for (int32_t l = 0; l < lines; ++l) {
        const int32_t s = c.table()[size_t(h) * lines + l];
        ASSERT_NE(s, kLineMissed);  // the update clears every record
        if (s >= 0) {
          ++held;
          ASSERT_EQ(c.slot_line()[size_t(h) * slots + s], l);
        }
      }
      int filled = 0;
      for (int s = 0; s < slots; ++s) filled += c.slot_line()[size_t(h) * slots + s] >= 0;
      ASSERT_EQ(held, filled);
    }
  }
  EXPECT_GT(c.stats().reads - c.stats().misses, 0u);  // locality gives hits
  c.begin_step();
  c.read(0, 7);
  c.end_step();
  c.begin_step();
  EXPECT_GE(c.read(0, 6), 0);  // same line, next step
  c.end_step();
}

// The hash map page table against the vector map, read for read: with admission after 1 step
// they agree always (a step records at most n_slots lines and the table has room for them); with
// admission after 2 steps they agree while no rebuild drops a mark (a table 4096x the slots here).
void expect_hash_equals_vector(int admit, int32_t buckets) {
  const int H = 3, slots = 16, line = 2;
  const int32_t lines = 400;
  OffloadCacheRef vec(H, lines, slots, line, admit), hash(H, lines, slots, line, admit, buckets);
  int rebuilds = 0;
  for (int step = 0; step < 300; ++step) {
    vec.begin_step();
    hash.begin_step();
    const int64_t center = test::uniform(0, lines * line - 1);
    for (int i = 0; i < 24; ++i) {
      const int h = int(test::uniform(0, H - 1));
      const int64_t t = std::clamp<int64_t>(center + test::uniform(-30, 30), 0, lines * line - 1);
      ASSERT_EQ(vec.read(h, t), hash.read(h, t)) << "step " << step << " read " << i;
    }
    std::vector<int32_t> before(static_cast<size_t>(H));
    for (int h = 0; h < H; ++h) before[size_t(h)] = hash.hash_used(h);
    vec.end_step();
    hash.end_step();
    for (int h = 0; h < H; ++h) rebuilds += hash.hash_used(h) < before[size_t(h)];
    ASSERT_EQ(vec.table(), hash.table()) << "step " << step;
    ASSERT_EQ(vec.slot_line(), hash.slot_line()) << "step " << step;
    ASSERT_EQ(vec.last_use(), hash.last_use()) << "step " << step;
  }
  EXPECT_EQ(vec.stats().misses, hash.stats().misses);
  EXPECT_EQ(vec.stats().inserted, hash.stats().inserted);
  EXPECT_GT(vec.stats().inserted, 0u);
  if (admit == 1) {
    EXPECT_GT(rebuilds, 0) << "the run should rebuild the hash map (tombstones pile up)";
  }
}

TEST(OffloadCacheRef, HashMapEqualsVectorMapAdmitOne) {
  expect_hash_equals_vector(1, offload_hash_buckets(16));  // 64 buckets: rebuilt every few steps
}

TEST(OffloadCacheRef, HashMapEqualsVectorMapAdmitTwoWhileMarksFit) {
  expect_hash_equals_vector(2, 65536);  // > 2 x 300 steps x 24 reads: never rebuilt, no mark dropped
}

// Admission after 2 steps in a tiny hash map (2 slots, 8 buckets: insertions stop at 6, a step
// that leaves more than 4 used is followed by a rebuild): marks past the limit are not made, and
// the rebuild drops the others, so a line's second miss after it counts as a first.
TEST(OffloadCacheRef, HashMapFullTableAndRebuildDropMarks) {
  OffloadCacheRef c(1, 100, 2, 1, 2, 8);
  c.begin_step();                                  // tick 1
  for (int t = 0; t < 7; ++t) EXPECT_EQ(c.read(0, t), -1);
  for (int t = 0; t < 6; ++t) EXPECT_EQ(c.table()[size_t(t)], offload_line_seen(1)) << t;
  EXPECT_EQ(c.table()[6], kLineAbsent);            // the table was at its limit: no mark
  EXPECT_EQ(c.hash_used(0), 6);
  c.end_step();                                    // 6 > 4: rebuilt with no resident line
  EXPECT_EQ(c.hash_used(0), 0);
  for (int t = 0; t < 7; ++t) EXPECT_EQ(c.table()[size_t(t)], kLineAbsent) << t;
  c.begin_step();                                  // tick 2: line 0's mark is gone
  EXPECT_EQ(c.read(0, 0), -1);
  EXPECT_EQ(c.table()[0], offload_line_seen(2));
  c.end_step();
  EXPECT_EQ(c.stats().inserted, 0u);
  c.begin_step();                                  // tick 3: its second miss admits it
  EXPECT_EQ(c.read(0, 0), -1);
  c.end_step();
  EXPECT_EQ(c.table()[0], 0);
  EXPECT_EQ(c.hash_used(0), 1);
}

// Admission after 1 step, 1 slot, 4 buckets (limit 3): the first miss is recorded, the next two
// overflow the step's one record (tombstones, still counted), the fourth finds the table full;
// the update inserts the recorded line and the rebuild (3 > 2 used) leaves its bucket only.
TEST(OffloadCacheRef, HashMapOverflowTombstonesAndLimit) {
  OffloadCacheRef c(1, 100, 1, 1, 1, 4);
  c.begin_step();
  for (int t = 10; t < 14; ++t) EXPECT_EQ(c.read(0, t), -1);
  EXPECT_EQ(c.table()[10], kLineMissed);
  for (int t = 11; t < 14; ++t) EXPECT_EQ(c.table()[size_t(t)], kLineAbsent);
  EXPECT_EQ(c.hash_used(0), 3);
  c.end_step();
  EXPECT_EQ(c.table()[10], 0);
  EXPECT_EQ(c.hash_used(0), 1);
  EXPECT_EQ(c.stats().misses, 4u);
  EXPECT_EQ(c.stats().inserted, 1u);
  EXPECT_THROW(OffloadCacheRef(1, 100, 4, 1, 1, 8), Error);  // fewer than 4 buckets a slot
}

}  // namespace
}  // namespace longctx::kv

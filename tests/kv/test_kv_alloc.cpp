// test_kv_alloc.cpp: KvSpec sizes and errors, and the page allocator / batch tables of KvCache
// against a simple model under random create / reserve / append / truncate / free / set_batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "kv/kv_cache.h"
#include "kv_test_util.h"
#include "util/error.h"
#include "../common/error_of.h"

namespace longctx::kv {
namespace {

using test::uniform;

KvSpec small_spec(int page_size, int64_t n_pages, int max_batch = 4, int64_t max_seq_tokens = 1 << 20) {
  KvSpec s;
  s.n_layer = 2;
  s.n_kv_head = 2;
  s.head_dim = 8;
  s.page_size = page_size;
  s.elem = KvElem::bf16;
  s.n_pages = n_pages;
  s.max_batch = max_batch;
  s.max_seq_tokens = max_seq_tokens;
  return s;
}

// The message of the Error `f` throws ("" when it throws none).
using test_common::error_of;

TEST(KvSpec, SizesByHand) {
  KvSpec s = small_spec(16, 100, 3, 1000);  // rows of 2*8 bf16 = 32 bytes
  const KvSizes z = kv_sizes(s);
  EXPECT_EQ(z.row_elems, 16);
  EXPECT_EQ(z.row_bytes, 32);
  EXPECT_EQ(z.page_bytes, 16 * 32);
  EXPECT_EQ(z.pool_tokens, 1600);
  EXPECT_EQ(z.layer_pool_bytes, 51200);  // 100 * 512, a multiple of 256
  EXPECT_EQ(z.pool_bytes, 2 * 2 * 51200);
  EXPECT_EQ(z.max_pages_per_seq, 63);  // ceil(1000 / 16)
  EXPECT_EQ(z.lens_offset, 768);       // 3 * 63 * 4 = 756 -> 768
  EXPECT_EQ(z.table_bytes, 768 + 256);
  EXPECT_EQ(z.total_bytes, 204800 + 1024);
  EXPECT_EQ(kv_bytes_needed(s), z.total_bytes);
  s.elem = KvElem::fp8_e4m3;
  s.n_pages = 3;  // 3 * 16 * 16 = 768 bytes a layer pool
  EXPECT_EQ(kv_sizes(s).layer_pool_bytes, 768);
  s.n_pages = 1;  // 256 bytes
  s.page_size = 1;  // 16 bytes -> aligned to 256
  EXPECT_EQ(kv_sizes(s).layer_pool_bytes, 256);
  EXPECT_EQ(pages_for_tokens(0, 16), 0);
  EXPECT_EQ(pages_for_tokens(16, 16), 1);
  EXPECT_EQ(pages_for_tokens(17, 16), 2);
  EXPECT_EQ(pages_for_tokens(5, 1), 5);
}

TEST(KvSpec, Errors) {
  KvSpec s = small_spec(0, 10);
  EXPECT_EQ(error_of([&] { kv_sizes(s); }), "KV cache spec: page size 0 (must be at least 1 token)");
  s = small_spec(16, 0);
  EXPECT_EQ(error_of([&] { kv_sizes(s); }), "KV cache spec: 0 pages (must be 1..2147483647: page ids are int32)");
  s = small_spec(16, int64_t(1) << 31);
  EXPECT_NE(error_of([&] { kv_sizes(s); }).find("page ids are int32"), std::string::npos);
  s = small_spec(16, 10);
  s.n_kv_head = 0;
  EXPECT_EQ(error_of([&] { kv_sizes(s); }),
            "KV cache spec: 2 layers, 0 KV heads, head size 8 (each must be at least 1)");
  s = small_spec(16, 10, 0);
  EXPECT_EQ(error_of([&] { kv_sizes(s); }), "KV cache spec: max_batch 0 (must be at least 1)");
  // overflowed sizes: 2^31-1 pages of 2^30 tokens of 2^30-element rows
  s = small_spec(1 << 30, INT32_MAX);
  s.n_kv_head = 1 << 15;
  s.head_dim = 1 << 15;
  const std::string ov = error_of([&] { kv_sizes(s); });
  EXPECT_NE(ov.find("overflows 64 bits"), std::string::npos) << ov;
  s = small_spec(16, 100, 1, int64_t(1) << 40);  // sequence lengths past int32
  EXPECT_NE(error_of([&] { kv_sizes(s); }).find("exceed int32 (seq_lens are int32)"), std::string::npos);
  EXPECT_NE(error_of([] { KvCache c(small_spec(-3, 4)); }).find("page size -3"), std::string::npos);
}

TEST(KvSpec, FitProblem) {
  const KvSpec s = small_spec(16, 100, 3, 1000);
  const int64_t need = kv_bytes_needed(s);
  EXPECT_EQ(kv_fit_problem(s, need, "the GPU"), "");
  const std::string m = kv_fit_problem(s, need - 1, "the GPU");
  // per page: 2 layers x K,V x 512 bytes = 2048; (need - 1 - tables 1024) / 2048 = 99 pages
  EXPECT_EQ(m,
            "the KV cache of 100 pages x 16 tokens (1600 tokens: 2 layers x K,V x 2 heads x 8 x bf16) needs 0.00 GiB "
            "but the GPU has 0.00 GiB free; about 99 pages (1584 tokens) would fit");
}

TEST(KvCache, FreshPoolHandsOutPagesInOrder) {
  KvCache c(small_spec(16, 64));
  const SeqId a = c.create_sequence();
  c.reserve(a, 100);  // 7 pages
  EXPECT_EQ(std::vector<int32_t>(c.pages(a).begin(), c.pages(a).end()), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(c.contiguous_base_row(a), 0);
  EXPECT_EQ(c.length(a), 0);
  EXPECT_EQ(c.capacity(a), 112);
  const SeqId b = c.create_sequence();
  c.append(b, 20);
  EXPECT_EQ(c.contiguous_base_row(b), 7 * 16);
  EXPECT_EQ(c.row_of(b, 17), 8 * 16 + 1);
  c.append(a, 5);  // within the reservation: no new pages
  EXPECT_EQ(c.free_pages(), 64 - 9);
  c.append(a, 200);  // past it: pages 9.. (not consecutive with 0..6)
  EXPECT_EQ(c.contiguous_base_row(a), -1);
  EXPECT_EQ(c.length(a), 205);
  // freed pages come back first, in their old order
  c.free_sequence(b);
  const SeqId d = c.create_sequence();
  c.append(d, 32);
  EXPECT_EQ(std::vector<int32_t>(c.pages(d).begin(), c.pages(d).end()), (std::vector<int32_t>{7, 8}));
}

TEST(KvCache, ClearRestoresAFreshCache) {
  KvSpec s = small_spec(8, 32, 2, 256);
  s.elem = KvElem::fp8_e4m3;
  KvCache c(s);
  const SeqId a = c.create_sequence(), b = c.create_sequence();
  c.append(a, 20);
  c.append(b, 9);
  c.append(a, 30);  // a's pages are no longer consecutive
  c.set_scales(1, 0.5f, 0.25f);
  const SeqId ab[] = {a, b};
  c.set_batch(ab);
  c.clear();
  EXPECT_EQ(c.n_sequences(), 0);
  EXPECT_EQ(c.free_pages(), 32);
  EXPECT_TRUE(c.batch().empty());
  EXPECT_EQ(c.batch_seq_lens()[0], 0);
  EXPECT_FALSE(c.scales_set(1));
  EXPECT_FALSE(c.contains(a));
  const SeqId d = c.create_sequence();
  EXPECT_GT(d, b);  // ids are not reused
  c.reserve(d, 256);
  EXPECT_EQ(c.contiguous_base_row(d), 0);  // pages in order again
  c.set_batch({d});
  EXPECT_EQ(c.batch_row(d), 0);
}

TEST(KvCache, ErrorMessages) {
  KvCache c(small_spec(16, 4, 2, 100));
  const SeqId a = c.create_sequence();  // 0
  c.append(a, 20);                      // 2 pages
  EXPECT_EQ(error_of([&] { c.append(a, 60); }),
            "KV cache full: sequence 0 needs 3 more pages of 16 tokens, 2 free (pool 4 pages)");
  EXPECT_EQ(c.length(a), 20);  // a failed call changes nothing
  EXPECT_EQ(c.free_pages(), 2);
  EXPECT_EQ(error_of([&] { c.reserve(a, 113); }),
            "KV cache reserve: sequence 0 would hold 113 tokens but the block tables hold at most 7 pages of 16 "
            "tokens per sequence (max_seq_tokens 100)");
  EXPECT_EQ(error_of([&] { c.append(7, 1); }), "KV cache append: unknown sequence 7 (1 live)");
  EXPECT_EQ(error_of([&] { c.length(7); }), "KV cache length: unknown sequence 7 (1 live)");
  EXPECT_EQ(error_of([&] { c.append(a, -1); }), "KV cache append: -1 tokens to sequence 0");
  EXPECT_EQ(error_of([&] { c.truncate(a, 21); }),
            "KV cache truncate: length 21 for sequence 0 of length 20 (must be 0..20)");
  const SeqId b = c.create_sequence();
  const SeqId both[] = {a, b};
  const SeqId twice[] = {a, a};
  const SeqId three[] = {a, b, a};
  EXPECT_EQ(error_of([&] { c.set_batch(twice); }), "KV cache set_batch: sequence 0 is listed twice (rows 0 and 1)");
  EXPECT_EQ(error_of([&] { c.set_batch(three); }),
            "KV cache set_batch: 3 sequences but the batch tables hold 2 (max_batch)");
  c.set_batch(both);
  EXPECT_EQ(error_of([&] { c.free_sequence(b); }),
            "KV cache free_sequence: sequence 1 is row 1 of the current batch; set a batch without it first");
  EXPECT_EQ(error_of([&] { c.set_scales(0, 1.f, 1.f); }),
            "KV cache set_scales: the pool is bf16; scales belong to fp8 pools");
  EXPECT_EQ(error_of([&] { c.k_scale(2); }), "KV cache k_scale: layer 2 (the cache has 2)");
  c.set_batch({});
  c.free_sequence(b);
  EXPECT_EQ(error_of([&] { c.free_sequence(b); }), "KV cache free_sequence: unknown sequence 1 (1 live)");
}

// The model: what each sequence should hold.
struct ModelSeq {
  int64_t length = 0;
  int64_t pages = 0;
};

void check_against_model(const KvCache& c, const std::map<SeqId, ModelSeq>& model) {
  const KvSpec& s = c.spec();
  std::set<int32_t> owned;
  int64_t total = 0;
  ASSERT_EQ(c.n_sequences(), int64_t(model.size()));
  for (const auto& [id, m] : model) {
    ASSERT_TRUE(c.contains(id));
    ASSERT_EQ(c.length(id), m.length) << "sequence " << id;
    ASSERT_EQ(int64_t(c.pages(id).size()), m.pages) << "sequence " << id;
    ASSERT_GE(c.capacity(id), c.length(id));
    for (int32_t p : c.pages(id)) {
      ASSERT_GE(p, 0);
      ASSERT_LT(p, s.n_pages);
      ASSERT_TRUE(owned.insert(p).second) << "page " << p << " owned twice";
    }
    total += m.pages;
  }
  ASSERT_EQ(total + c.free_pages(), s.n_pages);
  // batch tables: row b = batch[b]'s pages and length; lengths 0 past the batch
  const auto batch = c.batch();
  const int stride = c.sizes().max_pages_per_seq;
  for (int b = 0; b < s.max_batch; ++b) {
    if (b < int(batch.size())) {
      const SeqId id = batch[size_t(b)];
      ASSERT_EQ(c.batch_row(id), b);
      ASSERT_EQ(c.batch_seq_lens()[b], c.length(id));
      const auto pg = c.pages(id);
      for (size_t i = 0; i < pg.size(); ++i) ASSERT_EQ(c.batch_block_table()[int64_t(b) * stride + int64_t(i)], pg[i]);
    } else {
      ASSERT_EQ(c.batch_seq_lens()[b], 0);
    }
  }
}

class AllocatorProperty : public ::testing::TestWithParam<int> {};

TEST_P(AllocatorProperty, RandomOpsMatchModel) {
  const int ps = GetParam();
  const int64_t n_pages = 4096 / ps + 37;  // ~4K tokens whatever the page size, not a round number
  const int64_t max_tokens = 2000;
  KvCache c(small_spec(ps, n_pages, 6, max_tokens));
  std::map<SeqId, ModelSeq> model;
  std::vector<SeqId> batch;
  int n_full = 0, n_ops = 0;
  auto pick = [&]() {
    auto it = model.begin();
    std::advance(it, uniform(0, int64_t(model.size()) - 1));
    return it->first;
  };
  auto in_batch = [&](SeqId id) { return std::find(batch.begin(), batch.end(), id) != batch.end(); };
  for (int step = 0; step < 3000; ++step) {
    const int64_t op = model.empty() ? 0 : uniform(0, 9);
    const int64_t free_before = c.free_pages();
    if (op == 0 && model.size() < 24) {
      const SeqId id = c.create_sequence();
      ASSERT_FALSE(model.count(id)) << "id reused";
      model[id] = {};
    } else if (op <= 4) {  // append
      const SeqId id = pick();
      ModelSeq& m = model[id];
      const int64_t n = uniform(0, 3) == 0 ? uniform(0, 400) : uniform(0, 3);
      const int64_t len = m.length + n;
      const int64_t pages = std::max(m.pages, pages_for_tokens(len, ps));
      if (len > max_tokens && pages_for_tokens(len, ps) > c.sizes().max_pages_per_seq) {
        EXPECT_NE(error_of([&] { c.append(id, n); }).find("the block tables hold at most"), std::string::npos);
      } else if (pages - m.pages > free_before) {
        EXPECT_EQ(error_of([&] { c.append(id, n); }).rfind("KV cache full: sequence " + std::to_string(id), 0), 0u);
        ++n_full;
      } else {
        c.append(id, n);
        m.length = len;
        m.pages = pages;
      }
    } else if (op == 5) {  // reserve
      const SeqId id = pick();
      ModelSeq& m = model[id];
      const int64_t tokens = uniform(0, max_tokens);
      const int64_t pages = std::max(m.pages, pages_for_tokens(tokens, ps));
      if (pages - m.pages > free_before) {
        EXPECT_EQ(error_of([&] { c.reserve(id, tokens); }).rfind("KV cache full", 0), 0u);
        ++n_full;
      } else {
        c.reserve(id, tokens);
        m.pages = pages;
      }
    } else if (op == 6) {  // truncate
      const SeqId id = pick();
      ModelSeq& m = model[id];
      const int64_t len = uniform(0, m.length);
      c.truncate(id, len);
      m.length = len;
      m.pages = pages_for_tokens(len, ps);
    } else if (op == 7) {  // free (out of the batch first)
      const SeqId id = pick();
      if (in_batch(id)) {
        EXPECT_NE(error_of([&] { c.free_sequence(id); }).find("current batch"), std::string::npos);
        batch.erase(std::find(batch.begin(), batch.end(), id));
        c.set_batch(batch);
      }
      c.free_sequence(id);
      model.erase(id);
    } else {  // a new batch: random members in random order
      batch.clear();
      const int64_t n = uniform(0, std::min<int64_t>(6, int64_t(model.size())));
      while (int64_t(batch.size()) < n) {
        const SeqId id = pick();
        if (!in_batch(id)) batch.push_back(id);
      }
      c.set_batch(batch);
    }
    ++n_ops;
    ASSERT_NO_FATAL_FAILURE(check_against_model(c, model)) << "after step " << step;
  }
  EXPECT_GT(n_full, 0) << "the random ops never filled the pool: the test would miss the full-cache path";
  c.set_batch({});
  for (const auto& [id, m] : model) c.free_sequence(id);
  EXPECT_EQ(c.free_pages(), n_pages);
  EXPECT_EQ(c.n_sequences(), 0);
  // every page is free exactly once: a new sequence can take the whole pool, each page once
  const SeqId all = c.create_sequence();
  c.reserve(all, std::min<int64_t>(n_pages * ps, c.sizes().max_pages_per_seq * int64_t(ps)));
  std::set<int32_t> got(c.pages(all).begin(), c.pages(all).end());
  EXPECT_EQ(int64_t(got.size()), int64_t(c.pages(all).size()));
}

INSTANTIATE_TEST_SUITE_P(PageSizes, AllocatorProperty, ::testing::Values(1, 3, 16, 64, 128));

TEST(KvCache, BatchTablesTrackGrowthAndDirtyRows) {
  // a derived class sees which table entries changed (what DeviceKvCache uploads)
  struct Probe : KvCache {
    using KvCache::KvCache;
    std::vector<DirtyRange> take() {
      std::vector<DirtyRange> d = dirty_rows();
      for (DirtyRange& r : dirty_rows()) r = {};
      return d;
    }
  };
  Probe c(small_spec(4, 64, 3, 256));
  const SeqId a = c.create_sequence(), b = c.create_sequence();
  c.append(a, 5);  // 2 pages, not in the batch: no row changes
  const SeqId ab[] = {a, b};
  c.set_batch(ab);
  auto d = c.take();
  EXPECT_EQ(d[0].lo, 0);
  EXPECT_EQ(d[0].hi, 2);
  EXPECT_GE(d[1].lo, d[1].hi);  // b has no pages yet
  EXPECT_EQ(c.batch_seq_lens()[0], 5);
  c.append(a, 3);  // 8 tokens: still 2 pages: only the length changes
  d = c.take();
  EXPECT_GE(d[0].lo, d[0].hi);
  EXPECT_EQ(c.batch_seq_lens()[0], 8);
  c.append(a, 1);  // page 3 of a
  c.append(b, 9);  // 3 pages of b
  d = c.take();
  EXPECT_EQ(d[0].lo, 2);
  EXPECT_EQ(d[0].hi, 3);
  EXPECT_EQ(d[1].lo, 0);
  EXPECT_EQ(d[1].hi, 3);
  const SeqId ba[] = {b, a};  // swapped rows: both rewritten
  c.set_batch(ba);
  d = c.take();
  EXPECT_EQ(d[0].hi, 3);
  EXPECT_EQ(d[1].hi, 3);
  EXPECT_EQ(c.batch_block_table()[c.sizes().max_pages_per_seq + 2], c.pages(a)[2]);
  c.set_batch(ba);  // same batch again: nothing to upload
  d = c.take();
  EXPECT_GE(d[0].lo, d[0].hi);
  EXPECT_GE(d[1].lo, d[1].hi);
}

// reserve_contiguous takes the lowest run of consecutive free pages, skipping holes too short,
// and fails (changing nothing) when no run is long enough.
TEST(KvCache, ReserveContiguousFindsALongEnoughRun) {
  KvCache c(small_spec(16, 12));
  std::vector<SeqId> s;
  for (int i = 0; i < 6; ++i) {  // pages 0-1, 2-3, ..., 10-11
    s.push_back(c.create_sequence());
    c.reserve_contiguous(s.back(), 32);
    EXPECT_EQ(c.contiguous_base_row(s.back()), int64_t(i) * 2 * 16);
  }
  c.free_sequence(s[1]);  // free: 2-3
  c.free_sequence(s[3]);  // free: 2-3, 6-7
  c.free_sequence(s[4]);  // free: 2-3, 6-9
  const SeqId big = c.create_sequence();
  c.reserve_contiguous(big, 40);  // 3 pages: only 6-8 qualifies
  EXPECT_EQ(std::vector<int32_t>(c.pages(big).begin(), c.pages(big).end()), (std::vector<int32_t>{6, 7, 8}));
  EXPECT_EQ(c.free_pages(), 3);
  const SeqId more = c.create_sequence();
  const std::string m = error_of([&] { c.reserve_contiguous(more, 48); });
  EXPECT_NE(m.find("3 consecutive pages"), std::string::npos) << m;
  EXPECT_EQ(c.free_pages(), 3);
  EXPECT_TRUE(c.pages(more).empty());
  c.reserve_contiguous(more, 17);  // 2 pages: 2-3
  EXPECT_EQ(c.contiguous_base_row(more), 2 * 16);
  c.reserve_contiguous(c.create_sequence(), 0);  // nothing to take
  EXPECT_NE(error_of([&] { c.reserve_contiguous(more, 16); }).find("already holds"), std::string::npos);
  c.free_sequence(big);  // its pages go back; a fresh reservation finds them again
  const SeqId again = c.create_sequence();
  c.reserve_contiguous(again, 64);  // 4 pages: 6-9
  EXPECT_EQ(c.contiguous_base_row(again), 6 * 16);
}

// The continuous-batching pattern of the GPU batch (runtime/sequence_batch_gpu.cpp): each
// sequence takes its prompt as one contiguous run, then grows one token at a time (pages from the
// free list, anywhere), and leaves at a random step; others join while it runs. Checked every
// step: longest_free_run against a brute-force scan of the free ids, reserve_contiguous succeeding
// exactly when that run is long enough, no page owned twice, pages + free = the pool, freed pages
// handed out again, and the pool whole at the end.
TEST(KvCache, ContiguousPromptsThenPageGrowthJoinLeave) {
  const int ps = 16;
  const int64_t n_pages = 96;
  KvCache c(small_spec(ps, n_pages, 8, 64 * ps));
  struct Live {
    SeqId id;
    int64_t prompt, target;  // tokens: the contiguous prompt; it leaves at `target`
  };
  std::vector<Live> live;
  std::set<int32_t> ever_freed, reused;
  int joins = 0, refused = 0;
  auto brute_run = [&] {
    std::vector<bool> used(size_t(n_pages), false);
    for (const Live& l : live)
      for (int32_t p : c.pages(l.id)) used[size_t(p)] = true;
    int64_t run = 0, best = 0;
    for (int64_t p = 0; p < n_pages; ++p) {
      run = used[size_t(p)] ? 0 : run + 1;
      best = std::max(best, run);
    }
    return best;
  };
  for (int step = 0; step < 4000; ++step) {
    const int64_t run = c.longest_free_run();
    ASSERT_EQ(run, brute_run()) << "step " << step;
    if (uniform(0, 3) == 0) {  // a newcomer's prompt
      const int64_t prompt = uniform(1, 12 * ps);
      const SeqId id = c.create_sequence();
      if (pages_for_tokens(prompt, ps) <= run) {
        c.reserve_contiguous(id, prompt);
        ASSERT_GE(c.contiguous_base_row(id), 0);
        for (int32_t p : c.pages(id))
          if (ever_freed.count(p)) reused.insert(p);
        c.append(id, prompt);
        live.push_back({id, prompt, prompt + uniform(1, 6 * ps)});
        ++joins;
      } else {
        EXPECT_NE(error_of([&] { c.reserve_contiguous(id, prompt); }).find("consecutive pages"), std::string::npos);
        EXPECT_TRUE(c.pages(id).empty());
        c.free_sequence(id);
        ++refused;
      }
    }
    for (size_t i = 0; i < live.size();) {  // one decode step each: grow by a token or leave
      Live& l = live[i];
      if (c.length(l.id) >= l.target || (c.length(l.id) % ps == 0 && c.free_pages() == 0)) {
        for (int32_t p : c.pages(l.id)) ever_freed.insert(p);
        c.free_sequence(l.id);
        live.erase(live.begin() + int64_t(i));
        continue;
      }
      c.append(l.id, 1);
      ASSERT_LE(c.length(l.id), c.capacity(l.id));
      ++i;
    }
    std::set<int32_t> owned;
    int64_t n_owned = 0;
    for (const Live& l : live) {
      owned.insert(c.pages(l.id).begin(), c.pages(l.id).end());
      n_owned += int64_t(c.pages(l.id).size());
      EXPECT_EQ(int64_t(c.pages(l.id).size()), pages_for_tokens(c.length(l.id), ps));  // no page taken early
    }
    ASSERT_EQ(int64_t(owned.size()), n_owned) << "a page owned twice at step " << step;
    ASSERT_EQ(n_owned + c.free_pages(), n_pages);
  }
  EXPECT_GT(joins, 100);
  EXPECT_GT(refused, 0) << "the pool never ran short of a run: the test would miss the refusal path";
  EXPECT_GT(reused.size(), size_t(n_pages / 2)) << "freed pages should be handed out again";
  for (const Live& l : live) c.free_sequence(l.id);
  EXPECT_EQ(c.free_pages(), n_pages);
  EXPECT_EQ(c.longest_free_run(), n_pages);
}

}  // namespace
}  // namespace longctx::kv

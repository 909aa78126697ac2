// test_sparse_window.cpp (tests/cuda): the sparse kernels' Self-Extend variants against an fp64
// oracle that is "dense attention with the same mask": the index's keys (union of ranges and
// columns), causal, and
//   prefill window W (SparseAttnParams::window): row i also needs key > q_pos0 + i - W;
//   prefill q_pos0 < 0 (Self-Extend's far part): row i sees keys <= q_pos0 + i, none when < 0;
//   decode window / shift (SparseDecodeParams): keys in [len - shift - window, len - shift).
// Fresh random bf16 inputs per run (seed printed), random indexes (overlapping ranges, ends past
// n_kv, repeated columns, columns inside ranges), ragged last query blocks, windows whose
// boundary falls inside a 64-key tile (W = 1, 37, 100) and on one (64), GQA 8/2, head_dim 64,
// 128 and 256, the index per query head and shared, HiP-like rows (2-key blocks: gathered tails,
// with range tiles, packed tails and columns) and windows that leave rows with no key. Every
// prefill case runs on both kernels with the same inputs: the Hopper kernel's own entry
// (sparse_attention_plan/run; on sm_90 at head_dim 128/256, its windowed variant for W > 0) and
// sparse_attention_generic; SparseWindow.DispatchRoutes checks that cuda::sparse_attention
// picks the Hopper kernel there (bit-equal outputs) and the generic one elsewhere. Rows that see
// no key must give O = 0, LSE = -inf.
// Run: build/tests/cuda/test_sparse_window (skips without an sm_80+ GPU; the Hopper runs need sm_90).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/sparse_attention.h"
#include "kernels/cuda/sparse_attention_generic.h"
#include "kernels/cuda/sparse_decode.h"
#include "sparse/sparse_index.h"
#include "sparse_test_util.h"
#include "test_util.h"

namespace longctx::cuda::test {
namespace {

#define LC_REQUIRE_SM80()                                                                   \
  do {                                                                                      \
    if (::longctx::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";             \
    if (::longctx::cuda::device_info(0).sm_major < 8) GTEST_SKIP() << "below sm_80";        \
  } while (0)

// Per (head, row) mask of the keys a row attends: the oracle's input.
using KeySet = std::vector<char>;

struct Result {
  std::vector<double> o, lse;  // (head, row, dim) and (head, row)
};

// fp64 attention of each (head h, row i) over mask(h, i) (q [rows, n_head, D], k/v [n_kv, n_kv_head, D]).
template <class MaskFn>
Result oracle(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v, int64_t rows,
              int64_t n_kv, int n_head, int n_kv_head, int D, MaskFn mask) {
  const double scale = 1.0 / std::sqrt(double(D));
  Result r;
  std::vector<double> sc(static_cast<size_t>(n_kv)), acc(static_cast<size_t>(D));
  for (int h = 0; h < n_head; ++h) {
    const int kvh = h / (n_head / n_kv_head);
    for (int64_t i = 0; i < rows; ++i) {
      const KeySet m = mask(h, i);
      double mx = -INFINITY;
      for (int64_t j = 0; j < n_kv; ++j) {
        if (!m[size_t(j)]) continue;
        double s = 0;
        for (int d = 0; d < D; ++d) s += q[(size_t(i) * n_head + h) * D + d] * k[(size_t(j) * n_kv_head + kvh) * D + d];
        sc[size_t(j)] = s * scale;
        mx = std::max(mx, sc[size_t(j)]);
      }
      double l = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < n_kv; ++j) {
        if (!m[size_t(j)]) continue;
        const double p = std::exp(sc[size_t(j)] - mx);
        l += p;
        for (int d = 0; d < D; ++d) acc[size_t(d)] += p * v[(size_t(j) * n_kv_head + kvh) * D + d];
      }
      for (int d = 0; d < D; ++d) r.o.push_back(l > 0 ? acc[size_t(d)] / l : 0.0);
      r.lse.push_back(l > 0 ? mx + std::log(l) : -INFINITY);
    }
  }
  return r;
}

// got vs ref: the generic kernels' tolerances (test_sparse_attention_generic.cpp), and rows with
// no key exactly O = 0, LSE = -inf (compare() alone would let a NaN through there).
void expect_close(const Result& got, const Result& ref, double vmax, int D, const std::string& what) {
  const ErrStats eo = compare(got.o, ref.o, 5e-3 * vmax, 1e-2), el = compare(got.lse, ref.lse, 2e-3, 1e-5);
  std::printf("  %-48s O %s | LSE %s\n", what.c_str(), eo.str().c_str(), el.str().c_str());
  EXPECT_EQ(eo.n_bad + eo.n_nan, 0) << what << ": " << eo.str();
  EXPECT_LT(eo.rel_l2, 1e-2) << what;
  EXPECT_EQ(el.n_bad + el.n_nan, 0) << what << ": " << el.str();
  int64_t empty = 0, wrong = 0;
  for (size_t r = 0; r < ref.lse.size(); ++r) {
    if (std::isfinite(ref.lse[r])) continue;
    ++empty;
    bool ok = got.lse[r] == -INFINITY;
    for (int d = 0; d < D; ++d) ok = ok && got.o[r * size_t(D) + size_t(d)] == 0.0;
    wrong += !ok;
  }
  EXPECT_EQ(wrong, 0) << what << ": rows with no key must give O = 0, LSE = -inf (" << empty << " such rows)";
}

// ---- prefill --------------------------------------------------------------------------------

// Which entry runs a prefill case.
enum class Entry { hopper, generic, dispatch };
const char* entry_name(Entry e) {
  return e == Entry::hopper ? "hopper" : e == Entry::generic ? "generic" : "sparse_attention()";
}
// The Hopper kernel's entry takes the case: sm_90, head_dim 128 or 256.
bool hopper_takes(int D) { return device_info(0).sm_major == 9 && (D == 128 || D == 256); }

// One prefill input: bf16 q/k/v on the host (and as doubles) and on the device, the index.
struct PrefillCase {
  Shape sh;
  int D;
  int64_t window;
  std::vector<double> qd, kd, vd;
  std::vector<uint16_t> qh, kh, vh;
  std::unique_ptr<DevBuf> q, k, v;
  DevIndex di;
  PrefillCase(const Shape& sh_, int D_, int64_t window_, const SparseIndex& idx_)
      : sh(sh_), D(D_), window(window_), di(idx_, sh_.n_q) {
    qh = random_bf16(size_t(sh.n_q) * sh.n_head * D, 1.0, qd);
    kh = random_bf16(size_t(sh.n_kv) * sh.n_kv_head * D, 1.0, kd);
    vh = random_bf16(size_t(sh.n_kv) * sh.n_kv_head * D, 1.0, vd);
    q = std::make_unique<DevBuf>(qh.size() * 2);
    k = std::make_unique<DevBuf>(kh.size() * 2);
    v = std::make_unique<DevBuf>(vh.size() * 2);
    q->upload(qh);
    k->upload(kh);
    v->upload(vh);
  }
  // Runs the case through `entry` (poisoned outputs and workspace); O as bf16 bits, LSE.
  void run(Entry entry, std::vector<uint16_t>& oh, std::vector<float>& lh) const {
    DevBuf o(qh.size() * 2), lse(size_t(sh.n_q) * sh.n_head * 4), ws(sparse_attention_workspace_bytes(di.ix));
    o.poison();
    lse.poison();
    ws.poison();
    SparseAttnParams p;
    p.q = q->p;
    p.k = k->p;
    p.v = v->p;
    p.o = o.p;
    p.lse = lse.as<float>();
    p.n_q = sh.n_q;
    p.n_kv = sh.n_kv;
    p.n_head = sh.n_head;
    p.n_kv_head = sh.n_kv_head;
    p.head_dim = D;
    p.q_pos0 = sh.q_pos0;
    p.window = window;
    p.index = di.ix;
    p.workspace = ws.p;
    p.workspace_bytes = ws.bytes;
    if (entry == Entry::hopper) {
      sparse_attention_plan(p);
      sparse_attention_run(p);
    } else if (entry == Entry::generic) {
      sparse_attention_generic(p);
    } else {
      sparse_attention(p);
    }
    device_sync();
    oh = o.download<uint16_t>(qh.size());
    lh = lse.download<float>(size_t(sh.n_q) * sh.n_head);
  }
};

// One prefill case, the shape, the window (0: none), checked against the oracle on the generic
// kernel and (where it takes the case) the Hopper kernel.
void check_prefill(const Shape& sh, int D, int64_t window, const SparseIndex& idx, const std::string& what) {
  const PrefillCase pc(sh, D, window, idx);
  const int hpi = sh.n_head / int(idx.heads.size());
  const Result ref = oracle(pc.qd, pc.kd, pc.vd, sh.n_q, sh.n_kv, sh.n_head, sh.n_kv_head, D, [&](int h, int64_t i) {
    KeySet m(size_t(sh.n_kv), 0);
    const HeadIndex& hi = idx.heads[size_t(h / hpi)];
    const int64_t b = i / kSparseBlockQ, pos = sh.q_pos0 + i;
    for (const auto& r : hi.block_ranges(b))
      for (int64_t j = std::max<int64_t>(r.start, 0); j < std::min<int64_t>(r.end, sh.n_kv); ++j) m[size_t(j)] = 1;
    for (int32_t c : hi.block_cols(b)) m[size_t(c)] = 1;
    for (int64_t j = 0; j < sh.n_kv; ++j)
      if (j > pos || (window > 0 && j <= pos - window)) m[size_t(j)] = 0;
    return m;
  });
  std::vector<Entry> entries{Entry::generic};
  if (hopper_takes(D)) entries.insert(entries.begin(), Entry::hopper);
  for (const Entry e : entries) {
    std::vector<uint16_t> oh;
    std::vector<float> lh;
    pc.run(e, oh, lh);
    Result got;
    for (int h = 0; h < sh.n_head; ++h)
      for (int64_t i = 0; i < sh.n_q; ++i) {
        for (int d = 0; d < D; ++d) got.o.push_back(bf16_to_f32(oh[(size_t(i) * sh.n_head + h) * D + d]));
        got.lse.push_back(lh[size_t(h) * sh.n_q + i]);
      }
    char buf[200];
    std::snprintf(buf, sizeof buf, "%s d=%d W=%lld q_pos0=%lld n_q=%lld [%s]", what.c_str(), D, (long long)window,
                  (long long)sh.q_pos0, (long long)sh.n_q, entry_name(e));
    expect_close(got, ref, max_abs(pc.vd), D, buf);
  }
}

// Every key of [0, n_kv) as one range per block: the window alone decides.
SparseIndex all_keys(const Shape& sh, int n_index_head) {
  SparseIndex idx;
  idx.n_q = sh.n_q;
  idx.heads.resize(size_t(n_index_head));
  for (auto& hi : idx.heads)
    for (int64_t b = 0; b < n_query_blocks(sh.n_q); ++b) {
      hi.ranges.push_back({0, int32_t(sh.n_kv)});
      hi.end_block();
    }
  return idx;
}

// HiP-like rows: per block ~120 ranges of HiP's 2-key blocks (even starts: gathered tails), a few
// of 20-40 keys (packed 16-key segments), one of 150-250 keys (whole 64-key range tiles, then a
// tail), and 60 columns (sorted, some repeated or inside ranges).
SparseIndex hip_like(const Shape& sh, int n_index_head, std::mt19937_64& g) {
  std::uniform_int_distribution<int32_t> key(0, int32_t(sh.n_kv) - 1), mid(20, 40), lng(150, 250);
  SparseIndex idx;
  idx.n_q = sh.n_q;
  idx.heads.resize(size_t(n_index_head));
  for (auto& hi : idx.heads)
    for (int64_t b = 0; b < n_query_blocks(sh.n_q); ++b) {
      std::vector<KeyRange> rs;
      for (int i = 0; i < 120; ++i) {
        const int32_t s0 = key(g) & ~1;
        rs.push_back({s0, s0 + 2});
      }
      for (int i = 0; i < 3; ++i) {
        const int32_t s0 = key(g);
        rs.push_back({s0, s0 + mid(g)});
      }
      const int32_t s0 = key(g);
      rs.push_back({s0, s0 + lng(g)});
      std::vector<int32_t> cs;
      for (int i = 0; i < 60; ++i) cs.push_back(key(g));
      end_block_sorted(hi, std::move(rs), std::move(cs));
    }
  return idx;
}

TEST(SparseWindow, PrefillRowWindowMatchesOracle) {
  LC_REQUIRE_SM80();
  auto g = gen();
  for (const int D : {64, 128, 256}) {
    // Ragged last block (200 rows), chunk at 300 over 500 keys, GQA 8/2.
    const Shape sh{.n_q = 200, .n_kv = 500, .q_pos0 = 300, .n_head = 8, .n_kv_head = 2};
    for (const int64_t W : {1, 37, 64, 100}) {
      check_prefill(sh, D, W, random_index(sh, sh.n_head, 0.1, g), "random, per query head");
      check_prefill(sh, D, W, many_short(sh, 1, g), "many short, shared");
      check_prefill(sh, D, W, all_keys(sh, sh.n_kv_head), "all keys, per KV head");
    }
    // First chunk (q_pos0 0), a window wider than some rows' history.
    const Shape first{.n_q = 130, .n_kv = 130, .q_pos0 = 0, .n_head = 8, .n_kv_head = 2};
    check_prefill(first, D, 100, random_index(first, 2, 0.0, g), "first chunk");
  }
}

// HiP's index shape with a window: gathered 2-key tails, range tiles (some inside every row's
// window: no mask; some straddling it), packed tails and columns. W 1000 leaves whole range tiles
// inside every row's window (the unmasked path); W 37 and 300 cut through tiles of every kind.
TEST(SparseWindow, PrefillHipLikeWindowMatchesOracle) {
  LC_REQUIRE_SM80();
  auto g = gen();
  for (const int D : {128, 256}) {
    const Shape sh{.n_q = 300, .n_kv = 1500, .q_pos0 = 1200, .n_head = 8, .n_kv_head = 2};
    for (const int64_t W : {37, 300, 1000}) check_prefill(sh, D, W, hip_like(sh, sh.n_kv_head, g), "HiP-like");
  }
  // Also at d 64 (the generic kernel only) once.
  const Shape sh{.n_q = 300, .n_kv = 1500, .q_pos0 = 1200, .n_head = 8, .n_kv_head = 2};
  check_prefill(sh, 64, 300, hip_like(sh, 1, g), "HiP-like");
}

// A window that leaves rows with no key: the index holds keys [0, 50) and a few columns below 60
// only, the rows sit at 100.. with W = 80, so row i sees keys > 20 + i: rows past ~40 see
// nothing, and the second and later blocks are empty after the plan's clip. O = 0, LSE = -inf.
TEST(SparseWindow, PrefillWindowEmptyRows) {
  LC_REQUIRE_SM80();
  for (const int D : {64, 128, 256}) {
    const Shape sh{.n_q = 150, .n_kv = 300, .q_pos0 = 100, .n_head = 4, .n_kv_head = 2};
    SparseIndex idx;
    idx.n_q = sh.n_q;
    idx.heads.resize(1);
    for (int64_t b = 0; b < n_query_blocks(sh.n_q); ++b) {
      idx.heads[0].ranges.push_back({0, 50});
      for (const int32_t c : {52, 55, 59}) idx.heads[0].cols.push_back(c);
      idx.heads[0].end_block();
    }
    check_prefill(sh, D, 80, idx, "rows with no key");
    check_prefill(sh, D, 1, idx, "W 1 (only the diagonal, not indexed)");
  }
}

TEST(SparseWindow, PrefillRowsMovedBackMatchOracle) {
  LC_REQUIRE_SM80();
  auto g = gen();
  for (const int D : {64, 128, 256}) {
    // Self-Extend's far part: positions moved back by W = 90 from q_pos0 = 0 (rows 0..89 see
    // nothing), from 40 (rows 0..49), and by W past a whole block (q_pos0 -150: two blocks empty).
    for (const int64_t q0 : {-90, -50, -150}) {
      const Shape sh{.n_q = 250, .n_kv = 400, .q_pos0 = q0, .n_head = 8, .n_kv_head = 2};
      check_prefill(sh, D, 0, random_index(sh, sh.n_head, 0.1, g), "moved back, random");
      check_prefill(sh, D, 0, all_keys(sh, 1), "moved back, all keys");
      check_prefill(sh, D, 0, many_short(sh, sh.n_kv_head, g), "moved back, many short");
    }
  }
}

// cuda::sparse_attention picks the Hopper kernel on sm_90 at head_dim 128/256, windowed or not
// (its output bit-equal to the Hopper entry's: both kernels are deterministic, and their
// accumulation orders differ), and the generic kernel elsewhere (bit-equal to the generic entry's).
TEST(SparseWindow, DispatchRoutes) {
  LC_REQUIRE_SM80();
  auto g = gen();
  for (const int D : {64, 128, 256})
    for (const int64_t W : {0, 37}) {
      const Shape sh{.n_q = 200, .n_kv = 500, .q_pos0 = 300, .n_head = 8, .n_kv_head = 2};
      const SparseIndex idx = hip_like(sh, sh.n_kv_head, g);
      const PrefillCase pc(sh, D, W, idx);
      const Entry want = hopper_takes(D) ? Entry::hopper : Entry::generic;
      std::vector<uint16_t> o_d, o_w;
      std::vector<float> l_d, l_w;
      pc.run(Entry::dispatch, o_d, l_d);
      pc.run(want, o_w, l_w);
      EXPECT_TRUE(o_d == o_w) << "d " << D << " W " << W << ": sparse_attention() O differs from the " << entry_name(want)
                              << " entry's";
      EXPECT_EQ(std::memcmp(l_d.data(), l_w.data(), l_d.size() * 4), 0)
          << "d " << D << " W " << W << ": LSE differs from the " << entry_name(want) << " entry's";
    }
}

TEST(SparseWindow, RefusalsAndHopperEntry) {
  LC_REQUIRE_SM80();
  const Shape sh{.n_q = 64, .n_kv = 64, .q_pos0 = 0, .n_head = 2, .n_kv_head = 1};
  const DevIndex di(all_keys(sh, 1), sh.n_q);
  DevBuf q(64 * 2 * 256 * 2), kv(64 * 256 * 2), o(64 * 2 * 256 * 2), ws(sparse_attention_workspace_bytes(di.ix));
  SparseAttnParams p;
  p.q = q.p;
  p.k = p.v = kv.p;
  p.o = o.p;
  p.n_q = p.n_kv = 64;
  p.n_head = 2;
  p.n_kv_head = 1;
  p.index = di.ix;
  p.workspace = ws.p;
  p.workspace_bytes = ws.bytes;
  p.window = 8;
  p.causal = false;
  EXPECT_ANY_THROW(sparse_attention(p));  // a window needs the causal mask
  p.causal = true;
  p.q_pos0 = -1;
  p.window = 0;
  p.causal = false;
  EXPECT_ANY_THROW(sparse_attention(p));  // negative q_pos0 needs the causal mask
  if (device_info(0).sm_major == 9) {
    p.causal = true;
    p.q_pos0 = 0;
    p.window = 8;
    p.head_dim = 256;
    p.sm90_stages = 2;
    EXPECT_ANY_THROW(sparse_attention_run(p));  // the windowed variant has the 3-stage ring only
  }
}

// ---- decode ---------------------------------------------------------------------------------

// n_seq sequences of lengths lens in a paged pool (page 16, pages shuffled), one query each,
// per-(sequence, index head) random index rows; window / shift as SparseDecodeParams.
void check_decode(int D, int64_t window, int64_t shift, int n_index_head, const std::string& what) {
  auto g = gen();
  const int n_head = 8, n_kv_head = 2, page = 16;
  const std::vector<int32_t> lens = {300, 77};
  const int n_seq = int(lens.size()), max_pages = 300 / page + 1;
  const int64_t n_rows_pool = int64_t(n_seq) * max_pages * page;
  std::vector<int32_t> table(size_t(n_seq) * max_pages);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), g);
  std::vector<double> qd, kd, vd;
  const auto qh = random_bf16(size_t(n_seq) * n_head * D, 1.0, qd);
  const auto kh = random_bf16(size_t(n_rows_pool) * n_kv_head * D, 1.0, kd);
  const auto vh = random_bf16(size_t(n_rows_pool) * n_kv_head * D, 1.0, vd);
  // Index rows: 0..3 random ranges (some past the length) and 0..30 columns (repeats possible).
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int32_t> range_ptr{0}, col_ptr{0}, ranges, cols;
  struct Row {
    std::vector<std::pair<int32_t, int32_t>> r;
    std::vector<int32_t> c;
  };
  std::vector<Row> rows;
  for (int s = 0; s < n_seq; ++s)
    for (int ih = 0; ih < n_index_head; ++ih) {
      Row row;
      for (int i = int(u(g) * 4); i > 0; --i) {
        const int32_t a = int32_t(u(g) * lens[size_t(s)]);
        row.r.push_back({a, a + int32_t(u(g) * 120)});
      }
      std::sort(row.r.begin(), row.r.end());
      for (int i = int(u(g) * 31); i > 0; --i) row.c.push_back(int32_t(u(g) * lens[size_t(s)]));
      std::sort(row.c.begin(), row.c.end());
      for (auto& [a, b] : row.r) ranges.insert(ranges.end(), {a, b});
      cols.insert(cols.end(), row.c.begin(), row.c.end());
      range_ptr.push_back(int32_t(ranges.size() / 2));
      col_ptr.push_back(int32_t(cols.size()));
      rows.push_back(row);
    }
  DevBuf q(qh.size() * 2), k(kh.size() * 2), v(vh.size() * 2), o(qh.size() * 2), lse(size_t(n_seq) * n_head * 4),
      bt(table.size() * 4), sl(lens.size() * 4), rp(range_ptr.size() * 4), cp(col_ptr.size() * 4),
      rg(std::max<size_t>(ranges.size(), 2) * 4), cl(std::max<size_t>(cols.size(), 1) * 4);
  q.upload(qh);
  k.upload(kh);
  v.upload(vh);
  bt.upload(table);
  sl.upload(lens);
  rp.upload(range_ptr);
  cp.upload(col_ptr);
  if (!ranges.empty()) rg.upload(ranges);
  if (!cols.empty()) cl.upload(cols);
  o.poison();
  lse.poison();
  SparseDecodeParams p;
  p.q = q.p;
  p.o = o.p;
  p.lse = lse.as<float>();
  p.n_head = n_head;
  p.kv = {.k_pool = k.p, .v_pool = v.p, .elem = KvElem::bf16, .block_table = bt.as<int32_t>(),
          .seq_lens = sl.as<int32_t>(), .n_seq = n_seq, .max_pages_per_seq = max_pages, .page_size = page,
          .n_pages = int64_t(table.size()), .n_kv_head = n_kv_head, .head_dim = D, .on_device = true};
  p.index = {.n_seq = n_seq, .n_index_head = n_index_head, .range_ptr = rp.as<int32_t>(), .ranges = rg.as<int32_t>(),
             .col_ptr = cp.as<int32_t>(), .cols = cl.as<int32_t>(), .range_capacity = int64_t(ranges.size() / 2),
             .col_capacity = int64_t(cols.size()), .on_device = true};
  p.window = window;
  p.shift = shift;
  DevBuf ws(sparse_decode_workspace_bytes(sparse_decode_bounds(p)));
  sparse_decode_workspace_init(ws.p, ws.bytes);
  p.workspace = ws.p;
  p.workspace_bytes = ws.bytes;
  sparse_decode(p);
  device_sync();
  const auto oh = o.download<uint16_t>(qh.size());
  const auto lh = lse.download<float>(size_t(n_seq) * n_head);
  // The oracle per sequence over its own keys (pool rows through the block table).
  Result got, ref;
  const int hpi = n_head / n_index_head;
  for (int s = 0; s < n_seq; ++s) {
    const int64_t len = lens[size_t(s)];
    std::vector<double> qs(qd.begin() + int64_t(s) * n_head * D, qd.begin() + int64_t(s + 1) * n_head * D), ks, vs;
    for (int64_t t = 0; t < len; ++t) {
      const int64_t row = int64_t(table[size_t(s) * max_pages + t / page]) * page + t % page;
      ks.insert(ks.end(), kd.begin() + row * n_kv_head * D, kd.begin() + (row + 1) * n_kv_head * D);
      vs.insert(vs.end(), vd.begin() + row * n_kv_head * D, vd.begin() + (row + 1) * n_kv_head * D);
    }
    const int64_t hi = std::max<int64_t>(len - shift, 0), lo = window > 0 ? std::max<int64_t>(hi - window, 0) : 0;
    const Result r = oracle(qs, ks, vs, 1, len, n_head, n_kv_head, D, [&](int h, int64_t) {
      KeySet m(size_t(len), 0);
      const Row& row = rows[size_t(s) * n_index_head + h / hpi];
      for (auto [a, b] : row.r)
        for (int64_t j = a; j < std::min<int64_t>(b, len); ++j) m[size_t(j)] = 1;
      for (int32_t c : row.c) m[size_t(c)] = 1;
      for (int64_t j = 0; j < len; ++j)
        if (j < lo || j >= hi) m[size_t(j)] = 0;
      return m;
    });
    ref.o.insert(ref.o.end(), r.o.begin(), r.o.end());
    ref.lse.insert(ref.lse.end(), r.lse.begin(), r.lse.end());
    for (int h = 0; h < n_head; ++h) {
      for (int d = 0; d < D; ++d) got.o.push_back(bf16_to_f32(oh[(size_t(s) * n_head + h) * D + d]));
      got.lse.push_back(lh[size_t(s) * n_head + h]);
    }
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "decode %s d=%d window=%lld shift=%lld idx_heads=%d", what.c_str(), D,
                (long long)window, (long long)shift, n_index_head);
  expect_close(got, ref, max_abs(vd), D, buf);
}

TEST(SparseWindow, DecodeWindowAndShiftMatchOracle) {
  LC_REQUIRE_SM80();
  for (const int D : {64, 128}) {
    check_decode(D, 0, 0, 8, "plain");
    check_decode(D, 37, 0, 8, "near part");
    check_decode(D, 100, 0, 2, "near part");
    check_decode(D, 0, 37, 8, "far part");
    check_decode(D, 0, 100, 1, "far part (shorter sequence empty)");
  }
}

}  // namespace
}  // namespace longctx::cuda::test

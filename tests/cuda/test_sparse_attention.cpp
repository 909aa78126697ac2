// test_sparse_attention.cpp (tests/cuda): the Hopper sparse attention kernel
// (kernels/cuda/sparse_attention.h) as "dense reference with the same mask": an fp64 CPU oracle
// that attends, per row, exactly the keys in (union of the block's ranges and columns) and
// causal; fresh random bf16 inputs per run (seed printed by test_util.h).
// Index cases: random (overlapping ranges, ends past n_kv, duplicate columns, columns inside
// ranges or past the causal frontier), empty blocks (O = 0, LSE = -inf), everything selected
// (== dense), all keys as gathered columns, the last partial query block, q_pos0 > 0 chunks,
// GQA with per-query-head / per-KV-head / shared indices, non-causal, many short ranges, range
// tails at the kernel's packing boundaries, odd head counts and block counts over the kernel's
// task-order chunks, HiP's index (sinks, hundreds of 2-key blocks, window; gathered tails), and
// at the paper's size (256 blocks: every ring stage a gathered tile in flight; range tiles among).
// The same cases at head_dim 256 (SparseAttn*D256: Gemma 3's global layers; one consumer
// warpgroup per CTA, Q from shared memory, 2- and 3-stage rings), with GQA 4:1 and 8:1.
// fp8 e4m3 K/V tiles (SparseAttn*Fp8*): the same cases with K/V given as e4m3 codes + scales,
// the oracle on the dequantized values.
// Run: build-gpusparse/tests/cuda/test_cuda --gtest_filter='Sparse*' (skips without a Hopper GPU).
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/sparse_attention.h"
#include "sparse/sparse_index.h"
#include "sparse_test_util.h"
#include "test_util.h"
#include "util/error.h"

namespace longctx::cuda::test {
namespace {

// The CPU index flattened to the device CSR layout of sparse_attention.h.
struct FlatIndex {
  std::vector<int64_t> range_ptr{0}, col_ptr{0};
  std::vector<int32_t> ranges, cols;
};
FlatIndex flatten(const SparseIndex& idx) {
  FlatIndex f;
  for (const auto& hi : idx.heads)
    for (int64_t b = 0; b < hi.n_blocks(); ++b) {
      for (const auto& r : hi.block_ranges(b)) {
        f.ranges.push_back(r.start);
        f.ranges.push_back(r.end);
      }
      for (int32_t c : hi.block_cols(b)) f.cols.push_back(c);
      f.range_ptr.push_back(int64_t(f.ranges.size() / 2));
      f.col_ptr.push_back(int64_t(f.cols.size()));
    }
  return f;
}


// How check() runs the kernel.
struct RunOpts {
  int head_dim = 128;                     // 128 or 256
  int tail_gather_max = kSparseGatherMax;  // SparseAttnParams::tail_gather_max
  int stages = 0;                         // SparseAttnParams::sm90_stages (0 = default)
  bool fp8 = false;                       // K/V as e4m3 codes + scales (kv_dtype fp8_e4m3)
};

// Runs the kernel on idx and checks O (sampled heads: all) and LSE against the fp64 oracle.
void check(const Shape& sh, const SparseIndex& idx, const char* what, RunOpts run = {}) {
  const int D = run.head_dim;
  std::vector<double> qd, kd, vd;
  const auto qh = random_bf16(size_t(sh.n_q) * sh.n_head * D, 1.0, qd);
  const auto kh = random_bf16(size_t(sh.n_kv) * sh.n_kv_head * D, 1.0, kd);
  const auto vh = random_bf16(size_t(sh.n_kv) * sh.n_kv_head * D, 1.0, vd);
  // fp8: the kernel reads e4m3 codes (of the bf16 values) and the oracle their dequantized values
  Fp8Tensor k8, v8;
  if (run.fp8) {
    k8 = quantize_e4m3(std::vector<float>(kd.begin(), kd.end()));
    v8 = quantize_e4m3(std::vector<float>(vd.begin(), vd.end()));
    kd.assign(k8.dequant.begin(), k8.dequant.end());
    vd.assign(v8.dequant.begin(), v8.dequant.end());
  }
  const size_t kv_elem = run.fp8 ? 1 : 2;
  DevBuf q(qh.size() * 2), k(kh.size() * kv_elem), v(vh.size() * kv_elem), o(qh.size() * 2),
      lse(size_t(sh.n_q) * sh.n_head * 4);
  q.upload(qh);
  if (run.fp8) {
    k.upload(k8.codes);
    v.upload(v8.codes);
  } else {
    k.upload(kh);
    v.upload(vh);
  }
  o.poison();
  lse.poison();
  const FlatIndex f = flatten(idx);
  DevBuf rp(f.range_ptr.size() * 8), cp(f.col_ptr.size() * 8), rg(std::max<size_t>(f.ranges.size(), 1) * 4),
      cl(std::max<size_t>(f.cols.size(), 1) * 4);
  rp.upload(f.range_ptr);
  cp.upload(f.col_ptr);
  if (!f.ranges.empty()) rg.upload(f.ranges);
  if (!f.cols.empty()) cl.upload(f.cols);
  SparseAttnParams p;
  p.q = q.p;
  p.k = k.p;
  p.v = v.p;
  p.o = o.p;
  p.lse = lse.as<float>();
  p.n_q = sh.n_q;
  p.n_kv = sh.n_kv;
  p.n_head = sh.n_head;
  p.n_kv_head = sh.n_kv_head;
  p.q_pos0 = sh.q_pos0;
  p.causal = sh.causal;
  p.head_dim = D;
  p.tail_gather_max = run.tail_gather_max;
  p.sm90_stages = run.stages;
  if (run.fp8) {
    p.kv_dtype = KvDtype::fp8_e4m3;
    p.k_scale = k8.scale;
    p.v_scale = v8.scale;
  }
  p.index.n_index_head = int(idx.heads.size());
  p.index.n_qblk = n_query_blocks(sh.n_q);
  p.index.range_ptr = rp.as<int64_t>();
  p.index.col_ptr = cp.as<int64_t>();
  p.index.ranges = rg.as<int32_t>();
  p.index.cols = cl.as<int32_t>();
  p.index.n_ranges = f.range_ptr.back();
  p.index.n_cols = f.col_ptr.back();
  DevBuf ws(sparse_attention_workspace_bytes(p.index));
  ws.poison();
  p.workspace = ws.p;
  p.workspace_bytes = ws.bytes;
  sparse_attention(p);
  device_sync();
  const auto oh = o.download<uint16_t>(qh.size());
  const auto lh = lse.download<float>(size_t(sh.n_q) * sh.n_head);

  const double scale = 1.0 / std::sqrt(double(D));
  const int group = sh.n_head / sh.n_kv_head, hpi = sh.n_head / int(idx.heads.size());
  std::vector<double> ref, lref;
  std::vector<char> mask(size_t(sh.n_kv));
  std::vector<double> sc(size_t(sh.n_kv));
  for (int h = 0; h < sh.n_head; ++h) {
    const HeadIndex& hi = idx.heads[size_t(h / hpi)];
    const int kvh = h / group;
    for (int64_t i = 0; i < sh.n_q; ++i) {
      const int64_t b = i / kSparseBlockQ;
      std::fill(mask.begin(), mask.end(), 0);
      for (const auto& r : hi.block_ranges(b))
        for (int64_t j = std::max<int64_t>(r.start, 0); j < std::min<int64_t>(r.end, sh.n_kv); ++j) mask[j] = 1;
      for (int32_t c : hi.block_cols(b)) mask[c] = 1;
      double mx = -INFINITY;
      for (int64_t j = 0; j < sh.n_kv; ++j) {
        if (sh.causal && j > sh.q_pos0 + i) mask[j] = 0;
        if (!mask[j]) continue;
        double s = 0;
        const double* qr = &qd[(size_t(i) * sh.n_head + h) * D];
        const double* kr = &kd[(size_t(j) * sh.n_kv_head + kvh) * D];
        for (int d = 0; d < D; ++d) s += qr[d] * kr[d];
        sc[j] = s * scale;
        mx = std::max(mx, sc[j]);
      }
      double l = 0;
      std::vector<double> acc(D, 0.0);
      for (int64_t j = 0; j < sh.n_kv; ++j) {
        if (!mask[j]) continue;
        const double pj = std::exp(sc[j] - mx);
        l += pj;
        const double* vr = &vd[(size_t(j) * sh.n_kv_head + kvh) * D];
        for (int d = 0; d < D; ++d) acc[d] += pj * vr[d];
      }
      for (int d = 0; d < D; ++d) ref.push_back(l > 0 ? acc[d] / l : 0.0);
      lref.push_back(l > 0 ? mx + std::log(l) : -INFINITY);
    }
  }
  // the kernel's outputs in the oracle's order (head, row, dim)
  std::vector<double> got, lgot;
  for (int h = 0; h < sh.n_head; ++h)
    for (int64_t i = 0; i < sh.n_q; ++i) {
      for (int d = 0; d < D; ++d) got.push_back(bf16_to_f32(oh[(size_t(i) * sh.n_head + h) * D + d]));
      lgot.push_back(lh[size_t(h) * sh.n_q + i]);
    }
  const auto eo = compare(got, ref, 5e-3 * max_abs(vd), 1e-2);
  const auto el = compare(lgot, lref, 2e-3, 1e-5);
  std::printf("  sparse d=%d%s %-28s n_q=%lld n_kv=%lld q_pos0=%lld heads=%d/%d idx_heads=%zu: O %s | LSE %s\n", D,
              run.fp8 ? " fp8" : "", what,
              (long long)sh.n_q, (long long)sh.n_kv, (long long)sh.q_pos0, sh.n_head, sh.n_kv_head, idx.heads.size(),
              eo.str().c_str(), el.str().c_str());
  EXPECT_EQ(eo.n_bad, 0) << what << ": " << eo.str();
  EXPECT_EQ(eo.n_nan, 0) << what;
  EXPECT_LT(eo.rel_l2, 1e-2) << what << ": " << eo.str();
  EXPECT_EQ(el.n_bad, 0) << what << ": " << el.str();
  EXPECT_EQ(el.n_nan, 0) << what;
}


SparseIndex uniform_index(const Shape& sh, int n_index_head, bool as_columns) {
  SparseIndex idx;
  idx.n_q = sh.n_q;
  idx.heads.resize(size_t(n_index_head));
  for (auto& hi : idx.heads)
    for (int64_t b = 0; b < n_query_blocks(sh.n_q); ++b) {
      if (as_columns)
        for (int32_t j = 0; j < sh.n_kv; ++j) hi.cols.push_back(j);
      else
        hi.ranges.push_back({0, int32_t(sh.n_kv)});
      hi.end_block();
    }
  return idx;
}

TEST(SparseAttnSmall, RandomIndexGqaPerQueryHead) {
  LC_REQUIRE_GPU();
  auto g = gen();
  const Shape sh{300, 700, 400, 8, 2};
  check(sh, random_index(sh, 8, 0.1, g), "random/per-q-head");
}

TEST(SparseAttnSmall, RandomIndexSharedAndPerKvHead) {
  LC_REQUIRE_GPU();
  auto g = gen();
  const Shape sh{256, 256, 0, 4, 2};
  check(sh, random_index(sh, 1, 0.0, g), "random/shared");
  const Shape sh2{191, 900, 709, 6, 3};
  check(sh2, random_index(sh2, 3, 0.2, g), "random/per-kv-head");
}

TEST(SparseAttnSmall, EverythingSelectedIsDense) {
  LC_REQUIRE_GPU();
  const Shape sh{333, 333, 0, 4, 1};
  check(sh, uniform_index(sh, 1, false), "all-ranges");
  check(sh, uniform_index(sh, 1, true), "all-columns");
  const Shape sh2{130, 500, 370, 2, 2};
  check(sh2, uniform_index(sh2, 2, true), "all-columns/chunk");
}

// Only a column at each query block's last row, one head: earlier rows of the block have nothing
// (causal), so most rows of every tile are empty.
SparseIndex last_row_column_index(const Shape& sh) {
  SparseIndex one;
  one.n_q = sh.n_q;
  one.heads.resize(1);
  for (int64_t b = 0; b < n_query_blocks(sh.n_q); ++b) {
    one.heads[0].cols.push_back(int32_t(std::min<int64_t>(64 * b + 63, sh.n_q - 1)));
    one.heads[0].end_block();
  }
  return one;
}

TEST(SparseAttnSmall, EmptyRowsAndBlocks) {
  LC_REQUIRE_GPU();
  auto g = gen();
  const Shape sh{200, 200, 0, 2, 1};
  SparseIndex idx = random_index(sh, 2, 1.0, g);  // nothing anywhere
  check(sh, idx, "all-empty");
  check(sh, last_row_column_index(sh), "last-row-column");
  check(sh, random_index(sh, 2, 0.5, g), "half-empty");
}

TEST(SparseAttnSmall, NonCausal) {
  LC_REQUIRE_GPU();
  auto g = gen();
  Shape sh{150, 410, 0, 4, 4};
  sh.causal = false;
  check(sh, random_index(sh, 4, 0.1, g), "non-causal");
}

// Many short ranges and many columns per block (150 ranges of 1-20 keys, 200 columns): most tiles
// are partial, ranges overlap and columns fall inside ranges.
TEST(SparseAttnSmall, ManyShortRangesAndColumns) {
  LC_REQUIRE_GPU();
  auto g = gen();
  const Shape sh{320, 2600, 2280, 4, 2};
  check(sh, many_short(sh, 4, g), "many-short-ranges");
}

// Range tails at the packing boundaries (sparse_attention_sm90.cu packs a tail of at most
// kSparsePackMax keys as 16-key segments, four to a tile): widths 64 m + r around every segment
// boundary, 1..16 ranges per block (the last packed tile holds 1..4 segments), ranges clipped by
// the causal frontier, and in odd blocks one through the last key (a 16-key box past n_kv).
SparseIndex tail_packing_index(const Shape& sh, std::mt19937_64& g) {
  constexpr int32_t kWidths[] = {1, 15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64, 65, 112, 113, 130};
  constexpr int kNw = int(sizeof kWidths / sizeof kWidths[0]);
  std::uniform_int_distribution<int> n_ranges(1, kNw), gap(1, 40);
  SparseIndex idx;
  idx.n_q = sh.n_q;
  idx.heads.resize(4);
  for (auto& hi : idx.heads)
    for (int64_t b = 0; b < n_query_blocks(sh.n_q); ++b) {
      const int32_t end_range = int32_t(sh.n_kv) - 21;
      int32_t at = gap(g);
      const int n = n_ranges(g);
      for (int i = 0; i < n; ++i) {
        const int32_t w = kWidths[(i + b) % kNw];
        if (at + w > end_range) break;
        hi.ranges.push_back({at, at + w});
        at += w + gap(g);
      }
      if (b % 2) hi.ranges.push_back({end_range, int32_t(sh.n_kv)});
      hi.end_block();
    }
  return idx;
}
TEST(SparseAttnSmall, RangeTailsPackedAtTheirBoundaries) {
  LC_REQUIRE_GPU();
  auto g = gen();
  const Shape sh{320, 4000, 3680, 4, 2};
  check(sh, tail_packing_index(sh, g), "tail-packing");
}

// HiP's prefill index (hip_estimate.h): sinks [0, 16), up to 150 selected blocks of 2 keys
// (adjacent ones merge into 4- or 6-key ranges) before key_end, the window [key_end, end), and a
// few columns: the tails go to gathered tiles (several per block: one in flight while the next is
// issued; columns share the last), also with every tail gathered (kSparsePackMax) and none (0).
SparseIndex hip_index(const Shape& sh, std::mt19937_64& g) {
  constexpr int32_t kSinks = 16, kWindow = 256, kBk = 2;
  std::uniform_int_distribution<int> n_blocks(1, 150), n_cols(0, 5);
  SparseIndex idx;
  idx.n_q = sh.n_q;
  idx.heads.resize(size_t(sh.n_head));
  for (auto& hi : idx.heads)
    for (int64_t b = 0; b < n_query_blocks(sh.n_q); ++b) {
      const int32_t first = int32_t(sh.q_pos0 + b * kSparseQBlock), key_end = first - kWindow + 1;
      const int32_t end = int32_t(std::min<int64_t>(first + kSparseQBlock, sh.n_kv));
      hi.ranges.push_back({0, kSinks});
      std::vector<int32_t> blocks;
      std::uniform_int_distribution<int32_t> pick(kSinks / kBk, key_end / kBk - 1);
      for (int i = n_blocks(g); i > 0; --i) blocks.push_back(pick(g));
      std::sort(blocks.begin(), blocks.end());
      blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
      for (int32_t blk : blocks) hi.ranges.push_back({blk * kBk, blk * kBk + kBk});
      hi.ranges.push_back({key_end, end});
      std::uniform_int_distribution<int32_t> col(0, end - 1);
      std::vector<int32_t> cs;
      for (int i = n_cols(g); i > 0; --i) cs.push_back(col(g));
      std::sort(cs.begin(), cs.end());
      for (int32_t c : cs) hi.cols.push_back(c);
      hi.end_block();
    }
  return idx;
}
TEST(SparseAttnSmall, HipBlocksOfTwoKeysGathered) {
  LC_REQUIRE_GPU();
  auto g = gen();
  const Shape sh{448, 3400, 2952, 4, 2};
  const SparseIndex idx = hip_index(sh, g);
  check(sh, idx, "hip-2-key-blocks");
  check(sh, idx, "hip-2-key-blocks/all-gathered", {.tail_gather_max = kSparsePackMax});
  check(sh, idx, "hip-2-key-blocks/segments", {.tail_gather_max = 0});
}

// HiP's index at the paper's size: sinks, k / b_k = 256 distinct 2-key blocks (512 keys: 8 full
// gathered tiles, more than the 3-stage ring holds, so the producer has gathered tiles in flight
// in every stage at once), the window; with `with_ranges`, longer ranges (a whole 64-key range
// tile plus a packed tail) among the blocks, so gathered and TMA tiles alternate in the ring's
// stages while a gather tile is part filled.
SparseIndex hip_paper_index(const Shape& sh, std::mt19937_64& g, bool with_ranges) {
  constexpr int32_t kSinks = 16, kWindow = 256, kBk = 2, kBlocks = 256, kLong = 100;
  SparseIndex idx;
  idx.n_q = sh.n_q;
  idx.heads.resize(size_t(sh.n_head));
  for (auto& hi : idx.heads)
    for (int64_t b = 0; b < n_query_blocks(sh.n_q); ++b) {
      const int32_t first = int32_t(sh.q_pos0 + b * kSparseQBlock), key_end = first - kWindow + 1;
      const int32_t end = int32_t(std::min<int64_t>(first + kSparseQBlock, sh.n_kv));
      std::vector<int32_t> all;
      for (int32_t blk = kSinks / kBk; blk < key_end / kBk; ++blk) all.push_back(blk);
      std::shuffle(all.begin(), all.end(), g);
      all.resize(std::min<size_t>(all.size(), kBlocks));
      std::sort(all.begin(), all.end());
      hi.ranges.push_back({0, kSinks});
      for (size_t i = 0; i < all.size(); ++i) {
        hi.ranges.push_back({all[i] * kBk, all[i] * kBk + kBk});
        if (with_ranges && i % 64 == 32 && all[i] * kBk + kLong < key_end)
          hi.ranges.push_back({all[i] * kBk, all[i] * kBk + kLong});  // overlaps blocks: merged by the plan
      }
      hi.ranges.push_back({key_end, end});
      hi.end_block();
    }
  return idx;
}
TEST(SparseAttnSmall, HipPaperIndexGatherRingFull) {
  LC_REQUIRE_GPU();
  auto g = gen();
  for (const RunOpts& run :
       {RunOpts{}, RunOpts{.fp8 = true}, RunOpts{.head_dim = 256}, RunOpts{.head_dim = 256, .fp8 = true}}) {
    const Shape sh{512, 4096, 3584, 4, 2};
    check(sh, hip_paper_index(sh, g, false), "hip-paper-256-blocks", run);
    check(sh, hip_paper_index(sh, g, true), "hip-paper-256-blocks/with-ranges", run);
  }
}

// The kernel's task order (sparse_attention_sm90.cu task_of): more query blocks than one order
// chunk (the last chunk partial), a KV group of 5 heads (pairs cross KV groups, the last group of
// pairs partial), and an odd head count (the last pair has one head).
TEST(SparseAttn, TaskOrderOddShapes) {
  LC_REQUIRE_GPU();
  auto g = gen();
  const Shape sh{4170, 4170, 0, 10, 2};
  check(sh, random_index(sh, 10, 0.3, g), "order/10-heads-group-5");
  const Shape sh2{2100, 2300, 200, 5, 1};
  check(sh2, random_index(sh2, 5, 0.2, g), "order/5-heads");
}

TEST(SparseAttn, LongerRandom) {
  LC_REQUIRE_GPU();
  auto g = gen();
  const Shape sh{1100, 4100, 3000, 4, 1};
  check(sh, random_index(sh, 4, 0.05, g), "random/4K");
}

// ---- head_dim 256 (the same index cases; GQA 4:1 and 8:1) ------------------------------------
constexpr RunOpts kD256{.head_dim = 256};
constexpr RunOpts kD256Stages2{.head_dim = 256, .stages = 2};

TEST(SparseAttnSmallD256, RandomIndexGqa4And8) {
  LC_REQUIRE_GPU();
  auto g = gen();
  const Shape sh{300, 700, 400, 8, 2};  // 4:1, index per query head
  check(sh, random_index(sh, 8, 0.1, g), "random/per-q-head/4:1", kD256);
  const Shape sh8{260, 900, 640, 8, 1};  // 8:1, index per query head, then shared
  check(sh8, random_index(sh8, 8, 0.1, g), "random/per-q-head/8:1", kD256);
  check(sh8, random_index(sh8, 1, 0.1, g), "random/shared/8:1", kD256Stages2);
  const Shape sh2{191, 900, 709, 6, 3};
  check(sh2, random_index(sh2, 3, 0.2, g), "random/per-kv-head", kD256);
}

TEST(SparseAttnSmallD256, DenseEmptyAndNonCausal) {
  LC_REQUIRE_GPU();
  auto g = gen();
  const Shape sh{333, 333, 0, 4, 1};
  check(sh, uniform_index(sh, 1, false), "all-ranges", kD256);
  check(sh, uniform_index(sh, 1, true), "all-columns", kD256);
  check(sh, uniform_index(sh, 1, true), "all-columns/2-stages", kD256Stages2);
  const Shape sh2{130, 500, 370, 2, 2};
  check(sh2, uniform_index(sh2, 2, true), "all-columns/chunk", kD256);
  const Shape se{200, 200, 0, 2, 1};
  check(se, random_index(se, 2, 1.0, g), "all-empty", kD256);
  check(se, last_row_column_index(se), "last-row-column", kD256);
  Shape nc{150, 410, 0, 4, 4};
  nc.causal = false;
  check(nc, random_index(nc, 4, 0.1, g), "non-causal", kD256);
}

TEST(SparseAttnSmallD256, ManyShortRangesAndTailPacking) {
  LC_REQUIRE_GPU();
  auto g = gen();
  const Shape sh{320, 2600, 2280, 4, 2};
  check(sh, many_short(sh, 4, g), "many-short-ranges", kD256);
  check(sh, many_short(sh, 4, g), "many-short-ranges/2-stages", kD256Stages2);
  const Shape st{320, 4000, 3680, 4, 2};
  check(st, tail_packing_index(st, g), "tail-packing", kD256);
}

// Gemma-3-270m's global layers (4 query heads, 1 KV head) under HiP's index.
TEST(SparseAttnSmallD256, HipBlocksOfTwoKeysGathered) {
  LC_REQUIRE_GPU();
  auto g = gen();
  const Shape sh{448, 3400, 2952, 4, 1};
  const SparseIndex idx = hip_index(sh, g);
  check(sh, idx, "hip-2-key-blocks", kD256);
  check(sh, idx, "hip-2-key-blocks/2-stages", kD256Stages2);
  check(sh, idx, "hip-2-key-blocks/all-gathered", {.head_dim = 256, .tail_gather_max = kSparsePackMax});
  check(sh, idx, "hip-2-key-blocks/segments", {.head_dim = 256, .tail_gather_max = 0});
}

TEST(SparseAttnD256, TaskOrderOddShapesAndLonger) {
  LC_REQUIRE_GPU();
  auto g = gen();
  const Shape sh{4170, 4170, 0, 10, 2};
  check(sh, random_index(sh, 10, 0.3, g), "order/10-heads-group-5", kD256);
  const Shape sh2{2100, 2300, 200, 5, 1};
  check(sh2, random_index(sh2, 5, 0.2, g), "order/5-heads", kD256Stages2);
  const Shape sh3{1100, 4100, 3000, 4, 1};
  check(sh3, random_index(sh3, 4, 0.05, g), "random/4K", kD256);
}

// Bad input is refused before any work: a ring depth the head dim cannot take, and fp8 K/V
// tiles with the 2-stage ring (built with 3 only).
TEST(SparseAttnSmallD256, RefusesUnsupportedStages) {
  LC_REQUIRE_GPU();
  SparseAttnParams p;
  p.head_dim = 128;
  p.sm90_stages = 2;
  EXPECT_THROW(sparse_attention_run(p), Error);
  p.head_dim = 256;
  p.kv_dtype = KvDtype::fp8_e4m3;
  try {
    sparse_attention_run(p);
    ADD_FAILURE() << "fp8 with 2 stages accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3-stage ring"), std::string::npos) << e.what();
  }
}

// ---- fp8 e4m3 K/V tiles (kv_dtype fp8_e4m3): the same index cases, d 128 and 256 ------------
// The oracle attends over the dequantized K/V (code * scale), so the tolerance is the bf16
// cases': the kernel's math is f16 on exact e4m3 values. Range tiles (TMA of byte tiles), packed
// 16-key segments, gathered tails and columns (cp.async), causal edges, ragged n_kv and the
// q_pos0 > 0 chunks, GQA 4:1 / 8:1 / shared indices, HiP's 2-key blocks.
constexpr RunOpts kFp8{.fp8 = true};
constexpr RunOpts kFp8D256{.head_dim = 256, .fp8 = true};

TEST(SparseAttnSmallFp8, RandomIndexGqaDenseEmptyNonCausal) {
  LC_REQUIRE_GPU();
  auto g = gen();
  for (const RunOpts& run : {kFp8, kFp8D256}) {
    const Shape sh{300, 700, 400, 8, 2};
    check(sh, random_index(sh, 8, 0.1, g), "fp8/random/per-q-head", run);
    const Shape sh8{260, 900, 640, 8, 1};
    check(sh8, random_index(sh8, 1, 0.1, g), "fp8/random/shared/8:1", run);
    const Shape sh2{191, 900, 709, 6, 3};
    check(sh2, random_index(sh2, 3, 0.2, g), "fp8/random/per-kv-head", run);
    const Shape sd{333, 333, 0, 4, 1};
    check(sd, uniform_index(sd, 1, false), "fp8/all-ranges", run);
    check(sd, uniform_index(sd, 1, true), "fp8/all-columns", run);
    const Shape sc{130, 500, 370, 2, 2};
    check(sc, uniform_index(sc, 2, true), "fp8/all-columns/chunk", run);
    const Shape se{200, 200, 0, 2, 1};
    check(se, random_index(se, 2, 1.0, g), "fp8/all-empty", run);
    check(se, last_row_column_index(se), "fp8/last-row-column", run);
    Shape nc{150, 410, 0, 4, 4};
    nc.causal = false;
    check(nc, random_index(nc, 4, 0.1, g), "fp8/non-causal", run);
  }
}

TEST(SparseAttnSmallFp8, ShortRangesTailPackingAndHip) {
  LC_REQUIRE_GPU();
  auto g = gen();
  for (RunOpts run : {kFp8, kFp8D256}) {
    const Shape sh{320, 2600, 2280, 4, 2};
    check(sh, many_short(sh, 4, g), "fp8/many-short-ranges", run);
    const Shape st{320, 4000, 3680, 4, 2};
    check(st, tail_packing_index(st, g), "fp8/tail-packing", run);
    const Shape sp{448, 3400, 2952, 4, run.head_dim == 256 ? 1 : 2};
    const SparseIndex idx = hip_index(sp, g);
    check(sp, idx, "fp8/hip-2-key-blocks", run);
    run.tail_gather_max = kSparsePackMax;
    check(sp, idx, "fp8/hip-2-key-blocks/all-gathered", run);
    run.tail_gather_max = 0;
    check(sp, idx, "fp8/hip-2-key-blocks/segments", run);
  }
}

TEST(SparseAttnFp8, TaskOrderOddShapesAndLonger) {
  LC_REQUIRE_GPU();
  auto g = gen();
  for (const RunOpts& run : {kFp8, kFp8D256}) {
    const Shape sh{2100, 2300, 200, 10, 2};  // pairs across KV groups, the last order chunk partial
    check(sh, random_index(sh, 10, 0.3, g), "fp8/order/10-heads-group-5", run);
    const Shape sh3{1100, 4100, 3000, 4, 1};
    check(sh3, random_index(sh3, 4, 0.05, g), "fp8/random/4K", run);
  }
}

}  // namespace
}  // namespace longctx::cuda::test

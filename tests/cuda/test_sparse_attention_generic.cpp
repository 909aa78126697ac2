// test_sparse_attention_generic.cpp (tests/cuda): the generic (sm_80+, head_dim 64/128/256) sparse
// attention kernel (kernels/cuda/sparse_attention_generic.h) as "dense reference with the same
// mask": an fp64 CPU oracle that attends, per row, exactly the keys in (union of the block's
// ranges and columns) and causal; fresh random bf16 inputs per run (seed printed by test_util.h).
// Every case runs for head_dim 64, 128 and 256 (Gemma 3's global layers); the SparseGenericFp8
// cases run the same oracle with e4m3 K/V tiles (kv_dtype fp8_e4m3) over the dequantized K/V.
// Index cases: random (overlapping ranges, ends past n_kv, duplicate columns, columns inside
// ranges or past the causal frontier); adversarial ranges (touching, nested, identical,
// zero-length, starting at/after n_kv, merges across the plan's 32-range warp chunks) and
// columns (long runs of one repeated column, columns at range starts/ends, inside ranges);
// empty blocks and rows (O = 0, LSE = -inf), everything selected (as ranges, as columns, both);
// the last partial query block, q_pos0 > 0 chunks, GQA 9/3 (SmolLM2) and 4/1 with index heads
// per query head, per KV head and shared; non-causal (also n_q > n_kv); a custom scale; the
// Hopper kernel on the same index (head_dim 128, sm_90 only); bad arguments rejected; and at
// SmolLM2 geometry (9/3 heads, d 64) at 8K and 32K: everything selected vs the dense FA2 prefill
// kernel, with times per call for dense and vertical-slash-like indices (printed).
// Run: build-generic/tests/cuda/test_cuda --gtest_filter='SparseGeneric*' (skips below sm_80).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/sparse_attention.h"
#include "kernels/cuda/sparse_attention_generic.h"
#include "sparse/sparse_index.h"
#include "sparse_test_util.h"
#include "test_util.h"

namespace longctx::cuda::test {
namespace {

#define LC_REQUIRE_SM80()                                                                   \
  do {                                                                                      \
    if (::longctx::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";             \
    const auto lc_info_ = ::longctx::cuda::device_info(0);                                 \
    if (lc_info_.sm_major < 8) GTEST_SKIP() << "below sm_80: " << lc_info_.name;            \
  } while (0)

bool is_hopper() { return device_count() > 0 && device_info(0).sm_major == 9; }

// Random bf16 Q/K/V on host (as doubles) and device. fp8: K ~ N(0, 2^2) and V ~ N(0, 0.5^2)
// (distinct scales) quantized to e4m3 (sparse_test_util.h quantize_e4m3); the device gets the
// codes and kd / vd the dequantized values the oracle reads.
struct Inputs {
  int D;
  bool fp8;
  float k_scale = 1.f, v_scale = 1.f;
  std::vector<double> qd, kd, vd;
  std::vector<uint16_t> qh, kh, vh;
  DevBuf q, k, v;
  Inputs(const Shape& sh, int d, bool fp8_kv = false)
      : D(d),
        fp8(fp8_kv),
        qh(random_bf16(size_t(sh.n_q) * sh.n_head * d, 1.0, qd)),
        kh(random_bf16(size_t(sh.n_kv) * sh.n_kv_head * d, fp8_kv ? 2.0 : 1.0, kd)),
        vh(random_bf16(size_t(sh.n_kv) * sh.n_kv_head * d, fp8_kv ? 0.5 : 1.0, vd)),
        q(qh.size() * 2),
        k(kh.size() * 2),
        v(vh.size() * 2) {
    q.upload(qh);
    if (!fp8) {
      k.upload(kh);
      v.upload(vh);
      return;
    }
    auto to_fp8 = [](std::vector<double>& vals, DevBuf& buf, float& scale) {
      const Fp8Tensor t = quantize_e4m3(std::vector<float>(vals.begin(), vals.end()));
      buf.upload(t.codes);
      vals.assign(t.dequant.begin(), t.dequant.end());
      scale = t.scale;
    };
    to_fp8(kd, k, k_scale);
    to_fp8(vd, v, v_scale);
  }
};

SparseAttnParams make_params(const Shape& sh, const Inputs& in, const DevIndex& di, void* o, float* lse) {
  SparseAttnParams p;
  p.q = in.q.p;
  p.k = in.k.p;
  p.v = in.v.p;
  p.o = o;
  p.lse = lse;
  p.n_q = sh.n_q;
  p.n_kv = sh.n_kv;
  p.n_head = sh.n_head;
  p.n_kv_head = sh.n_kv_head;
  p.head_dim = in.D;
  p.q_pos0 = sh.q_pos0;
  p.causal = sh.causal;
  p.index = di.ix;
  if (in.fp8) {
    p.kv_dtype = KvDtype::fp8_e4m3;
    p.k_scale = in.k_scale;
    p.v_scale = in.v_scale;
  }
  return p;
}

struct Outputs {
  std::vector<double> o, lse;  // oracle order: (head, row, dim) and (head, row)
};

// Runs the generic kernel (or the Hopper one) into fresh poisoned buffers; outputs in the
// oracle's order.
Outputs run_kernel(const Shape& sh, const Inputs& in, const DevIndex& di, float scale, bool hopper) {
  const int D = in.D;
  DevBuf o(in.qh.size() * 2), lse(size_t(sh.n_q) * sh.n_head * 4);
  o.poison();
  lse.poison();
  SparseAttnParams p = make_params(sh, in, di, o.p, lse.as<float>());
  p.scale = scale;
  const size_t ws_bytes = hopper ? sparse_attention_workspace_bytes(di.ix) : sparse_attention_generic_workspace_bytes(di.ix);
  DevBuf ws(ws_bytes);
  ws.poison();
  p.workspace = ws.p;
  p.workspace_bytes = ws.bytes;
  if (hopper)
    sparse_attention(p);
  else
    sparse_attention_generic(p);
  device_sync();
  const auto oh = o.download<uint16_t>(in.qh.size());
  const auto lh = lse.download<float>(size_t(sh.n_q) * sh.n_head);
  Outputs r;
  for (int h = 0; h < sh.n_head; ++h)
    for (int64_t i = 0; i < sh.n_q; ++i) {
      for (int d = 0; d < D; ++d) r.o.push_back(bf16_to_f32(oh[(size_t(i) * sh.n_head + h) * D + d]));
      r.lse.push_back(lh[size_t(h) * sh.n_q + i]);
    }
  return r;
}

// fp64 oracle with the index's boolean mask (union of ranges and columns, causal on top).
Outputs oracle(const Shape& sh, const Inputs& in, const SparseIndex& idx, float scale_in) {
  const int D = in.D;
  const double scale = scale_in > 0.f ? double(scale_in) : 1.0 / std::sqrt(double(D));
  const int group = sh.n_head / sh.n_kv_head, hpi = sh.n_head / int(idx.heads.size());
  Outputs r;
  std::vector<char> mask(size_t(sh.n_kv));
  std::vector<double> sc(static_cast<size_t>(sh.n_kv)), acc(static_cast<size_t>(D));
  for (int h = 0; h < sh.n_head; ++h) {
    const HeadIndex& hi = idx.heads[size_t(h / hpi)];
    const int kvh = h / group;
    for (int64_t i = 0; i < sh.n_q; ++i) {
      const int64_t b = i / kSparseBlockQ;
      std::fill(mask.begin(), mask.end(), 0);
      for (const auto& rg : hi.block_ranges(b))
        for (int64_t j = std::max<int64_t>(rg.start, 0); j < std::min<int64_t>(rg.end, sh.n_kv); ++j) mask[j] = 1;
      for (int32_t c : hi.block_cols(b)) mask[size_t(c)] = 1;
      double mx = -INFINITY;
      const double* qr = &in.qd[(size_t(i) * sh.n_head + h) * D];
      for (int64_t j = 0; j < sh.n_kv; ++j) {
        if (sh.causal && j > sh.q_pos0 + i) mask[j] = 0;
        if (!mask[j]) continue;
        double s = 0;
        const double* kr = &in.kd[(size_t(j) * sh.n_kv_head + kvh) * D];
        for (int d = 0; d < D; ++d) s += qr[d] * kr[d];
        sc[j] = s * scale;
        mx = std::max(mx, sc[j]);
      }
      double l = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < sh.n_kv; ++j) {
        if (!mask[j]) continue;
        const double pj = std::exp(sc[j] - mx);
        l += pj;
        const double* vr = &in.vd[(size_t(j) * sh.n_kv_head + kvh) * D];
        for (int d = 0; d < D; ++d) acc[d] += pj * vr[d];
      }
      for (int d = 0; d < D; ++d) r.o.push_back(l > 0 ? acc[d] / l : 0.0);
      r.lse.push_back(l > 0 ? mx + std::log(l) : -INFINITY);
    }
  }
  return r;
}

void expect_close(const Outputs& got, const Outputs& ref, double vmax, const char* what, const char* vs) {
  const auto eo = compare(got.o, ref.o, 5e-3 * vmax, 1e-2);
  const auto el = compare(got.lse, ref.lse, 2e-3, 1e-5);
  std::printf("    %-6s O %s | LSE %s\n", vs, eo.str().c_str(), el.str().c_str());
  EXPECT_EQ(eo.n_bad, 0) << what << " vs " << vs << ": " << eo.str();
  EXPECT_EQ(eo.n_nan, 0) << what << " vs " << vs;
  EXPECT_LT(eo.rel_l2, 1e-2) << what << " vs " << vs << ": " << eo.str();
  EXPECT_EQ(el.n_bad, 0) << what << " vs " << vs << ": " << el.str();
  EXPECT_EQ(el.n_nan, 0) << what << " vs " << vs;
}

// Runs the generic kernel on idx with fresh inputs, checks O and LSE against the fp64 oracle
// (and, with vs_hopper on an sm_90 GPU and D = 128, against the Hopper kernel on the same index).
// fp8: e4m3 K/V (Inputs), judged against the oracle over the dequantized K/V.
void check(const Shape& sh, int D, const SparseIndex& idx, const char* what, float scale = 0.f,
           bool vs_hopper = false, bool fp8 = false) {
  ASSERT_EQ(idx.n_q, sh.n_q) << what;
  const Inputs in(sh, D, fp8);
  const DevIndex di(idx, sh.n_q);
  std::printf("  generic d=%-3d %-30s n_q=%lld n_kv=%lld q_pos0=%lld heads=%d/%d idx_heads=%zu%s%s\n", D, what,
              (long long)sh.n_q, (long long)sh.n_kv, (long long)sh.q_pos0, sh.n_head, sh.n_kv_head, idx.heads.size(),
              sh.causal ? "" : " non-causal", fp8 ? " fp8-kv" : "");
  const Outputs got = run_kernel(sh, in, di, scale, false);
  const Outputs ref = oracle(sh, in, idx, scale);
  const double vmax = max_abs(in.vd);
  expect_close(got, ref, vmax, what, "oracle");
  if (vs_hopper && D == 128 && is_hopper()) {
    const Outputs hop = run_kernel(sh, in, di, scale, true);
    expect_close(hop, ref, vmax, what, "h-orac");  // the Hopper kernel vs the oracle
    expect_close(got, hop, vmax, what, "hopper");  // generic vs Hopper
  }
}


// Everything selected: as one range, as every column, or both (every column also inside the
// range, each column twice).
enum class AllAs { ranges, columns, both };
SparseIndex uniform_index(const Shape& sh, int n_index_head, AllAs how) {
  SparseIndex idx;
  idx.n_q = sh.n_q;
  idx.heads.resize(size_t(n_index_head));
  for (auto& hi : idx.heads)
    for (int64_t b = 0; b < n_query_blocks(sh.n_q); ++b) {
      if (how != AllAs::columns) hi.ranges.push_back({0, int32_t(sh.n_kv)});
      if (how != AllAs::ranges)
        for (int32_t j = 0; j < sh.n_kv; ++j) {
          hi.cols.push_back(j);
          if (how == AllAs::both) hi.cols.push_back(j);
        }
      hi.end_block();
    }
  return idx;
}

// Adversarial lists per block (varying with the block and head so blocks differ):
//  ranges: touching chains, nested, identical duplicates, zero-length, one starting at n_kv and
//  one past it, one ending far past n_kv, and a run of 70 overlapping short ranges (merges that
//  cross the plan's 32-range warp chunks);
//  columns: 70 copies of one column, columns at range starts, ends - 1 and ends (the first
//  outside), columns inside ranges, the last key, key 0.
SparseIndex adversarial_index(const Shape& sh, int n_index_head, std::mt19937_64& g) {
  SparseIndex idx;
  idx.n_q = sh.n_q;
  idx.heads.resize(size_t(n_index_head));
  const int32_t n = int32_t(sh.n_kv);
  std::uniform_int_distribution<int32_t> key(0, n - 1);
  for (auto& hi : idx.heads)
    for (int64_t b = 0; b < n_query_blocks(sh.n_q); ++b) {
      std::vector<KeyRange> rs;
      const int32_t a = key(g) / 2;
      rs.push_back({a, a + 10});  // touching chain a .. a+30
      rs.push_back({a + 10, a + 20});
      rs.push_back({a + 20, a + 30});
      rs.push_back({a + 2, a + 5});  // nested
      rs.push_back({a + 2, a + 5});  // identical
      rs.push_back({a + 31, a + 31});  // zero-length, just past the chain (not touching it: gap at a+30)
      const int32_t c0 = key(g);
      for (int i = 0; i < 70; ++i) rs.push_back({c0 + 3 * i, c0 + 3 * i + 4});  // one merged range of 211 keys
      rs.push_back({n - 5, n + 1000});  // past n_kv
      rs.push_back({n, n + 64});        // starts at n_kv: empty
      rs.push_back({n + 10, n + 20});   // starts past n_kv: empty
      for (auto& r : rs) r.end = std::max(r.end, r.start);
      std::stable_sort(rs.begin(), rs.end(), [](auto& x, auto& y) { return x.start < y.start; });
      for (auto& r : rs) hi.ranges.push_back(r);
      std::vector<int32_t> cs;
      const int32_t rep = key(g);
      for (int i = 0; i < 70; ++i) cs.push_back(rep);
      for (int32_t c : {a, a + 29, a + 30, a + 31, a + 3, c0, c0 + 100, c0 + 210, c0 + 211, c0 + 212, 0, n - 1,
                        n - 6, n - 5})
        if (c >= 0 && c < n) cs.push_back(c);
      for (int i = 0; i < 40; ++i) cs.push_back(key(g));
      std::sort(cs.begin(), cs.end());
      for (int32_t c : cs) hi.cols.push_back(c);
      hi.end_block();
    }
  return idx;
}

TEST(SparseGeneric, RandomGqaSmolLM2Heads) {
  LC_REQUIRE_SM80();
  auto g = gen();
  const Shape sh{300, 700, 400, 9, 3};
  for (int D : {64, 128, 256}) {
    check(sh, D, random_index(sh, 9, 0.1, g), "random/9-3/per-q-head");
    check(sh, D, random_index(sh, 3, 0.1, g), "random/9-3/per-kv-head");
    check(sh, D, random_index(sh, 1, 0.1, g), "random/9-3/shared");
  }
}

TEST(SparseGeneric, RandomGqa4to1) {
  LC_REQUIRE_SM80();
  auto g = gen();
  const Shape sh{256, 256, 0, 4, 1};
  const Shape sh2{191, 900, 709, 4, 1};  // last block partial, chunk at q_pos0 709
  for (int D : {64, 128, 256}) {
    check(sh, D, random_index(sh, 4, 0.0, g), "random/4-1/per-q-head");
    check(sh, D, random_index(sh, 2, 0.0, g), "random/4-1/2-index-heads");
    check(sh2, D, random_index(sh2, 1, 0.2, g), "random/4-1/shared/chunk");
  }
}

TEST(SparseGeneric, EverythingSelectedIsDense) {
  LC_REQUIRE_SM80();
  const Shape sh{333, 333, 0, 4, 1};
  const Shape sh2{130, 500, 370, 9, 3};
  for (int D : {64, 128, 256}) {
    check(sh, D, uniform_index(sh, 1, AllAs::ranges), "all-ranges");
    check(sh, D, uniform_index(sh, 1, AllAs::columns), "all-columns");
    check(sh, D, uniform_index(sh, 1, AllAs::both), "all-both-columns-twice");
    check(sh2, D, uniform_index(sh2, 3, AllAs::columns), "all-columns/chunk");
    check(sh2, D, uniform_index(sh2, 9, AllAs::both), "all-both/chunk");
  }
}

TEST(SparseGeneric, EmptyRowsAndBlocks) {
  LC_REQUIRE_SM80();
  auto g = gen();
  const Shape sh{200, 200, 0, 2, 1};
  for (int D : {64, 128, 256}) {
    check(sh, D, random_index(sh, 2, 1.0, g), "all-empty");
    // Only a column at the block's last row: earlier rows of the block have nothing (causal).
    SparseIndex one;
    one.n_q = sh.n_q;
    one.heads.resize(1);
    for (int64_t b = 0; b < n_query_blocks(sh.n_q); ++b) {
      one.heads[0].cols.push_back(int32_t(std::min<int64_t>(64 * b + 63, sh.n_q - 1)));
      one.heads[0].end_block();
    }
    check(sh, D, one, "last-row-column");
    // Everything after the block's causal frontier: all rows empty.
    SparseIndex fut;
    fut.n_q = sh.n_q;
    fut.heads.resize(2);
    for (auto& hi : fut.heads)
      for (int64_t b = 0; b < n_query_blocks(sh.n_q); ++b) {
        const int32_t f = int32_t(std::min<int64_t>(64 * b + 64, sh.n_q));
        if (f < sh.n_kv) {
          hi.ranges.push_back({f, f + 70});
          hi.cols.push_back(f);
          hi.cols.push_back(int32_t(sh.n_kv - 1));
        }
        hi.end_block();
      }
    check(sh, D, fut, "all-in-the-future");
    check(sh, D, random_index(sh, 2, 0.5, g), "half-empty");
  }
}

TEST(SparseGeneric, AdversarialLists) {
  LC_REQUIRE_SM80();
  auto g = gen();
  const Shape sh{300, 1500, 1200, 9, 3};
  const Shape sh2{129, 600, 0, 4, 1};  // q_pos0 0: ranges and columns reach past the causal frontier
  for (int D : {64, 128, 256}) {
    check(sh, D, adversarial_index(sh, 9, g), "adversarial/9-3/chunk");
    check(sh2, D, adversarial_index(sh2, 4, g), "adversarial/4-1");
  }
}

TEST(SparseGeneric, NonCausal) {
  LC_REQUIRE_SM80();
  auto g = gen();
  Shape sh{150, 410, 0, 4, 4};
  sh.causal = false;
  Shape sh2{200, 130, 0, 9, 3};  // more queries than keys
  sh2.causal = false;
  for (int D : {64, 128, 256}) {
    check(sh, D, random_index(sh, 4, 0.1, g), "non-causal");
    check(sh2, D, adversarial_index(sh2, 3, g), "non-causal/adversarial");
  }
}

TEST(SparseGeneric, CustomScale) {
  LC_REQUIRE_SM80();
  auto g = gen();
  const Shape sh{260, 600, 340, 4, 2};
  for (int D : {64, 128, 256}) check(sh, D, random_index(sh, 4, 0.05, g), "random/scale-0.3", 0.3f);
}


TEST(SparseGeneric, ManyShortRangesAndColumns) {
  LC_REQUIRE_SM80();
  auto g = gen();
  const Shape sh{320, 2600, 2280, 4, 2};
  for (int D : {64, 128, 256}) check(sh, D, many_short(sh, 4, g), "many-short-ranges");
}

TEST(SparseGeneric, LongerRandom) {
  LC_REQUIRE_SM80();
  auto g = gen();
  const Shape sh{1100, 4100, 3000, 9, 3};
  check(sh, 64, random_index(sh, 9, 0.05, g), "random/4K/9-3");
  const Shape sh2{1100, 4100, 3000, 4, 1};
  check(sh2, 128, random_index(sh2, 4, 0.05, g), "random/4K/4-1");
  const Shape sh3{1100, 4100, 3000, 16, 8};  // Gemma 3 12B's heads
  check(sh3, 256, random_index(sh3, 8, 0.05, g), "random/4K/16-8");
}

// The Hopper kernel (sparse_attention.h, head_dim 128) on the same index and inputs: both vs the
// oracle and vs each other.
TEST(SparseGeneric, MatchesHopperKernel) {
  LC_REQUIRE_SM80();
  if (!is_hopper()) GTEST_SKIP() << "the Hopper sparse kernel needs sm_90";
  auto g = gen();
  const Shape sh{1100, 4100, 3000, 8, 2};
  check(sh, 128, random_index(sh, 8, 0.05, g), "vs-hopper/random", 0.f, true);
  const Shape sh2{320, 2600, 2280, 4, 2};
  check(sh2, 128, many_short(sh2, 4, g), "vs-hopper/many-short", 0.f, true);
  const Shape sh3{300, 1500, 1200, 9, 3};
  check(sh3, 128, adversarial_index(sh3, 9, g), "vs-hopper/adversarial", 0.f, true);
}

TEST(SparseGeneric, RejectsBadArguments) {
  LC_REQUIRE_SM80();
  const Shape sh{100, 100, 0, 2, 1};
  const SparseIndex idx = uniform_index(sh, 1, AllAs::ranges);
  const Inputs in(sh, 64);
  const DevIndex di(idx, sh.n_q);
  DevBuf o(in.qh.size() * 2);
  DevBuf ws(sparse_attention_generic_workspace_bytes(di.ix));
  SparseAttnParams p = make_params(sh, in, di, o.p, nullptr);
  p.workspace = ws.p;
  p.workspace_bytes = ws.bytes;
  EXPECT_NO_THROW(sparse_attention_generic(p));
  device_sync();
  SparseAttnParams bad = p;
  bad.head_dim = 96;
  EXPECT_ANY_THROW(sparse_attention_generic(bad));
  bad = p;
  bad.workspace_bytes = ws.bytes - 1;
  EXPECT_ANY_THROW(sparse_attention_generic(bad));
  bad = p;
  bad.index.n_qblk += 1;
  EXPECT_ANY_THROW(sparse_attention_generic(bad));
  bad = p;
  bad.n_kv_head = 3;  // n_head 2 is not a multiple
  EXPECT_ANY_THROW(sparse_attention_generic(bad));
  bad = p;
  bad.index.n_index_head = 3;
  EXPECT_ANY_THROW(sparse_attention_generic(bad));
  bad = p;
  bad.q_pos0 = 1;  // causal queries past the last key
  EXPECT_ANY_THROW(sparse_attention_generic(bad));
  // The Hopper kernel's workspace is enough for the generic kernel (same layout).
  EXPECT_LE(sparse_attention_generic_workspace_bytes(di.ix), sparse_attention_workspace_bytes(di.ix));
}

// fp8 e4m3 K/V tiles (kv_dtype fp8_e4m3, k_scale / v_scale distinct): the oracle over the
// dequantized K/V with the same mask, for d 64/128/256: GQA 9/3 and 4/1, random ranges +
// columns, adversarial lists (causal edges, ends past n_kv), many short ranges (ragged tails),
// a partial last block in a q_pos0 > 0 chunk, everything selected, non-causal, a custom scale.
TEST(SparseGenericFp8, RandomGqa) {
  LC_REQUIRE_SM80();
  auto g = gen();
  const Shape sh{300, 700, 400, 9, 3};
  const Shape sh2{191, 900, 709, 4, 1};  // last block partial, chunk at q_pos0 709
  for (int D : {64, 128, 256}) {
    check(sh, D, random_index(sh, 9, 0.1, g), "fp8/random/9-3/per-q-head", 0.f, false, true);
    check(sh, D, random_index(sh, 3, 0.1, g), "fp8/random/9-3/per-kv-head", 0.f, false, true);
    check(sh2, D, random_index(sh2, 1, 0.2, g), "fp8/random/4-1/shared/chunk", 0.f, false, true);
  }
}

TEST(SparseGenericFp8, EdgesAndTails) {
  LC_REQUIRE_SM80();
  auto g = gen();
  const Shape sh{300, 1500, 1200, 9, 3};
  const Shape sh2{129, 600, 0, 4, 1};  // q_pos0 0: lists reach past the causal frontier
  const Shape sh3{320, 2600, 2280, 4, 2};
  const Shape sh4{130, 500, 370, 9, 3};
  for (int D : {64, 128, 256}) {
    check(sh, D, adversarial_index(sh, 9, g), "fp8/adversarial/9-3/chunk", 0.f, false, true);
    check(sh2, D, adversarial_index(sh2, 4, g), "fp8/adversarial/4-1", 0.f, false, true);
    check(sh3, D, many_short(sh3, 4, g), "fp8/many-short-ranges", 0.f, false, true);
    check(sh4, D, uniform_index(sh4, 9, AllAs::both), "fp8/all-both/chunk", 0.f, false, true);
  }
}

TEST(SparseGenericFp8, NonCausalAndScale) {
  LC_REQUIRE_SM80();
  auto g = gen();
  Shape sh{200, 130, 0, 9, 3};  // more queries than keys
  sh.causal = false;
  const Shape sh2{260, 600, 340, 4, 2};
  for (int D : {64, 128, 256}) {
    check(sh, D, adversarial_index(sh, 3, g), "fp8/non-causal/adversarial", 0.f, false, true);
    check(sh2, D, random_index(sh2, 4, 0.05, g), "fp8/random/scale-0.3", 0.3f, false, true);
  }
  const Shape sh3{1100, 4100, 3000, 9, 3};
  check(sh3, 64, random_index(sh3, 9, 0.05, g), "fp8/random/4K/9-3", 0.f, false, true);
}

// fp8 scales must be finite and > 0.
TEST(SparseGenericFp8, RejectsBadScales) {
  LC_REQUIRE_SM80();
  const Shape sh{100, 100, 0, 2, 1};
  const SparseIndex idx = uniform_index(sh, 1, AllAs::ranges);
  const Inputs in(sh, 64, true);
  const DevIndex di(idx, sh.n_q);
  DevBuf o(in.qh.size() * 2);
  DevBuf ws(sparse_attention_generic_workspace_bytes(di.ix));
  SparseAttnParams p = make_params(sh, in, di, o.p, nullptr);
  p.workspace = ws.p;
  p.workspace_bytes = ws.bytes;
  EXPECT_NO_THROW(sparse_attention_generic(p));
  device_sync();
  for (float bad_scale : {0.f, -1.f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    SparseAttnParams bad = p;
    bad.k_scale = bad_scale;
    EXPECT_ANY_THROW(sparse_attention_generic(bad)) << "k_scale " << bad_scale;
    bad = p;
    bad.v_scale = bad_scale;
    EXPECT_ANY_THROW(sparse_attention_generic(bad)) << "v_scale " << bad_scale;
  }
}

// SmolLM2-135M geometry (9 query / 3 KV heads, d 64, per-query-head index) at 8K and 32K,
// Llama-3.2-1B's (32 / 8, d 64) at 8K and Llama-3-8B's (32 / 8, d 128) at 16K: everything
// selected vs the dense FA2 prefill kernel, and times per call (plan + attention) for the dense
// index and a vertical-slash-like one (per block: the last 1024 keys, 16 slash ranges of 64 keys,
// 1000 vertical columns before the block: ~3K keys per block at the end), with bf16 and with fp8
// K/V tiles (printed side by side).
double time_ms(const std::function<void()>& f, int iters) {
  f();
  device_sync();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  device_sync();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
}

TEST(SparseGeneric, PerfSmolLM2Geometry) {
  LC_REQUIRE_SM80();
  auto g = gen();
  struct Geo {
    const char* name;
    int64_t n;
    int n_head, n_kv_head, d;
  };
  for (const Geo& geo : {Geo{"SmolLM2-135M", 8192, 9, 3, 64}, Geo{"SmolLM2-135M", 32768, 9, 3, 64},
                         Geo{"Llama-3.2-1B", 8192, 32, 8, 64}, Geo{"Llama-3-8B", 16384, 32, 8, 128}}) {
    const int64_t n = geo.n;
    const int H = geo.n_head, D = geo.d;
    const Shape sh{n, n, 0, H, geo.n_kv_head};
    const Inputs in(sh, D);
    const Inputs in8(sh, D, true);  // fp8 e4m3 K/V tiles (other random values: timing only)
    DevBuf o(in.qh.size() * 2), od(in.qh.size() * 2), lse(size_t(n) * H * 4), lsed(size_t(n) * H * 4);
    // dense FA2 reference
    PrefillParams pp;
    pp.q = in.q.p;
    pp.k = in.k.p;
    pp.v = in.v.p;
    pp.o = od.p;
    pp.lse = lsed.as<float>();
    pp.n_q = n;
    pp.n_kv = n;
    pp.n_head = H;
    pp.n_kv_head = geo.n_kv_head;
    pp.head_dim = D;
    pp.causal = true;
    pp.impl = PrefillImpl::fa2_mma_sync;
    const double t_dense = time_ms([&] { attention_prefill(pp); }, 10);

    const SparseIndex all = uniform_index(sh, H, AllAs::ranges);
    const DevIndex di(all, n);
    DevBuf ws(sparse_attention_generic_workspace_bytes(di.ix));
    SparseAttnParams p = make_params(sh, in, di, o.p, lse.as<float>());
    p.workspace = ws.p;
    p.workspace_bytes = ws.bytes;
    const double t_all = time_ms([&] { sparse_attention_generic(p); }, 10);
    const auto oh = o.download<uint16_t>(in.qh.size()), odh = od.download<uint16_t>(in.qh.size());
    const auto lh = lse.download<float>(size_t(n) * H), ldh = lsed.download<float>(size_t(n) * H);
    double max_o = 0, max_l = 0;
    for (size_t i = 0; i < oh.size(); ++i)
      max_o = std::max(max_o, double(std::fabs(bf16_to_f32(oh[i]) - bf16_to_f32(odh[i]))));
    for (size_t i = 0; i < lh.size(); ++i) max_l = std::max(max_l, double(std::fabs(lh[i] - ldh[i])));
    EXPECT_LT(max_o, 2e-2) << "all-selected vs dense FA2 at n=" << n;
    EXPECT_LT(max_l, 1e-3) << "all-selected vs dense FA2 at n=" << n;
    // fp8 tiles, timed after the bf16 result was read (they write the same o / lse)
    SparseAttnParams p8 = make_params(sh, in8, di, o.p, lse.as<float>());
    p8.workspace = ws.p;
    p8.workspace_bytes = ws.bytes;
    const double t_all8 = time_ms([&] { sparse_attention_generic(p8); }, 10);

    // vertical-slash-like index
    SparseIndex vs;
    vs.n_q = n;
    vs.heads.resize(size_t(H));
    std::uniform_int_distribution<int32_t> off(64, int32_t(n));
    int64_t keys = 0;
    for (auto& hi : vs.heads) {
      std::vector<int32_t> vert;
      std::uniform_int_distribution<int32_t> kd(0, int32_t(n) - 1);
      for (int i = 0; i < 1000; ++i) vert.push_back(kd(g));
      for (int i = 0; i < 30; ++i) vert.push_back(i);
      std::sort(vert.begin(), vert.end());
      vert.erase(std::unique(vert.begin(), vert.end()), vert.end());
      std::vector<int32_t> offs;
      for (int i = 0; i < 16; ++i) offs.push_back(off(g));
      for (int64_t b = 0; b < n_query_blocks(n); ++b) {
        const int32_t first = int32_t(64 * b), last = int32_t(std::min<int64_t>(64 * b + 63, n - 1));
        std::vector<KeyRange> rs{{std::max(0, first - 1023), last + 1}};
        for (int32_t o2 : offs)
          if (first - o2 >= 0) rs.push_back({first - o2, last - o2 + 1});
        std::sort(rs.begin(), rs.end(), [](auto& x, auto& y) { return x.start < y.start; });
        for (const auto& r : rs) hi.ranges.push_back(r);
        for (int32_t c : vert)
          if (c < first) hi.cols.push_back(c);
        hi.end_block();
        keys += int64_t(hi.block_ranges(b).size()) * 64 + int64_t(hi.block_cols(b).size());
      }
    }
    const DevIndex dv(vs, n);
    DevBuf wsv(sparse_attention_generic_workspace_bytes(dv.ix));
    SparseAttnParams pv = make_params(sh, in, dv, o.p, lse.as<float>());
    pv.workspace = wsv.p;
    pv.workspace_bytes = wsv.bytes;
    const double t_vs = time_ms([&] { sparse_attention_generic(pv); }, 10);
    SparseAttnParams pv8 = make_params(sh, in8, dv, o.p, lse.as<float>());
    pv8.workspace = wsv.p;
    pv8.workspace_bytes = wsv.bytes;
    const double t_vs8 = time_ms([&] { sparse_attention_generic(pv8); }, 10);
    const double t_plan = time_ms([&] { sparse_attention_generic_plan(pv); }, 10);
    const double causal_keys = double(H) * double(n) * double(n + 1) / 2.0 / 64.0;  // per block, summed
    std::printf("  %s geometry n=%lld (%d/%d heads, d %d): dense FA2 %.3f ms | generic all-selected %.3f ms "
                "(max |dO| %.2g, |dLSE| %.2g) | generic VS-like %.3f ms (plan %.3f ms, ~%.0f%% of causal keys)\n",
                geo.name, (long long)n, H, geo.n_kv_head, D, t_dense, t_all, max_o, max_l, t_vs, t_plan,
                100.0 * double(keys) / causal_keys);
    std::printf("  %s geometry n=%lld d %d fp8 K/V tiles: all-selected %.3f ms (%.2fx bf16) | VS-like %.3f ms "
                "(%.2fx bf16)\n",
                geo.name, (long long)n, D, t_all8, t_all8 / t_all, t_vs8, t_vs8 / t_vs);
  }
}

}  // namespace
}  // namespace longctx::cuda::test

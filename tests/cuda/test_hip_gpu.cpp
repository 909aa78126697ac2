// test_hip_gpu.cpp: HiP's GPU mask estimation (kernels/cuda/hip_estimate.h) against the CPU
// reference (kernels/ref/hip_topk.h): the selected key-block ids are bit-equal for the same bf16
// inputs (prefill: every (head, query block), on exact small-integer inputs for the tensor-core
// scorer; decode: every (sequence, head) over a paged, shuffled cache, random and tie-heavy
// inputs; the fp8 cache: bit-equal to the reference over the e4m3 codes), the tensor-core prefill keeps the fp64 oracle's best up to near ties on random inputs,
// the ranges follow the format (sinks, blocks, pads, window), and the decode mask cache
// re-estimates only on refresh steps (graph-safe: the decision is on the device). The same at
// head_dim 256 (Gemma 3's global layers, 4 query heads / 1 KV head), and prefill over an fp8 copy
// of the keys (HipPrefillParams::k_fp8) against the reference over its codes.
// Run: build-gpu/tests/cuda/test_hip_gpu (skips without a Hopper GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numeric>
#include <random>
#include <string>

#include "kernels/cuda/hip_estimate.h"
#include "kernels/ref/fp8_e4m3.h"
#include "kernels/ref/hip_topk.h"
#include "test_util.h"
#include "util/error.h"

namespace longctx::cuda {
namespace {
using namespace test;

struct Region {
  int64_t key_end, block_begin, block_end;
};
// methods/hip/hip_mask.cpp's hip_region.
Region region_of(const HipEstimateConfig& c, int64_t first) {
  Region r;
  r.key_end = std::max(c.sinks, first - c.window + 1);
  r.block_begin = c.sinks / c.b_k;
  r.block_end = std::max(r.block_begin, (r.key_end + c.b_k - 1) / c.b_k);
  if (r.key_end <= c.sinks) r.block_end = r.block_begin;
  return r;
}

HipTopkParams topk_of(const HipEstimateConfig& c) {
  HipTopkParams t;
  t.k = c.k;
  t.b_q = c.b_q;
  t.b_sq = c.b_sq;
  t.b_k = c.b_k;
  t.b_sk = c.b_sk;
  return t;
}

// Inputs: N(0, 1) bf16, or (ties) small integers in [-2, 2], whose dot products are exact integers:
// many equal scores, so the ranking's tie rule (the earlier branch) decides.
std::vector<uint16_t> inputs(size_t n, bool ties) {
  std::vector<double> tmp;
  auto h = random_bf16(n, 1.0, tmp);
  if (ties)
    for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16(std::round(std::clamp(float(tmp[i]) * 1.5f, -2.f, 2.f)));
  return h;
}

std::vector<float> to_float(const std::vector<uint16_t>& h) {
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = bf16_to_f32(h[i]);
  return f;
}

// An fp8 copy of keys fk: e4m3 codes of fk / scale (ties: the small integers as they are, exact
// codes; else scale 0.037: codes across the normal and subnormal range); fk becomes the codes'
// values, which the reference scores (the scale is left out on both sides: it does not change the order).
std::vector<uint8_t> fp8_codes(std::vector<float>& fk, bool ties) {
  constexpr float kScale = 0.037f;
  std::vector<uint8_t> codes(fk.size());
  for (size_t i = 0; i < fk.size(); ++i) {
    codes[i] = f32_to_e4m3(ties ? fk[i] : fk[i] / kScale);
    fk[i] = e4m3_to_f32(codes[i]);
  }
  return codes;
}

// fp8: the keys are scored from an e4m3 copy (k_fp8), the reference scores its codes.
// cta: HipPrefillParams::cta_threads (0: the default).
void check_prefill(const HipEstimateConfig& cfg, int64_t n_q, int64_t q_pos0, int H, int Hkv, int d, bool ties = false,
                   bool fp8 = false, int cta = 0) {
  SCOPED_TRACE(testing::Message() << "d=" << d << " heads " << H << "/" << Hkv << " ties=" << ties << " fp8=" << fp8
                                  << " b_k/b_sk=" << cfg.b_k << "/" << cfg.b_sk << " cta=" << cta);
  const int64_t n_kv = q_pos0 + n_q, n_qblk = (n_q + cfg.b_q - 1) / cfg.b_q, M = cfg.budget_blocks(),
                R = cfg.ranges_per_row();
  const auto hq = inputs(size_t(n_q * H * d), ties), hk = inputs(size_t(n_kv * Hkv * d), ties);
  auto fq = to_float(hq), fk = to_float(hk);
  const auto codes = fp8 ? fp8_codes(fk, ties) : std::vector<uint8_t>{};
  DevBuf k8(std::max<size_t>(codes.size(), 1));
  if (fp8) k8.upload(codes);
  DevBuf q(hq.size() * 2), k(hk.size() * 2), blocks(size_t(H * n_qblk * M) * 4), nb(size_t(H * n_qblk) * 4),
      rp(size_t(H * n_qblk + 1) * 8), rg(size_t(H * n_qblk * R) * 8), cp(size_t(H * n_qblk + 1) * 8);
  q.upload(hq);
  k.upload(hk);
  HipPrefillParams p;
  p.cfg = cfg;
  p.q = q.p;
  p.k = k.p;
  p.n_q = n_q;
  p.q_pos0 = q_pos0;
  p.n_kv = n_kv;
  p.n_head = H;
  p.n_kv_head = Hkv;
  p.head_dim = d;
  p.k_fp8 = fp8 ? k8.p : nullptr;
  p.blocks = blocks.as<int32_t>();
  p.n_blocks = nb.as<int32_t>();
  p.range_ptr = rp.as<int64_t>();
  p.ranges = rg.as<int32_t>();
  p.col_ptr = cp.as<int64_t>();
  p.cta_threads = cta;
  hip_estimate_prefill(p);
  device_sync();
  const auto got = blocks.download<int32_t>(size_t(H * n_qblk * M));
  const auto got_n = nb.download<int32_t>(size_t(H * n_qblk));
  const auto got_r = rg.download<int32_t>(size_t(H * n_qblk * R * 2));
  const auto got_rp = rp.download<int64_t>(size_t(H * n_qblk + 1));
  int64_t pruned = 0;
  for (int h = 0; h < H; ++h)
    for (int64_t b = 0; b < n_qblk; ++b) {
      const int64_t row0 = b * cfg.b_q, rows = std::min<int64_t>(cfg.b_q, n_q - row0);
      const auto sample = hip_sample_rows(int(rows), cfg.b_sq);
      std::vector<float> qs;
      std::vector<int64_t> pos;
      for (int r : sample) {
        qs.insert(qs.end(), &fq[size_t(((row0 + r) * H + h) * d)], &fq[size_t(((row0 + r) * H + h) * d + d)]);
        pos.push_back(q_pos0 + row0 + r);
      }
      const Region rg_ = region_of(cfg, q_pos0 + row0);
      const HipSearch s{.q = qs.data(), .q_stride = d, .q_pos = pos.data(), .n_qs = int(sample.size()),
                        .k = fk.data() + (h / (H / Hkv)) * d, .k_stride = int64_t(Hkv) * d, .head_dim = d,
                        .block_begin = rg_.block_begin, .block_end = rg_.block_end,
                        .key_end = std::min(rg_.key_end, n_kv)};
      std::vector<int32_t> want;
      hip_topk_blocks(topk_of(cfg), s, want);
      const int64_t e = h * n_qblk + b;
      ASSERT_EQ(got_n[size_t(e)], int32_t(want.size())) << "head " << h << " block " << b;
      EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + e * M)) << "head " << h << " block " << b;
      pruned += rg_.block_end - rg_.block_begin > M;
      // Ranges: sinks, blocks, pads, window.
      const int32_t* r = got_r.data() + 2 * e * R;
      EXPECT_EQ(got_rp[size_t(e)], e * R);
      EXPECT_EQ(r[0], 0);
      EXPECT_EQ(r[1], std::min<int64_t>(cfg.sinks, q_pos0 + row0 + rows));
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(r[2 * (i + 1)], want[i] * cfg.b_k);
        EXPECT_EQ(r[2 * (i + 1) + 1], want[i] * cfg.b_k + cfg.b_k);
      }
      EXPECT_EQ(r[2 * (R - 1)], rg_.key_end);
      EXPECT_EQ(r[2 * (R - 1) + 1], q_pos0 + row0 + rows);
    }
  EXPECT_GT(pruned, 0) << "the problem should prune some blocks";
}

// Tensor-core prefill scores on random inputs, judged against an fp64 oracle. One bisection
// iteration (m < N <= 2m blocks): the kept set is one top-m selection over known branches, so a
// GPU choice is right when every branch it keeps instead of an oracle's one scores, in fp64,
// within the fp32 accumulation bound of it: |s_x - s_y| <= d * 2^-22 * max |q|.|k| sums.
// fp8: scored from an e4m3 copy of the keys, the oracle over its codes' values.
// q_exp, q_spread (fp8's f16 query copy, hip_estimate.cu's load_q): every query element times
// 2^q_exp and a further 2^-u, u uniform in [0, q_spread] (exact in bf16): the copy's power-of-2
// scale brings any magnitude into f16's range, and elements more than 2^-32 under the largest
// round to f16's grid; the bound grows by that rounding, d * 2^-40 * max|q| * max|k|.
void check_prefill_mma_judged(const HipEstimateConfig& cfg, int64_t q_pos0, int H, int Hkv, int d, int64_t& swaps,
                              bool fp8 = false, int q_exp = 0, int q_spread = 0) {
  SCOPED_TRACE(testing::Message() << "d=" << d << " heads " << H << "/" << Hkv << " pos0=" << q_pos0 << " fp8=" << fp8
                                  << " q_exp=" << q_exp << " q_spread=" << q_spread);
  const int64_t n_q = cfg.b_q, n_kv = q_pos0 + n_q, M = cfg.budget_blocks(), R = cfg.ranges_per_row();
  auto hq = inputs(size_t(n_q * H * d), false);
  const auto hk = inputs(size_t(n_kv * Hkv * d), false);
  std::mt19937 spread_rng(uint32_t(q_pos0 * 31 + q_exp + 7 * q_spread));
  for (auto& x : hq)
    x = f32_to_bf16(std::ldexp(bf16_to_f32(x), q_exp - int(spread_rng() % uint32_t(q_spread + 1))));
  auto fq = to_float(hq), fk = to_float(hk);
  double q_max = 0, k_max = 0;
  for (float x : fq) q_max = std::max(q_max, double(std::fabs(x)));
  for (float x : fk) k_max = std::max(k_max, double(std::fabs(x)));
  const double range_bound = fp8 ? d * std::ldexp(1.0, -40) * q_max * k_max : 0.0;
  const auto codes = fp8 ? fp8_codes(fk, false) : std::vector<uint8_t>{};
  DevBuf k8(std::max<size_t>(codes.size(), 1));
  if (fp8) k8.upload(codes);
  DevBuf q(hq.size() * 2), k(hk.size() * 2), blocks(size_t(H * M) * 4), nb(size_t(H) * 4), rp(size_t(H + 1) * 8),
      rg(size_t(H * R) * 8), cp(size_t(H + 1) * 8);
  q.upload(hq);
  k.upload(hk);
  HipPrefillParams p;
  p.cfg = cfg;
  p.q = q.p;
  p.k = k.p;
  p.n_q = n_q;
  p.q_pos0 = q_pos0;
  p.n_kv = n_kv;
  p.n_head = H;
  p.n_kv_head = Hkv;
  p.head_dim = d;
  p.k_fp8 = fp8 ? k8.p : nullptr;
  p.blocks = blocks.as<int32_t>();
  p.n_blocks = nb.as<int32_t>();
  p.range_ptr = rp.as<int64_t>();
  p.ranges = rg.as<int32_t>();
  p.col_ptr = cp.as<int64_t>();
  hip_estimate_prefill(p);
  device_sync();
  const auto got = blocks.download<int32_t>(size_t(H * M));
  const auto got_n = nb.download<int32_t>(size_t(H));
  const Region rg_ = region_of(cfg, q_pos0);
  const int64_t n = rg_.block_end - rg_.block_begin;
  ASSERT_GT(n, M);
  ASSERT_LE(n, 2 * M) << "one iteration";
  const auto sample = hip_sample_rows(int(n_q), cfg.b_sq);
  for (int h = 0; h < H; ++h) {
    ASSERT_EQ(got_n[size_t(h)], M);
    // Branches of the one split, their fp64 scores and |q|.|k| bounds.
    struct Br {
      int64_t block;
      double score, abs;
    };
    std::vector<Br> br;
    for (int64_t c = 0; c < M; ++c) {
      const int64_t lo = n * c / M, hi = n * (c + 1) / M, a = rg_.block_begin + lo, g = hi - lo;
      for (int64_t half = 0; half < 2; ++half) {
        const int64_t ba = half == 0 ? a : a + g / 2, bg = half == 0 ? g / 2 : g - g / 2;
        if (bg == 0) continue;
        Br b{ba, -INFINITY, 0};
        const int64_t u = ba + bg / 2;
        for (int t = 0; t < cfg.b_k / cfg.b_sk; ++t) {
          const int64_t key = u * cfg.b_k + t * cfg.b_sk + cfg.b_sk - 1;
          if (key >= rg_.key_end) break;
          for (int r : sample) {
            if (key > q_pos0 + r) continue;
            double dot = 0, abs = 0;
            for (int e = 0; e < d; ++e) {
              const double x = fq[size_t(((r)*H + h) * d + e)], y = fk[size_t((key * Hkv + h / (H / Hkv)) * d + e)];
              dot += x * y;
              abs += std::fabs(x * y);
            }
            if (dot > b.score) b.score = dot;
            b.abs = std::max(b.abs, abs);
          }
        }
        br.push_back(b);
      }
    }
    std::vector<size_t> order(br.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return br[x].score > br[y].score; });
    std::vector<int64_t> want, mine(got.begin() + h * M, got.begin() + (h + 1) * M);
    for (int64_t i = 0; i < M; ++i) want.push_back(br[order[size_t(i)]].block);
    std::sort(want.begin(), want.end());
    ASSERT_TRUE(std::is_sorted(mine.begin(), mine.end()));
    std::vector<int64_t> extra, missing;
    std::set_difference(mine.begin(), mine.end(), want.begin(), want.end(), std::back_inserter(extra));
    std::set_difference(want.begin(), want.end(), mine.begin(), mine.end(), std::back_inserter(missing));
    ASSERT_EQ(extra.size(), missing.size());
    const auto find = [&](int64_t block) {
      return *std::find_if(br.begin(), br.end(), [&](const Br& b) { return b.block == block; });
    };
    for (int64_t x : extra)
      for (int64_t y : missing) {
        const Br bx = find(x), by = find(y);
        EXPECT_LE(by.score - bx.score, d * std::ldexp(1.0, -22) * std::max(bx.abs, by.abs) + range_bound)
            << "head " << h << ": kept block " << x << " (" << bx.score << ") over block " << y << " (" << by.score << ")";
      }
    swaps += int64_t(extra.size());
  }
}

TEST(HipEstimate, PrefillTensorCoreScoresKeepTheOracleBestUpToNearTies) {
  LC_REQUIRE_GPU();
  HipEstimateConfig small;
  small.k = 64;
  small.window = 64;
  small.sinks = 8;
  int64_t swaps = 0;
  for (int64_t pos0 = 140; pos0 <= 196; pos0 += 8) check_prefill_mma_judged(small, pos0, 8, 2, 128, swaps);
  for (int64_t pos0 : {800, 1000, 1200}) check_prefill_mma_judged(HipEstimateConfig{}, pos0, 8, 2, 128, swaps);
  for (int64_t pos0 : {150, 190}) check_prefill_mma_judged(small, pos0, 4, 4, 64, swaps);
  std::printf("[hip mma] %lld near-tie swaps against the fp64 oracle\n", (long long)swaps);
}

// Bit-equality: the tensor-core scorer (<= 32 sampled queries) on small-integer inputs (exact
// sums in any order), the fp32 FMA scorer (64 sampled queries) on random ones too.
TEST(HipEstimate, PrefillBlockIdsEqualTheCpuReference) {
  LC_REQUIRE_GPU();
  HipEstimateConfig small;
  small.k = 64;
  small.window = 64;
  small.sinks = 8;
  check_prefill(small, 200, 3000, 4, 2, 128, true);  // ragged last block, GQA
  check_prefill(small, 130, 900, 2, 1, 64, true);
  HipEstimateConfig strided = small;
  strided.b_k = 4;
  strided.b_sk = 2;
  strided.b_sq = 4;
  check_prefill(strided, 128, 5000, 4, 2, 128, true);
  check_prefill(HipEstimateConfig{}, 128, 20000, 2, 1, 128, true);  // paper defaults: 256 blocks of 2
  HipEstimateConfig wide_q = small;  // 64 sampled queries: the fp32 FMA scorer
  wide_q.b_sq = 1;
  check_prefill(wide_q, 200, 3000, 4, 2, 128, false);
  check_prefill(wide_q, 130, 900, 2, 1, 64, false);
  check_prefill(wide_q, 128, 2000, 2, 1, 128, true);
}

// Every prefill CTA size (128, 256, 512 threads: several CTAs an SM or one) and every way a
// branch's sampled keys lie in the tensor-core n-tiles of 8 (n_ks = b_k / b_sk of 1, 2, 4, 8: the
// branch's max is taken in registers; 3 and 16: through shared memory) select the reference's
// blocks on exact small-integer inputs (tie-heavy: the selection's tie split), and the same blocks
// as each other on random ones (real-valued scores: the radix select's early end).
TEST(HipEstimate, PrefillCtaSizesAndBranchLayoutsSelectTheSameBlocks) {
  LC_REQUIRE_GPU();
  struct Layout {
    int64_t k;
    int b_k, b_sk;
  };
  for (const Layout l : {Layout{64, 1, 1}, Layout{64, 2, 1}, Layout{128, 4, 1}, Layout{256, 8, 1}, Layout{96, 6, 2},
                         Layout{256, 16, 1}}) {
    HipEstimateConfig cfg;
    cfg.k = l.k;
    cfg.b_k = l.b_k;
    cfg.b_sk = l.b_sk;
    cfg.window = 64;
    cfg.sinks = 8;
    for (int cta : {128, 256, 512}) check_prefill(cfg, 200, 4000, 4, 2, 128, true, false, cta);
  }
  // Random inputs, paper defaults: the blocks of every CTA size are those of 512.
  const HipEstimateConfig cfg;
  const int64_t n_q = 256, q_pos0 = 30000, n_kv = q_pos0 + n_q, H = 4, Hkv = 2, d = 128, n_qblk = n_q / cfg.b_q,
                M = cfg.budget_blocks(), R = cfg.ranges_per_row();
  const auto hq = inputs(size_t(n_q * H * d), false), hk = inputs(size_t(n_kv * Hkv * d), false);
  DevBuf q(hq.size() * 2), k(hk.size() * 2), blocks(size_t(H * n_qblk * M) * 4), rp(size_t(H * n_qblk + 1) * 8),
      rg(size_t(H * n_qblk * R) * 8), cp(size_t(H * n_qblk + 1) * 8);
  q.upload(hq);
  k.upload(hk);
  std::vector<int32_t> first;
  for (int cta : {512, 256, 128}) {
    HipPrefillParams p;
    p.cfg = cfg;
    p.q = q.p;
    p.k = k.p;
    p.n_q = n_q;
    p.q_pos0 = q_pos0;
    p.n_kv = n_kv;
    p.n_head = int(H);
    p.n_kv_head = int(Hkv);
    p.head_dim = int(d);
    p.blocks = blocks.as<int32_t>();
    p.range_ptr = rp.as<int64_t>();
    p.ranges = rg.as<int32_t>();
    p.col_ptr = cp.as<int64_t>();
    p.cta_threads = cta;
    hip_estimate_prefill(p);
    device_sync();
    const auto got = blocks.download<int32_t>(size_t(H * n_qblk * M));
    if (first.empty()) first = got;
    else EXPECT_EQ(got, first) << "CTA of " << cta << " threads";
  }
  EXPECT_GT(*std::max_element(first.begin(), first.end()), M) << "the search should have pruned";
}

// fp8: the keys are e4m3 codes of the same inputs (x / scale, scale 0.037: codes across the
// normal and subnormal range), the reference scores e4m3_to_f32(code) (hip_estimate.h).
void check_decode(const HipEstimateConfig& cfg, bool ties, bool fp8 = false, int d = 128) {
  SCOPED_TRACE(testing::Message() << "k=" << cfg.k << " ties=" << ties << " fp8=" << fp8 << " d=" << d);
  const int H = 4, Hkv = 2, page = 16, refresh = 4, M = int(cfg.budget_blocks()), R = M + 2;
  std::vector<int32_t> lens = {3001, 7777};
  const int n_seq = 2, cap = 8000 + 64, max_pages = (cap + page - 1) / page;
  const int64_t n_pages = int64_t(n_seq) * max_pages;
  std::vector<int32_t> tab(static_cast<size_t>(n_pages));
  std::iota(tab.begin(), tab.end(), 0);
  std::shuffle(tab.begin(), tab.end(), std::mt19937_64(3));
  const auto hk = inputs(size_t(n_pages * page * Hkv * d), ties);
  auto fk = to_float(hk);
  constexpr float kScale = 0.037f;
  std::vector<uint8_t> codes;
  if (fp8) {
    codes.resize(fk.size());
    for (size_t i = 0; i < fk.size(); ++i) {
      codes[i] = f32_to_e4m3(ties ? fk[i] : fk[i] / kScale);  // ties: small integers, exact codes
      fk[i] = e4m3_to_f32(codes[i]);
    }
  }
  DevBuf kp(hk.size() * (fp8 ? 1 : 2)), table(tab.size() * 4), dlens(8), q(size_t(n_seq * H * d) * 2), rpos(size_t(n_seq * H) * 4),
      blocks(size_t(n_seq * H * M) * 4), rptr(size_t(n_seq * H + 1) * 4), rg(size_t(n_seq * H * R) * 8),
      cptr(size_t(n_seq * H + 1) * 4);
  if (fp8) kp.upload(codes);
  else kp.upload(hk);
  table.upload(tab);
  std::vector<int32_t> minus(size_t(n_seq * H), -1);
  rpos.upload(minus);
  HipDecodeParams p;
  p.cfg = cfg;
  p.refresh = refresh;
  p.q = q.p;
  p.kv.k_pool = p.kv.v_pool = kp.p;
  p.kv.elem = fp8 ? KvElem::fp8_e4m3 : KvElem::bf16;
  p.kv.k_scale = p.kv.v_scale = fp8 ? kScale : 1.f;
  p.kv.block_table = table.as<int32_t>();
  p.kv.seq_lens = dlens.as<int32_t>();
  p.kv.n_seq = n_seq;
  p.kv.max_pages_per_seq = max_pages;
  p.kv.page_size = page;
  p.kv.n_pages = n_pages;
  p.kv.n_kv_head = Hkv;
  p.kv.head_dim = d;
  p.kv.on_device = true;
  p.n_head = H;
  p.refresh_pos = rpos.as<int32_t>();
  p.blocks = blocks.as<int32_t>();
  p.range_ptr = rptr.as<int32_t>();
  p.ranges = rg.as<int32_t>();
  p.col_ptr = cptr.as<int32_t>();
  std::vector<int32_t> last_ranges;
  int64_t estimated_steps = 0;
  for (int step = 0; step < 9; ++step) {
    std::vector<int32_t> cur = {lens[0] + step, lens[1] + step};
    dlens.upload(cur);
    const auto hq = inputs(size_t(n_seq * H * d), ties);
    q.upload(hq);
    blocks.poison();
    hip_estimate_decode(p);
    device_sync();
    const auto got_blocks = blocks.download<int32_t>(size_t(n_seq * H * M));
    const auto got_ranges = rg.download<int32_t>(size_t(n_seq * H * R * 2));
    const auto got_pos = rpos.download<int32_t>(size_t(n_seq * H));
    const bool refresh_step = step % refresh == 0;
    estimated_steps += refresh_step;
    if (!refresh_step) {  // cached: nothing rewritten
      EXPECT_EQ(got_ranges, last_ranges) << step;
      EXPECT_TRUE(std::all_of(got_blocks.begin(), got_blocks.end(), [](int32_t x) { return x == -1; })) << step;
      continue;
    }
    const auto fq = to_float(hq);
    for (int s = 0; s < n_seq; ++s)
      for (int h = 0; h < H; ++h) {
        const int64_t pos = cur[size_t(s)] - 1, r = s * H + h;
        EXPECT_EQ(got_pos[size_t(r)], pos);
        // The CPU reference over this sequence's keys gathered in position order.
        std::vector<float> keys(size_t(cur[size_t(s)]) * d);
        for (int64_t t = 0; t < cur[size_t(s)]; ++t) {
          const int64_t row = int64_t(tab[size_t(s * max_pages + t / page)]) * page + t % page;
          std::copy_n(&fk[size_t((row * Hkv + h / (H / Hkv)) * d)], d, &keys[size_t(t * d)]);
        }
        const Region rg_ = region_of(cfg, pos);
        const HipSearch hs{.q = fq.data() + r * d, .q_stride = d, .q_pos = &pos, .n_qs = 1, .k = keys.data(),
                           .k_stride = d, .head_dim = d, .block_begin = rg_.block_begin, .block_end = rg_.block_end,
                           .key_end = rg_.key_end};
        std::vector<int32_t> want;
        hip_topk_blocks(topk_of(cfg), hs, want);
        ASSERT_EQ(int(want.size()), M);
        EXPECT_TRUE(std::equal(want.begin(), want.end(), got_blocks.begin() + r * M)) << "seq " << s << " head " << h;
        const int32_t* rr = got_ranges.data() + 2 * r * R;
        EXPECT_EQ(rr[0], 0);
        EXPECT_EQ(rr[1], cfg.sinks);
        EXPECT_EQ(rr[2], want[0] * cfg.b_k);
        EXPECT_EQ(rr[2 * (R - 1)], rg_.key_end);
        EXPECT_EQ(rr[2 * (R - 1) + 1], 0x7fffffff);
      }
    last_ranges = got_ranges;
  }
  EXPECT_EQ(estimated_steps, 3);
  const auto ptr = rptr.download<int32_t>(size_t(n_seq * H + 1));
  for (int r = 0; r <= n_seq * H; ++r) EXPECT_EQ(ptr[size_t(r)], r * R);
}

TEST(HipEstimate, DecodeRefreshAndCachedStepsOverAPagedCache) {
  LC_REQUIRE_GPU();
  HipEstimateConfig small;
  small.k = 128;
  small.window = 64;
  small.sinks = 4;
  for (bool ties : {false, true}) {
    check_decode(small, ties);
    check_decode(HipEstimateConfig{}, ties);  // paper defaults: 256 blocks of 2
  }
}

// The fp8 cache: e4m3 keys widened exactly, block ids bit-equal to the reference over the codes.
TEST(HipEstimate, DecodeOverAnFp8CacheEqualsTheReferenceOverItsCodes) {
  LC_REQUIRE_GPU();
  HipEstimateConfig small;
  small.k = 128;
  small.window = 64;
  small.sinks = 4;
  for (bool ties : {false, true}) {
    check_decode(small, ties, true);
    check_decode(HipEstimateConfig{}, ties, true);
  }
}

// head_dim 256 (Gemma 3's global layers; gemma-3-270m: 4 query heads, 1 KV head): 4 key chunks a
// lane. Prefill: bit-equal on small integers (tensor cores) and on random inputs (the fp32 FMA
// scorer, 64 sampled queries); tensor-core scores on random inputs judged against the fp64 oracle.
TEST(HipEstimate, HeadDim256PrefillEqualsTheCpuReference) {
  LC_REQUIRE_GPU();
  HipEstimateConfig small;
  small.k = 64;
  small.window = 64;
  small.sinks = 8;
  check_prefill(small, 200, 3000, 4, 1, 256, true);
  check_prefill(HipEstimateConfig{}, 128, 20000, 4, 1, 256, true);
  check_prefill(small, 130, 2000, 4, 2, 256, true);  // 2 query heads a KV head
  HipEstimateConfig wide_q = small;
  wide_q.b_sq = 1;
  check_prefill(wide_q, 200, 3000, 4, 1, 256, false);
  check_prefill(wide_q, 128, 2000, 4, 1, 256, true);
  HipEstimateConfig strided = small;  // 2 sampled keys a block
  strided.b_k = 4;
  strided.b_sk = 2;
  check_prefill(strided, 128, 5000, 4, 1, 256, true);
}

TEST(HipEstimate, HeadDim256TensorCoreScoresKeepTheOracleBestUpToNearTies) {
  LC_REQUIRE_GPU();
  HipEstimateConfig small;
  small.k = 64;
  small.window = 64;
  small.sinks = 8;
  int64_t swaps = 0;
  for (int64_t pos0 = 140; pos0 <= 196; pos0 += 8) check_prefill_mma_judged(small, pos0, 4, 1, 256, swaps);
  for (int64_t pos0 : {800, 1200}) check_prefill_mma_judged(HipEstimateConfig{}, pos0, 4, 1, 256, swaps);
  std::printf("[hip mma d256] %lld near-tie swaps against the fp64 oracle\n", (long long)swaps);
}

// Decode at head_dim 256 over a paged cache, bf16 and fp8 keys: bit-equal to the reference.
TEST(HipEstimate, HeadDim256DecodeEqualsTheCpuReference) {
  LC_REQUIRE_GPU();
  HipEstimateConfig small;
  small.k = 128;
  small.window = 64;
  small.sinks = 4;
  for (bool fp8 : {false, true})
    for (bool ties : {false, true}) {
      check_decode(small, ties, fp8, 256);
      check_decode(HipEstimateConfig{}, ties, fp8, 256);
    }
}

// Prefill over an fp8 copy of the keys (k_fp8): the reference over its codes, bit-equal on the fp32
// FMA scorer (random) and on tensor cores (small integers, exact codes), judged on tensor cores
// (random), at head_dim 128 and 256.
TEST(HipEstimate, PrefillOverAnFp8KeyCopyEqualsTheReferenceOverItsCodes) {
  LC_REQUIRE_GPU();
  HipEstimateConfig small;
  small.k = 64;
  small.window = 64;
  small.sinks = 8;
  HipEstimateConfig wide_q = small;
  wide_q.b_sq = 1;
  for (int d : {128, 256}) {
    const int Hkv = d == 256 ? 1 : 2;
    check_prefill(small, 200, 3000, 4, Hkv, d, true, true);
    check_prefill(HipEstimateConfig{}, 128, 20000, 4, Hkv, d, true, true);
    check_prefill(wide_q, 200, 3000, 4, Hkv, d, false, true);
  }
  int64_t swaps = 0;
  for (int64_t pos0 = 140; pos0 <= 196; pos0 += 8) check_prefill_mma_judged(small, pos0, 8, 2, 128, swaps, true);
  for (int64_t pos0 : {800, 1200}) {
    check_prefill_mma_judged(HipEstimateConfig{}, pos0, 8, 2, 128, swaps, true);
    check_prefill_mma_judged(HipEstimateConfig{}, pos0, 4, 1, 256, swaps, true);
  }
  std::printf("[hip mma fp8] %lld near-tie swaps against the fp64 oracle over the codes\n", (long long)swaps);
}

// The fp8 scorer's f16 query copy (one power-of-2 scale a CTA) at magnitudes far outside f16's
// range (bf16 queries of 2^-100 and 2^60: scaled exactly) and with elements spread over 2^-48 of
// each other (the small ones rounded to f16's grid): still the fp64 oracle's best up to near ties.
TEST(HipEstimate, PrefillFp8QueriesOfAnyMagnitudeScaleIntoF16) {
  LC_REQUIRE_GPU();
  HipEstimateConfig small;
  small.k = 64;
  small.window = 64;
  small.sinks = 8;
  int64_t swaps = 0;
  for (int q_exp : {-100, -20, 20, 60})
    for (int64_t pos0 : {148, 180}) check_prefill_mma_judged(small, pos0, 8, 2, 128, swaps, true, q_exp, 0);
  for (int q_spread : {16, 48})
    for (int64_t pos0 : {148, 180}) check_prefill_mma_judged(small, pos0, 8, 2, 128, swaps, true, 0, q_spread);
  check_prefill_mma_judged(HipEstimateConfig{}, 1000, 4, 1, 256, swaps, true, 40, 40);
  std::printf("[hip mma fp8 range] %lld near-tie swaps against the fp64 oracle over the codes\n", (long long)swaps);
}

// What scoring an fp8 copy of K costs in ranks (no GPU needed: the GPU's k_fp8 selection is the
// reference over the codes, bit-equal on the FMA scorer and up to near ties on tensor cores, as
// tested above). One-iteration selections on random N(0, 1) inputs (the hard case: no block
// stands out): the reference over the e4m3 codes (scale 0.037) against the fp64 oracle over the
// bf16 keys. Every block kept in place of an oracle one must be explained by the quantization:
// s_y - s_x <= d_x + d_y + the fp32 ranking bound, d = a branch's largest |q.k - q.k8| over its
// sampled pairs. Prints the share of the kept blocks that differ, and over full bisections (paper
// defaults, ~6 iterations) the share of the bf16 reference's blocks the codes' search also keeps.
struct Fp8RankStats {
  int64_t kept = 0, changed = 0, full_kept = 0, full_same = 0;
  double worst_gap = 0;  // the largest s_y - s_x of a swap, relative to d_x + d_y
};
void fp8_rank_changes(const HipEstimateConfig& cfg, int64_t q_pos0, int H, int Hkv, int d, Fp8RankStats& st) {
  constexpr double kScale = 0.037;  // fp8_codes' scale for random inputs
  const int64_t n_q = cfg.b_q, n_kv = q_pos0 + n_q, M = cfg.budget_blocks();
  const auto hq = inputs(size_t(n_q * H * d), false), hk = inputs(size_t(n_kv * Hkv * d), false);
  const auto fq = to_float(hq), fk = to_float(hk);
  auto fk8 = fk;
  fp8_codes(fk8, false);  // fk8: the codes' values (keys / scale, quantized)
  const Region rg_ = region_of(cfg, q_pos0);
  const int64_t n = rg_.block_end - rg_.block_begin;
  ASSERT_GT(n, M);
  const auto sample = hip_sample_rows(int(n_q), cfg.b_sq);
  std::vector<float> qs;
  std::vector<int64_t> pos;
  for (int h = 0; h < H; ++h) {
    qs.clear();
    pos.clear();
    for (int r : sample) {
      qs.insert(qs.end(), &fq[size_t((r * H + h) * d)], &fq[size_t((r * H + h) * d + d)]);
      pos.push_back(q_pos0 + r);
    }
    const int64_t kh = h / (H / Hkv);
    auto search_over = [&](const std::vector<float>& keys, int64_t key_end, std::vector<int32_t>& out) {
      const HipSearch hs{.q = qs.data(), .q_stride = d, .q_pos = pos.data(), .n_qs = int(sample.size()),
                         .k = keys.data() + kh * d, .k_stride = int64_t(Hkv) * d, .head_dim = d,
                         .block_begin = rg_.block_begin, .block_end = rg_.block_end, .key_end = key_end};
      hip_topk_blocks(topk_of(cfg), hs, out);
    };
    std::vector<int32_t> mine, ref16;
    search_over(fk8, std::min(rg_.key_end, n_kv), mine);
    if (n > 2 * M) {  // a full bisection: overlap with the bf16 reference only
      search_over(fk, std::min(rg_.key_end, n_kv), ref16);
      std::vector<int32_t> both;
      std::set_intersection(mine.begin(), mine.end(), ref16.begin(), ref16.end(), std::back_inserter(both));
      st.full_kept += int64_t(ref16.size());
      st.full_same += int64_t(both.size());
      continue;
    }
    struct Br {
      int64_t block;
      double s, s8, delta, abs8;
    };
    std::vector<Br> br;
    for (int64_t c = 0; c < M; ++c) {
      const int64_t lo = n * c / M, hi = n * (c + 1) / M, a = rg_.block_begin + lo, g = hi - lo;
      for (int64_t half = 0; half < 2; ++half) {
        const int64_t ba = half == 0 ? a : a + g / 2, bg = half == 0 ? g / 2 : g - g / 2;
        if (bg == 0) continue;
        Br b{ba, -INFINITY, -INFINITY, 0, 0};
        const int64_t u = ba + bg / 2;
        for (int t = 0; t < cfg.b_k / cfg.b_sk; ++t) {
          const int64_t key = u * cfg.b_k + t * cfg.b_sk + cfg.b_sk - 1;
          if (key >= rg_.key_end) break;
          for (int r : sample) {
            if (key > q_pos0 + r) continue;
            double dot = 0, dot8 = 0, abs8 = 0;
            for (int e = 0; e < d; ++e) {
              const double x = fq[size_t((r * H + h) * d + e)];
              const size_t ki = size_t((key * Hkv + kh) * d + e);
              dot += x * fk[ki];
              dot8 += x * fk8[ki] * kScale;
              abs8 += std::fabs(x * fk8[ki] * kScale);
            }
            b.s = std::max(b.s, dot);
            b.s8 = std::max(b.s8, dot8);
            b.delta = std::max(b.delta, std::fabs(dot - dot8));
            b.abs8 = std::max(b.abs8, abs8);
          }
        }
        br.push_back(b);
      }
    }
    std::vector<size_t> order(br.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return br[x].s > br[y].s; });
    std::vector<int64_t> want, got(mine.begin(), mine.end());
    for (int64_t i = 0; i < M; ++i) want.push_back(br[order[size_t(i)]].block);
    std::sort(want.begin(), want.end());
    std::vector<int64_t> extra, missing;
    std::set_difference(got.begin(), got.end(), want.begin(), want.end(), std::back_inserter(extra));
    std::set_difference(want.begin(), want.end(), got.begin(), got.end(), std::back_inserter(missing));
    ASSERT_EQ(extra.size(), missing.size());
    const auto find = [&](int64_t block) {
      return *std::find_if(br.begin(), br.end(), [&](const Br& b) { return b.block == block; });
    };
    for (int64_t x : extra)
      for (int64_t y : missing) {
        const Br bx = find(x), by = find(y);
        const double bound = bx.delta + by.delta + d * std::ldexp(1.0, -22) * std::max(bx.abs8, by.abs8);
        EXPECT_LE(by.s - bx.s, bound) << "head " << h << ": fp8 kept block " << x << " over block " << y;
        if (bx.delta + by.delta > 0) st.worst_gap = std::max(st.worst_gap, (by.s - bx.s) / (bx.delta + by.delta));
      }
    st.kept += M;
    st.changed += int64_t(extra.size());
  }
}

TEST(HipEstimate, Fp8KeyCopyChangesRanksOnlyWithinTheQuantizationError) {
  HipEstimateConfig small;
  small.k = 64;
  small.window = 64;
  small.sinks = 8;
  for (int d : {128, 256}) {
    const int H = d == 256 ? 4 : 8, Hkv = d == 256 ? 1 : 2;
    Fp8RankStats st;
    for (int64_t pos0 = 140; pos0 <= 196; pos0 += 8) fp8_rank_changes(small, pos0, H, Hkv, d, st);
    for (int64_t pos0 : {800, 1000, 1200}) fp8_rank_changes(HipEstimateConfig{}, pos0, H, Hkv, d, st);
    for (int64_t pos0 : {6000, 20000}) fp8_rank_changes(HipEstimateConfig{}, pos0, H, Hkv, d, st);
    ASSERT_GT(st.kept, 0);
    ASSERT_GT(st.full_kept, 0);
    std::printf("[hip fp8 ranks d%d] one-iteration selections: %lld of %lld kept blocks differ from the fp64 oracle "
                "(%.2f%%; largest swap gap %.2f of the quantization bound); full bisections: %.2f%% of the bf16 "
                "reference's blocks kept\n",
                d, (long long)st.changed, (long long)st.kept, 100.0 * double(st.changed) / double(st.kept), st.worst_gap,
                100.0 * double(st.full_same) / double(st.full_kept));
  }
}

// Refused before any launch, naming what to lower: head_dim past 256, a CTA over 227 KiB, keys
// past the prefill's 32-bit offsets.
TEST(HipEstimate, ConfigsOutOfReachAreRefusedUpFront) {
  EXPECT_NO_THROW(hip_estimate_check(HipEstimateConfig{}, 256));
  try {
    hip_estimate_check(HipEstimateConfig{}, 512);
    ADD_FAILURE() << "head_dim 512 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("up to 256"), std::string::npos) << e.what();
  }
  HipEstimateConfig big;  // 1024 blocks x 32 sampled keys: 256 KiB of item scores alone
  big.k = 32768;
  big.b_k = 32;
  EXPECT_GT(hip_estimate_smem_bytes(big, 256), kHipMaxSmemBytes);
  try {
    hip_estimate_check(big, 256);
    ADD_FAILURE() << "a CTA over the shared memory limit accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shared memory"), std::string::npos) << e.what();
  }
  // Prefill addresses key rows with 32-bit offsets in units of 8 elements: 2^35 key elements a
  // layer at most. 2^24 keys x 32 KV heads x head_dim 128 is 2^36: refused before the launch (no
  // device memory is touched, the pointers are null).
  HipPrefillParams p;
  p.n_q = 64;
  p.n_kv = int64_t(1) << 24;
  p.n_head = p.n_kv_head = 32;
  p.head_dim = 128;
  try {
    hip_estimate_prefill(p);
    ADD_FAILURE() << "2^36 key elements accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("32-bit offsets"), std::string::npos) << e.what();
  }
  // The launch order puts each KV head's query heads side by side (grid x): heads must be groups.
  p.n_kv = 4096;
  p.n_head = 6;
  p.n_kv_head = 4;
  try {
    hip_estimate_prefill(p);
    ADD_FAILURE() << "6 query heads over 4 KV heads accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not groups"), std::string::npos) << e.what();
  }
  // Query blocks are the grid's y dimension: at most 65535 blocks of b_q a chunk.
  p.n_head = 8;
  p.n_q = 65536 * 64;
  try {
    hip_estimate_prefill(p);
    ADD_FAILURE() << "65536 query blocks accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prefill chunk"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace longctx::cuda

// test_infinitehip.cpp: InfiniteHiP (kernels/ref/ihip_prune, methods/infinitehip) against fp64
// and brute-force oracles: the RoPE position assignments (paper Eq. 2-3) and the rotation table,
// SelectRep (monotone scores, ties, the middle probes and path maximum of the authors' kernel),
// the pruning stage vs an independent fp64 re-implementation
// (three RoPE modes, GQA, a short last chunk, ties, nothing to prune), multi-stage composition,
// the method's prefill (rotated: sparse mainloop vs dense-with-the-same-mask; pre-RoPE:
// compacted StreamingLLM positions vs the fp64 oracle), the decode mask caches and refresh
// schedule, the spec (presets, options, errors, composition), and rank=local (the offsets vs fp64,
// stages vs the fp64 oracle with offsets, a loud / quiet head case in exact integers, ties).
// Run: build/tests/sparse/test_sparse --gtest_filter='Ihip*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "../common/error_of.h"
#include "kernels/ref/fp8_e4m3.h"
#include "kernels/ref/ihip_prune.h"
#include "kernels/ref/ops.h"
#include "methods/infinitehip/ihip_mask.h"
#include "methods/infinitehip/infinitehip_method.h"
#include "methods/method.h"
#include "methods/run_cpu.h"
#include "test_util.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {
namespace {

using test_common::error_of;

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

MethodContext ctx() { return {.n_layer = 4, .n_head = 4, .n_kv_head = 2, .head_dim = 32, .model_name = "tiny-test"}; }

// Three stages scaled down so that ~1000 keys prune at every stage: layer 0 is an early layer
// (chunk-indexed RoPE, k_early = 32), the others relative.
const char* kSmall = "l_c=32/8/2,k=256/64/16,refresh=8/4/2,n_sink=16,n_stream=64,early_layers=1,k_early=32";

// fp64 rotate-half at pos (cos/sin in double).
void rot_d(const float* x, int64_t pos, const std::vector<float>& inv, int d, double* out) {
  const int half = d / 2;
  for (int i = 0; i < half; ++i) {
    const double a = double(float(pos) * inv[size_t(i)]), c = std::cos(a), s = std::sin(a);
    out[i] = x[i] * c - x[i + half] * s;
    out[i + half] = x[i + half] * c + x[i] * s;
  }
}

// An independent fp64 pruning stage (paper Alg. 2-3) over raw (un-packed) queries.
struct OracleIn {
  const AttnParams* p;
  int64_t row0, rows;
  IhipRopeMode mode;
  const std::vector<float>* inv;
  int64_t n_stream;
  int64_t n_sink = -1;  // >= 0: rank=local, offsets over the rows' sinks [0, n_sink) and window
};
// rank=local's offsets in fp64, independently: off[h * rows + r] = max over row r's sinks and
// window [max(n_sink, q_last - n_stream + 1), pos] of q~ . k~, the keys rotated at the left
// branch of the last chunk (relative 0, chunk-indexed n_chunk - 1), the query as its probes see it.
std::vector<double> offsets_d(const OracleIn& o, int64_t n_chunk) {
  const AttnParams& p = *o.p;
  const int d = p.head_dim;
  const int64_t pos0 = p.q_pos0 + o.row0, q_last = pos0 + o.rows - 1;
  const int64_t win = std::max(o.n_sink, q_last - o.n_stream + 1);
  const int64_t kpos = o.mode == IhipRopeMode::relative ? 0 : std::max<int64_t>(n_chunk - 1, 0);
  std::vector<double> off(size_t(p.n_head * o.rows), -1e300), k(static_cast<size_t>(d)), q(static_cast<size_t>(d));
  for (int h = 0; h < p.n_head; ++h)
    for (int64_t r = 0; r < o.rows; ++r) {
      const float* qr = p.q + ((o.row0 + r) * p.n_head + h) * d;
      if (o.mode == IhipRopeMode::none) for (int e = 0; e < d; ++e) q[size_t(e)] = qr[e];
      else rot_d(qr, ihip_query_pos(o.mode, pos0 + r, n_chunk, o.n_stream), *o.inv, d, q.data());
      for (int64_t j = 0; j <= pos0 + r; ++j) {
        if (j >= o.n_sink && j < win) continue;
        const float* kr = p.k + (j * p.n_kv_head + h / (p.n_head / p.n_kv_head)) * d;
        if (o.mode == IhipRopeMode::none) for (int e = 0; e < d; ++e) k[size_t(e)] = kr[e];
        else rot_d(kr, kpos, *o.inv, d, k.data());
        double s = 0;
        for (int e = 0; e < d; ++e) s += q[size_t(e)] * k[size_t(e)];
        off[size_t(h * o.rows + r)] = std::max(off[size_t(h * o.rows + r)], s);
      }
    }
  return off;
}
double probe_d(const OracleIn& o, int g, int32_t key, int64_t kpos, int64_t n_chunk,
               const std::vector<double>* off = nullptr) {
  const AttnParams& p = *o.p;
  const int d = p.head_dim, group = p.n_head / p.n_kv_head;
  std::vector<double> k(static_cast<size_t>(d)), q(static_cast<size_t>(d));
  const float* kr = p.k + (int64_t(key) * p.n_kv_head + g) * d;
  if (o.mode == IhipRopeMode::none) for (int e = 0; e < d; ++e) k[size_t(e)] = kr[e];
  else rot_d(kr, kpos, *o.inv, d, k.data());
  double best = -1e300;
  for (int h = g * group; h < (g + 1) * group; ++h)
    for (int64_t r = o.row0; r < o.row0 + o.rows; ++r) {
      const float* qr = p.q + (r * p.n_head + h) * d;
      if (o.mode == IhipRopeMode::none) for (int e = 0; e < d; ++e) q[size_t(e)] = qr[e];
      else rot_d(qr, ihip_query_pos(o.mode, p.q_pos0 + r, n_chunk, o.n_stream), *o.inv, d, q.data());
      double s = 0;
      for (int e = 0; e < d; ++e) s += q[size_t(e)] * k[size_t(e)];
      if (off) s -= (*off)[size_t(h * o.rows + (r - o.row0))];
      best = std::max(best, s);
    }
  return best;
}
std::vector<int32_t> oracle_stage(const IhipStage& st, const OracleIn& o, const std::vector<int32_t>& cand) {
  const int64_t n = int64_t(cand.size()), n_chunk = (n + st.l_c - 1) / st.l_c;
  if (n_chunk <= st.keep_chunks()) return cand;
  const auto kpos = [&](int branch, int64_t j) {
    return o.mode == IhipRopeMode::relative ? int64_t(branch) : j;  // paper Eq. 3
  };
  std::vector<double> off_v;
  if (o.n_sink >= 0) off_v = offsets_d(o, n_chunk);
  const std::vector<double>* off = o.n_sink >= 0 ? &off_v : nullptr;
  std::vector<std::pair<double, int64_t>> sc;
  for (int64_t j = 0; j < n_chunk; ++j) {
    const int64_t b = j * st.l_c, len = std::min<int64_t>(st.l_c, n - b);
    double best = -1e300;
    for (int g = 0; g < o.p->n_kv_head; ++g) {  // hip-attention's scan: middle probes, running max
      int64_t lo = 0, hi = len;
      while (hi - lo > 1) {
        const int64_t mid = (lo + hi) / 2;
        const double l = probe_d(o, g, cand[size_t(b + (lo + mid) / 2)], kpos(0, j), n_chunk, off);
        const double r = probe_d(o, g, cand[size_t(b + (mid + hi) / 2)], kpos(1, j), n_chunk, off);
        (l > r ? hi : lo) = mid;
        best = std::max({best, l, r});
      }
      for (const int branch : {0, 1})
        best = std::max(best, probe_d(o, g, cand[size_t(b + lo)], kpos(branch, j), n_chunk, off));
    }
    sc.push_back({-best, j});
  }
  std::sort(sc.begin(), sc.end());  // larger score first, then the earlier chunk
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < st.keep_chunks(); ++i) keep.push_back(sc[size_t(i)].second);
  std::sort(keep.begin(), keep.end());
  std::vector<int32_t> out;
  for (const int64_t j : keep)
    for (int64_t i = j * st.l_c; i < std::min(n, (j + 1) * st.l_c); ++i) out.push_back(cand[size_t(i)]);
  return out;
}

// The library stage on the same inputs.
std::vector<int32_t> run_stage(const IhipStage& st, const OracleIn& o, const IhipRopeTable& table,
                               const std::vector<int32_t>& cand) {
  const AttnParams& p = *o.p;
  const int64_t n_chunk = (int64_t(cand.size()) + st.l_c - 1) / st.l_c;
  std::vector<float> q;
  ihip_pack_queries(p.q, p.n_head, p.n_kv_head, p.head_dim, o.row0, o.rows, p.q_pos0 + o.row0, o.mode, &table, n_chunk,
                    o.n_stream, q);
  const IhipStageInput in{.q = q.data(), .n_qs = int(p.n_head / p.n_kv_head * o.rows), .k = p.k,
                          .k_stride = int64_t(p.n_kv_head) * p.head_dim, .n_kv_head = p.n_kv_head,
                          .head_dim = p.head_dim, .rope = o.mode, .table = &table};
  std::vector<int32_t> out;
  ihip_prune_stage(st, in, cand, out);
  return out;
}

TEST(IhipRope, PositionsFollowThePapersEquations) {
  const int64_t n_stream = 1024;
  // Relative (layers > 3): q at n_stream + 1, left key at 0, right key at 1 (Eq. 2-3).
  EXPECT_EQ(ihip_query_pos(IhipRopeMode::relative, 50000, 100, n_stream), n_stream + 1);
  EXPECT_EQ(ihip_key_pos(IhipRopeMode::relative, 0, 77), 0);
  EXPECT_EQ(ihip_key_pos(IhipRopeMode::relative, 1, 77), 1);
  // Chunk-indexed (layers 1-3): every key of chunk j at j; the query n_stream after the last
  // chunk, never after its own position.
  EXPECT_EQ(ihip_key_pos(IhipRopeMode::chunk_indexed, 0, 77), 77);
  EXPECT_EQ(ihip_key_pos(IhipRopeMode::chunk_indexed, 1, 77), 77);
  EXPECT_EQ(ihip_query_pos(IhipRopeMode::chunk_indexed, 50000, 100, n_stream), 99 + n_stream);
  EXPECT_EQ(ihip_query_pos(IhipRopeMode::chunk_indexed, 600, 100, n_stream), 600);
  EXPECT_EQ(ihip_query_pos(IhipRopeMode::none, 600, 100, n_stream), 600);
  // The layer split: rope=on prunes layers < early_layers chunk-indexed, later ones relative.
  const IhipParams hp = ihip_preset("3k");
  EXPECT_EQ(hp.rope_mode(0), IhipRopeMode::chunk_indexed);
  EXPECT_EQ(hp.rope_mode(2), IhipRopeMode::chunk_indexed);
  EXPECT_EQ(hp.rope_mode(3), IhipRopeMode::relative);
  EXPECT_EQ(parse_ihip_params("rope=off").rope_mode(0), IhipRopeMode::none);
  EXPECT_EQ(hp.last_k(2), 4096);
  EXPECT_EQ(hp.last_k(3), 2048);
}

TEST(IhipRope, TableRotationMatchesModelRopeAndRelativeDistance) {
  const int d = 64;
  const auto inv = test::inv_freq_of(d, 100000.0);
  const IhipRopeTable t = ihip_rope_table(inv.data(), d, 3000);
  const auto x = test::randn(size_t(d), 7), y = test::randn(size_t(d), 8);
  for (const int64_t pos : {0, 1, 1025, 2999}) {
    std::vector<float> a(static_cast<size_t>(d)), b = x;
    ihip_rotate(x.data(), a.data(), d, t, pos);
    rope_apply_ref(b.data(), 1, 1, d, pos, inv.data(), pool(), 1.f);
    for (int e = 0; e < d; ++e) EXPECT_NEAR(a[size_t(e)], b[size_t(e)], 2e-6) << pos;
  }
  // Position 0 is the identity.
  std::vector<float> z(static_cast<size_t>(d));
  ihip_rotate(x.data(), z.data(), d, t, 0);
  EXPECT_EQ(z, x);
  // Relative style: q at n_stream + 1 against the right key at 1 is a RoPE distance of n_stream.
  const int64_t n_stream = 1024;
  std::vector<float> q(static_cast<size_t>(d)), k(static_cast<size_t>(d));
  ihip_rotate(x.data(), q.data(), d, t, n_stream + 1);
  ihip_rotate(y.data(), k.data(), d, t, 1);
  std::vector<double> qd(static_cast<size_t>(d));
  rot_d(x.data(), n_stream, inv, d, qd.data());  // distance n_stream, key at 0
  double want = 0, got = 0;
  for (int e = 0; e < d; ++e) want += qd[size_t(e)] * y[size_t(e)], got += double(q[size_t(e)]) * k[size_t(e)];
  EXPECT_NEAR(got, want, 1e-3 * std::max(1.0, std::abs(want)));
  // Out of the table is refused.
  EXPECT_NE(error_of([&] { ihip_rotate(x.data(), z.data(), d, t, 3000); }), "");
}

TEST(IhipSelectRep, MonotoneScoresGiveTheArgmaxAndTiesGoRight) {
  const int d = 16, n = 37;  // not a power of two
  std::vector<float> q(static_cast<size_t>(d), 0.f), k(size_t(n * d), 0.f);
  q[0] = 1.f;
  std::vector<int32_t> entries(static_cast<size_t>(n));
  std::iota(entries.begin(), entries.end(), 0);
  IhipStageInput in{.q = q.data(), .n_qs = 1, .k = k.data(), .k_stride = d, .n_kv_head = 1, .head_dim = d};
  float score = 0.f;
  for (int j = 0; j < n; ++j) k[size_t(j * d)] = float(j);  // increasing: the last entry
  EXPECT_EQ(ihip_select_rep(in, 0, entries.data(), n, 0, &score), n - 1);
  EXPECT_EQ(score, float(n - 1));
  for (int j = 0; j < n; ++j) k[size_t(j * d)] = float(n - j);  // decreasing: the first
  EXPECT_EQ(ihip_select_rep(in, 0, entries.data(), n, 0, &score), 0);
  EXPECT_EQ(score, float(n));
  for (int j = 0; j < n; ++j) k[size_t(j * d)] = 3.f;  // all tied: right every time (the authors' strict >)
  EXPECT_EQ(ihip_select_rep(in, 0, entries.data(), n, 0), n - 1);
  EXPECT_EQ(ihip_select_rep(in, 0, entries.data(), 1, 0, &score), 0);
  EXPECT_EQ(score, 3.f);
}

// Pins the fix of issue 15 (a passkey lost at 4K): SelectRep probes the MIDDLE key of each half
// and the chunk score is the largest probe on the path, as hip-attention's scan kernel does.
// Probing each half's first key (the paper's text) never looks at entries 1, 3, 5 or 7 of a flat
// 8-key chunk before the last step, so a chunk whose one strong key sits there scored as flat.
TEST(IhipSelectRep, ProbesTheMiddleOfEachHalfAndScoresThePathsMaximum) {
  const int d = 8, n = 8;
  std::vector<float> q(static_cast<size_t>(d), 0.f), k(size_t(n * d), 0.f);
  q[0] = 1.f;
  std::vector<int32_t> entries(static_cast<size_t>(n));
  std::iota(entries.begin(), entries.end(), 0);
  IhipStageInput in{.q = q.data(), .n_qs = 1, .k = k.data(), .k_stride = d, .n_kv_head = 1, .head_dim = d};
  // Flat chunk with one spike at entry 5: probes (2, 6) tie -> right half [4, 8); probes (5, 7):
  // 5 wins -> [4, 6); probes (4, 5): 5. A first-key bisection ends at entry 0 (every tie left).
  for (int j = 0; j < n; ++j) k[size_t(j * d)] = 1.f;
  k[size_t(5 * d)] = 9.f;
  float score = 0.f;
  EXPECT_EQ(ihip_select_rep(in, 0, entries.data(), n, 0, &score), 5);
  EXPECT_EQ(score, 9.f);
  // The score is the path's maximum, not the representative's: probes (2, 6) = (8, 7) keep [0, 4),
  // probes (1, 3) = (0, 6) keep [2, 4), probes (2, 3) = (8, 6): entry 2, score 8; a spike the path
  // passes over (entry 0) does not count.
  const float v[n] = {20.f, 0.f, 8.f, 6.f, 1.f, 1.f, 7.f, 1.f};
  for (int j = 0; j < n; ++j) k[size_t(j * d)] = v[j];
  EXPECT_EQ(ihip_select_rep(in, 0, entries.data(), n, 0, &score), 2);
  EXPECT_EQ(score, 8.f);
  // Relative RoPE: a left-branch winner counts at the left position (its score on the path).
  const auto inv = test::inv_freq_of(d, 10000.0);
  const IhipRopeTable table = ihip_rope_table(inv.data(), d, 8);
  for (int j = 0; j < n; ++j)
    for (int e = 0; e < d; ++e) k[size_t(j * d + e)] = float((j * 7 + e * 3) % 11) - 5.f;
  for (int e = 0; e < d; ++e) q[size_t(e)] = float((e * 5) % 7) - 3.f;
  in.rope = IhipRopeMode::relative;
  in.table = &table;
  float want = -1e30f;
  int lo = 0, hi = n;
  while (hi - lo > 1) {  // the rule written out with ihip_probe
    const int mid = (lo + hi) / 2;
    const float l = ihip_probe(in, 0, (lo + mid) / 2, 0), r = ihip_probe(in, 0, (mid + hi) / 2, 1);
    (l > r ? hi : lo) = mid;
    want = std::max({want, l, r});
  }
  want = std::max({want, ihip_probe(in, 0, lo, 0), ihip_probe(in, 0, lo, 1)});
  EXPECT_EQ(ihip_select_rep(in, 0, entries.data(), n, 0, &score), lo);
  EXPECT_EQ(score, want);
}

// The stage equals the fp64 re-implementation for every RoPE mode, GQA 4/2, 64-row blocks and a
// decode row, a short last chunk (|cand| not a multiple of l_c) and a gapped candidate list.
TEST(IhipStage, EqualsIndependentFp64Oracle) {
  const int H = 4, Hkv = 2, D = 32;
  const auto inv = test::inv_freq_of(D, 10000.0);
  const IhipRopeTable table = ihip_rope_table(inv.data(), D, 4096);
  auto pr = test::make_problem(64, 2000, H, Hkv, D, 21);
  int checked = 0;
  for (const IhipRopeMode mode : {IhipRopeMode::none, IhipRopeMode::relative, IhipRopeMode::chunk_indexed})
    for (const int64_t rows : {64, 1})
      for (const IhipStage st : {IhipStage{32, 256}, IhipStage{8, 64}, IhipStage{5, 40}}) {
        std::vector<int32_t> cand;
        for (int32_t j = 16; j < 1950; ++j)
          if (st.l_c != 8 || (j / 40) % 3 != 1) cand.push_back(j);  // l_c = 8: a gapped list
        const OracleIn o{.p = &pr.p, .row0 = 64 - rows, .rows = rows, .mode = mode, .inv = &inv, .n_stream = 64};
        const auto got = run_stage(st, o, table, cand), want = oracle_stage(st, o, cand);
        EXPECT_EQ(got, want) << int(mode) << " rows " << rows << " l_c " << st.l_c;
        EXPECT_LE(int64_t(got.size()), st.k);  // less when the short last chunk survives
        EXPECT_GT(int64_t(got.size()), st.k - st.l_c);
        EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
        ++checked;
      }
  EXPECT_EQ(checked, 18);
}

// The fp8 cache's keys (IhipStageInput::k_fp8: e4m3 bytes and one scale, the GPU twin's input):
// the stage equals the fp64 oracle on the dequantized keys (e4m3 * scale) in every RoPE mode, and
// its chunk scores equal, bit for bit, the fp32 path's over those dequantized keys.
TEST(IhipStage, Fp8KeysEqualTheOracleOnDequantizedKeys) {
  const int H = 4, Hkv = 2, D = 32;
  const auto inv = test::inv_freq_of(D, 10000.0);
  const IhipRopeTable table = ihip_rope_table(inv.data(), D, 4096);
  auto pr = test::make_problem(1, 2000, H, Hkv, D, 23);
  float amax = 0.f;
  for (const float x : pr.k) amax = std::max(amax, std::fabs(x));
  const float scale = fp8_scale_for_amax(amax);
  std::vector<uint8_t> bytes(pr.k.size());
  for (size_t i = 0; i < pr.k.size(); ++i) {
    bytes[i] = f32_to_e4m3(pr.k[i] / scale);
    pr.k[i] = e4m3_to_f32(bytes[i]) * scale;  // the values the fp8 path must see
  }
  std::vector<int32_t> cand(1900);
  std::iota(cand.begin(), cand.end(), 40);
  for (const IhipRopeMode mode : {IhipRopeMode::none, IhipRopeMode::relative, IhipRopeMode::chunk_indexed}) {
    const IhipStage st{16, 256};
    const OracleIn o{.p = &pr.p, .row0 = 0, .rows = 1, .mode = mode, .inv = &inv, .n_stream = 64};
    std::vector<float> q;
    ihip_pack_queries(pr.p.q, H, Hkv, D, 0, 1, pr.p.q_pos0, mode, &table, int64_t(cand.size() + 15) / 16, 64, q);
    IhipStageInput in{.q = q.data(), .n_qs = H / Hkv, .k = pr.p.k, .k_stride = int64_t(Hkv) * D, .n_kv_head = Hkv,
                      .head_dim = D, .rope = mode, .table = &table};
    const std::vector<float> want_sc = ihip_chunk_scores(st, in, cand);
    in.k = nullptr;
    in.k_fp8 = bytes.data();
    in.k_scale = scale;
    const std::vector<float> got_sc = ihip_chunk_scores(st, in, cand);
    ASSERT_EQ(got_sc.size(), want_sc.size());
    EXPECT_EQ(std::memcmp(got_sc.data(), want_sc.data(), got_sc.size() * 4), 0) << int(mode);
    std::vector<int32_t> got;
    ihip_prune_stage(st, in, cand, got);
    EXPECT_EQ(got, oracle_stage(st, o, cand)) << int(mode);
    EXPECT_EQ(int64_t(got.size()), st.k);
  }
}

TEST(IhipStage, TiesKeepTheEarliestChunksAndFewChunksKeepAll) {
  const int H = 2, Hkv = 1, D = 16;
  auto pr = test::make_problem(1, 999, H, Hkv, D, 22);
  for (int64_t j = 1; j < pr.p.n_kv; ++j)  // every key the same: every score ties
    std::copy_n(pr.k.data(), D, pr.k.data() + j * D);
  const IhipRopeTable table;
  std::vector<int32_t> cand(900);
  std::iota(cand.begin(), cand.end(), 50);
  const OracleIn o{.p = &pr.p, .row0 = 0, .rows = 1, .mode = IhipRopeMode::none, .inv = nullptr, .n_stream = 64};
  const auto got = run_stage({16, 128}, o, table, cand);
  ASSERT_EQ(got.size(), 128u);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(got[size_t(i)], 50 + i);
  // n_chunk <= K: every candidate survives (a short last chunk counts as a chunk).
  cand.resize(127);
  EXPECT_EQ(run_stage({16, 128}, o, table, cand), cand);
  EXPECT_EQ(ihip_top_chunks(std::vector<float>{1.f, 3.f, 3.f, 2.f, 3.f}, 2), (std::vector<int32_t>{1, 2}));
}

// Multi-stage (Alg. 1): each stage refines the previous one's output; the last keeps k_early in
// early layers; candidates exclude the sinks and the streaming window.
TEST(IhipPrune, StagesComposeAndExcludeSinksAndWindow) {
  const int H = 4, Hkv = 2, D = 32;
  const auto inv = test::inv_freq_of(D, 10000.0);
  const IhipParams hp = parse_ihip_params(kSmall);
  const IhipRopeTable table = ihip_rope_table(inv.data(), D, ihip_rope_positions(hp, 1200));
  auto pr = test::make_problem(128, 1000, H, Hkv, D, 23);
  for (const int layer : {0, 2}) {
    pr.p.layer = layer;
    std::vector<std::vector<int32_t>> outs;
    ihip_prune_block({.hp = hp, .p = pr.p, .table = &table, .row0 = 64, .rows = 64}, 0, outs);
    ASSERT_EQ(outs.size(), 3u);
    const int64_t q_last = 1000 + 127, cand_end = q_last - hp.n_stream + 1;
    std::vector<int32_t> cand;
    for (int64_t j = hp.n_sink; j < cand_end; ++j) cand.push_back(int32_t(j));
    for (int i = 0; i < 3; ++i) {
      const IhipStage st = ihip_stage(hp, layer, i);
      const OracleIn o{.p = &pr.p, .row0 = 64, .rows = 64, .mode = hp.rope_mode(layer), .inv = &inv, .n_stream = hp.n_stream};
      cand = oracle_stage(st, o, cand);
      EXPECT_EQ(outs[size_t(i)], cand) << "layer " << layer << " stage " << i;
    }
    EXPECT_EQ(int64_t(outs[2].size()), layer == 0 ? 32 : 16);
    EXPECT_GE(outs[2].front(), hp.n_sink);
    EXPECT_LT(outs[2].back(), cand_end);
    const IhipKeySet ks = ihip_key_set(hp, q_last, outs[2]);
    const auto keys = ks.keys();
    EXPECT_TRUE(std::adjacent_find(keys.begin(), keys.end(), [](int32_t a, int32_t b) { return b <= a; }) == keys.end());
    EXPECT_EQ(int64_t(keys.size()), hp.n_sink + int64_t(outs[2].size()) + hp.n_stream);
    EXPECT_EQ(keys.back(), q_last);
  }
}

// rope=off: the chunk's index through the sparse mainloop equals fp64 dense attention with the
// same mask (chunked prefill: the chunk starts at 900; 150 rows, a short last block).
TEST(IhipMethod, RotatedPrefillEqualsDenseWithTheSameMask) {
  const int H = 4, Hkv = 2, D = 32;
  const auto m = make_attention_method(std::string("infinitehip=") + kSmall + ",rope=off", ctx());
  EXPECT_EQ(m->needs().keys, KeyLayout::rotated);
  auto st = m->start_sequence();
  for (const int layer : {0, 3}) {
    auto pr = test::make_problem(150, 900, H, Hkv, D, 30 + layer);
    pr.p.layer = layer;
    ASSERT_EQ(m->route(step_of(pr.p, Phase::prefill)), Route::sparse);
    const SparseIndex idx = m->build_index(pr.p, Phase::prefill, *st, pool());
    validate_sparse_index(idx, pr.p.n_q, pr.p.n_kv, H);
    ASSERT_EQ(idx.heads[0].n_blocks(), 3);
    attend_cpu({.method = *m, .state = *st, .phase = Phase::prefill}, pr.p, pool());
    const auto want = test::oracle_attention(pr.p, test::index_mask(idx, H));
    const auto e = test::compare(pr.o, pr.lse, want);
    EXPECT_LT(e.o, test::kTolO);
    EXPECT_LT(e.lse, test::kTolLse);
    // Work: sinks + survivors + window per block, far below dense.
    EXPECT_LT(index_kernel_pairs(idx, pr.p.n_q, pr.p.q_pos0, pr.p.n_kv, H),
              dense_causal_pairs(pr.p.n_q, pr.p.q_pos0, H) / 4);
  }
}

// rope=on: each 64-row block attends its key set re-numbered 0..L-1 (StreamingLLM-style: the
// block's last row at L - 1), equal to the fp64 compacted oracle; a short step is plain dense.
TEST(IhipMethod, PreRopePrefillEqualsCompactedOracle) {
  const int H = 4, Hkv = 2, D = 32;
  const auto inv = test::inv_freq_of(D, 10000.0);
  const LayerRope rope{inv.data(), 1.f};
  const auto m = make_attention_method(std::string("infinitehip=") + kSmall, ctx());
  EXPECT_EQ(m->needs().keys, KeyLayout::pre_rope);
  auto st = m->start_sequence();
  auto pr = test::make_problem(150, 900, H, Hkv, D, 40);
  pr.p.layer = 1;
  const auto segs = m->select_keys(pr.p, Phase::prefill, rope, *st, pool());
  ASSERT_EQ(segs.size(), 3u);
  attend_cpu({.method = *m, .state = *st, .phase = Phase::prefill, .rope = &rope}, pr.p, pool());
  double err = 0;
  for (const KeySegment& s : segs) {
    EXPECT_EQ(int64_t(s.keys.size()), 16 + 16 + 64);  // sinks + layer 1's last k + window
    const auto want = test::compacted_oracle(pr.p, s, inv);
    for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(want[i] - pr.o[size_t(s.q_begin * H * D) + i]));
  }
  EXPECT_LT(err, 2e-5);
  // Nothing to prune (candidates fit the smallest k): every key at its own position.
  auto small = test::make_problem(20, 70, H, Hkv, D, 41);  // 90 keys: 10 candidates <= 16
  small.p.layer = 1;
  const auto all = m->select_keys(small.p, Phase::prefill, rope, *st, pool());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(int64_t(all[0].keys.size()), 90);
}

// Decode: per-layer stage caches refreshed on the (8, 4, 2) schedule: over 16 steps stage 1
// refreshes 2x, stage 2 alone 2x, stage 3 alone 4x, 8 steps are cached (the None / S1 / S1&2 /
// All counts); a cached step attends the cached survivors with the window anchored at the last
// stage-1 refresh; a refresh from stage i equals pruning stage i.. on the cached stage i-1 output
// with the current query; a position that goes back (a new request) refreshes everything.
TEST(IhipDecode, StageCachesFollowTheRefreshSchedule) {
  const int H = 4, Hkv = 2, D = 32, n0 = 1000, steps = 16;
  const auto m = make_attention_method(std::string("infinitehip=") + kSmall + ",rope=off", ctx());
  const auto& ih = dynamic_cast<const InfiniteHipMethod&>(*m);
  auto st0 = m->start_sequence();
  auto& st = static_cast<InfiniteHipMethod::State&>(*st0);
  const auto k = test::randn(size_t((n0 + steps) * Hkv * D), 50), v = test::randn(size_t((n0 + steps) * Hkv * D), 51);
  std::vector<float> o(size_t(H * D)), lse(static_cast<size_t>(H));
  std::vector<std::vector<int32_t>> stage1_at_refresh;
  for (int s = 0; s < steps; ++s) {
    const auto q = test::randn(size_t(H * D), 60 + s);
    AttnParams p;
    p.q = q.data(), p.k = k.data(), p.v = v.data(), p.o = o.data(), p.lse = lse.data();
    p.n_q = 1, p.n_kv = n0 + s + 1, p.q_pos0 = n0 + s, p.n_head = H, p.n_kv_head = Hkv, p.head_dim = D;
    p.scale = 1.f / std::sqrt(float(D)), p.causal = true, p.layer = 2;
    const auto before = st.refreshes;
    const auto cached_before = st.layers.size() > 2 ? st.layers[2].outs : std::vector<std::vector<int32_t>>{};
    const SparseIndex idx = m->build_index(p, Phase::decode, *st0, pool());
    const auto& c = st.layers[2];
    int first = 3;
    for (int i = 0; i < 3; ++i)
      if (st.refreshes[size_t(i)] != (before.empty() ? 0 : before[size_t(i)])) first = i;
    const int want_first = s % 8 == 0 ? 0 : s % 4 == 0 ? 1 : s % 2 == 0 ? 2 : 3;
    EXPECT_EQ(first, want_first) << "step " << s;
    if (first > 0 && first < 3) {  // refreshed from cached input with the current query
      std::vector<std::vector<int32_t>> outs = cached_before;
      ihip_prune_block({.hp = ih.params(), .p = p, .table = nullptr, .row0 = 0, .rows = 1}, first, outs);
      EXPECT_EQ(outs, c.outs) << "step " << s;
    }
    if (first == 3) {
      EXPECT_EQ(c.outs, cached_before);
    }
    EXPECT_EQ(c.win_begin, ihip_candidate_end(ih.params(), n0 + (s / 8) * 8));
    // The index: sinks, the cached survivors, the anchored window up to the query; and the output
    // equals the fp64 oracle over that mask.
    const std::vector<int32_t> want_keys = IhipKeySet{16, c.outs[2], c.win_begin, p.n_kv}.keys();
    const auto mask = test::index_mask(idx, H);
    for (int64_t j = 0; j < p.n_kv; ++j)
      EXPECT_EQ(mask(0, 0, j), std::binary_search(want_keys.begin(), want_keys.end(), int32_t(j))) << j;
    attend_cpu({.method = *m, .state = *st0, .phase = Phase::decode}, p, pool());
    const auto e = test::compare(o, lse, test::oracle_attention(p, mask));
    EXPECT_LT(e.o, test::kTolO);
  }
  EXPECT_EQ(st.refreshes, (std::vector<int64_t>{2, 2, 4}));
  EXPECT_EQ(st.cached_steps, 8 + 16);  // attend_cpu repeats each step: the repeat is cached
  // A new request (position back at the start) refreshes from stage 1.
  const auto q = test::randn(size_t(H * D), 99);
  AttnParams p;
  p.q = q.data(), p.k = k.data(), p.v = v.data(), p.o = o.data(), p.lse = lse.data();
  p.n_q = 1, p.n_kv = n0 + 1, p.q_pos0 = n0, p.n_head = H, p.n_kv_head = Hkv, p.head_dim = D;
  p.scale = 1.f / std::sqrt(float(D)), p.causal = true, p.layer = 2;
  (void)m->build_index(p, Phase::decode, *st0, pool());
  EXPECT_EQ(st.refreshes[0], 3);
}

TEST(IhipSpec, PresetsOptionsErrorsAndComposition) {
  const auto c = ctx();
  const auto name = [&](const std::string& s) { return make_attention_method(s, c)->name(); };
  EXPECT_EQ(name("infinitehip"),
            "infinitehip=l_c=256/32/8,k=32768/8192/2048,refresh=16/8/4,b_q=64,n_sink=256,n_stream=1024,early_layers=3,"
            "k_early=4096,rope=on");
  EXPECT_EQ(name("infinitehip=3k-fast"), name("infinitehip=refresh=32/16/8"));
  EXPECT_EQ(name("infinitehip=3k-flash"), name("infinitehip=refresh=96/24/8"));
  EXPECT_EQ(name("infinitehip=5k"),
            "infinitehip=l_c=64/32/16,k=32768/16384/4096,refresh=16/8/4,b_q=64,n_sink=256,n_stream=1024,early_layers=3,"
            "k_early=4096,rope=on");
  const std::string custom = name("infinitehip=5k,rope=off,dense_layers=0+2-3,n_sink=128");
  EXPECT_EQ(name(custom), custom);  // the canonical spec parses back to itself
  EXPECT_NE(custom.find("dense_layers=0+2+3"), std::string::npos);
  const std::string local = name("infinitehip=3k,rank=local");  // rank=local round-trips; paper is the default
  EXPECT_EQ(local, name("infinitehip") + ",rank=local");
  EXPECT_EQ(name(local), local);
  EXPECT_EQ(name("infinitehip=rank=paper"), name("infinitehip"));
  EXPECT_EQ(parse_ihip_params("rank=local").rank, IhipRank::local);
  const auto m = make_attention_method("infinitehip=dense_layers=1", c);
  EXPECT_EQ(m->route({.layer = 1, .phase = Phase::decode, .n_q = 1, .q_pos0 = 100000, .n_kv = 100001}), Route::dense);
  EXPECT_EQ(m->route({.layer = 3, .phase = Phase::decode, .n_q = 1, .q_pos0 = 100000, .n_kv = 100001}), Route::sparse);
  // Short contexts are dense: 256 + 1024 + 2048 candidates fit.
  EXPECT_EQ(m->route({.layer = 3, .phase = Phase::decode, .n_q = 1, .q_pos0 = 3327, .n_kv = 3328}), Route::dense);
  EXPECT_EQ(m->route({.layer = 3, .phase = Phase::decode, .n_q = 1, .q_pos0 = 3328, .n_kv = 3329}), Route::sparse);

  for (const auto& [spec, says] : std::vector<std::pair<std::string, std::string>>{
           {"infinitehip=4k", "unknown preset '4k'"},
           {"infinitehip=3k,foo=1", "unknown key 'foo'"},
           {"infinitehip=l_c=256/32,k=32768/8192/2048", "l_c has 2 stages but k has 3"},
           {"infinitehip=l_c=256/32,k=32768/8192", "refresh has 3 entries for 2 stages"},
           {"infinitehip=k=32768/8192/2050", "multiple of l_c"},
           {"infinitehip=l_c=256/48/8,k=32768/9600/2048", "must divide"},
           {"infinitehip=b_q=32", "b_q must be 64"},
           {"infinitehip=rope=maybe", "rope must be on or off"},
           {"infinitehip=n_stream=16", "n_stream (16) must be >= b_q"},
           {"infinitehip=dense_layers=4", "the model has 4 layers"},
           {"infinitehip=refresh=16/0/4", "refresh of stage 2"},
           {"infinitehip=rank=maybe", "rank must be paper or local"},
       })
    EXPECT_NE(error_of([&] { make_attention_method(spec, c); }).find(says), std::string::npos) << spec;

  // Dense decode and composition through the spec syntax.
  const auto pre = make_attention_method("prefill:infinitehip", c);
  EXPECT_EQ(pre->route({.layer = 3, .phase = Phase::decode, .n_q = 1, .q_pos0 = 100000, .n_kv = 100001}), Route::dense);
  EXPECT_EQ(pre->needs().keys, KeyLayout::pre_rope);
  const auto mix = make_attention_method("a_shape=64,256;decode:infinitehip=rope=off", c);
  EXPECT_EQ(mix->name(), "prefill:a_shape=64,256;decode:" + name("infinitehip=rope=off"));
  EXPECT_NE(error_of([&] { make_attention_method("a_shape=64,256;decode:infinitehip", c); }).find("key layouts"),
            std::string::npos);
}

// ---- rank=local (IhipStageInput::offset): probes rank by q.k minus the row's largest local logit.

// The offsets' definition on a small case, every RoPE mode, a block and a single row (rows past
// the first see fewer window keys: causal): ihip_local_offsets equals the fp64 oracle's.
TEST(IhipRankLocal, OffsetsAreEachRowsLargestLocalLogit) {
  const int H = 4, Hkv = 2, D = 32;
  const auto inv = test::inv_freq_of(D, 10000.0);
  const IhipRopeTable table = ihip_rope_table(inv.data(), D, 4096);
  auto pr = test::make_problem(64, 300, H, Hkv, D, 31);
  int checked = 0;
  for (const IhipRopeMode mode : {IhipRopeMode::none, IhipRopeMode::relative, IhipRopeMode::chunk_indexed})
    for (const int64_t rows : {64, 1}) {
      const int64_t n_chunk = 7, row0 = 64 - rows, pos0 = pr.p.q_pos0 + row0;
      const OracleIn o{.p = &pr.p, .row0 = row0, .rows = rows, .mode = mode, .inv = &inv, .n_stream = 96, .n_sink = 16};
      std::vector<float> q, off;
      ihip_pack_queries(pr.p.q, H, Hkv, D, row0, rows, pos0, mode, &table, n_chunk, o.n_stream, q);
      const IhipStageInput in{.q = q.data(), .n_qs = int(H / Hkv * rows), .k = pr.p.k, .k_stride = int64_t(Hkv) * D,
                              .n_kv_head = Hkv, .head_dim = D, .rope = mode, .table = &table};
      const int64_t win = std::max<int64_t>(16, pos0 + rows - 1 - 96 + 1);
      ihip_local_offsets(in, {.rows = rows, .pos0 = pos0, .n_sink = 16, .win_begin = win, .n_chunk = n_chunk}, off);
      const std::vector<double> want = offsets_d(o, n_chunk);
      ASSERT_EQ(off.size(), want.size());
      for (size_t i = 0; i < off.size(); ++i)
        EXPECT_NEAR(off[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << int(mode) << " rows " << rows << " t " << i;
      ++checked;
    }
  EXPECT_EQ(checked, 6);
  EXPECT_EQ(ihip_local_key_pos(IhipRopeMode::relative, 9), 0);
  EXPECT_EQ(ihip_local_key_pos(IhipRopeMode::chunk_indexed, 9), 8);
}

// Multi-stage with rank=local (ihip_prune_block computes each stage's offsets): every stage
// equals the fp64 oracle's, in an early (chunk-indexed) and a later (relative) layer and with
// RoPE none, and the lists differ from the paper's rule somewhere (the option changes something).
TEST(IhipRankLocal, StagesEqualTheFp64OracleWithOffsets) {
  const int H = 4, Hkv = 2, D = 32;
  const auto inv = test::inv_freq_of(D, 10000.0);
  auto pr = test::make_problem(128, 1000, H, Hkv, D, 32);
  bool differs = false;
  for (const char* rope : {"on", "off"}) {
    const IhipParams hp = parse_ihip_params(std::string(kSmall) + ",rank=local,rope=" + rope);
    const IhipParams paper = parse_ihip_params(std::string(kSmall) + ",rope=" + rope);
    const IhipRopeTable table = ihip_rope_table(inv.data(), D, ihip_rope_positions(hp, 1200));
    for (const int layer : {0, 2}) {
      pr.p.layer = layer;
      std::vector<std::vector<int32_t>> outs, outs_paper;
      ihip_prune_block({.hp = hp, .p = pr.p, .table = &table, .row0 = 64, .rows = 64}, 0, outs);
      ihip_prune_block({.hp = paper, .p = pr.p, .table = &table, .row0 = 64, .rows = 64}, 0, outs_paper);
      std::vector<int32_t> cand;
      for (int64_t j = hp.n_sink; j < ihip_candidate_end(hp, 1000 + 127); ++j) cand.push_back(int32_t(j));
      for (int i = 0; i < hp.n_stage(); ++i) {
        const OracleIn o{.p = &pr.p, .row0 = 64, .rows = 64, .mode = hp.rope_mode(layer), .inv = &inv,
                         .n_stream = hp.n_stream, .n_sink = hp.n_sink};
        cand = oracle_stage(ihip_stage(hp, layer, i), o, cand);
        EXPECT_EQ(outs[size_t(i)], cand) << "rope " << rope << " layer " << layer << " stage " << i;
      }
      differs |= outs != outs_paper;
    }
  }
  EXPECT_TRUE(differs);
}

// Exact-integer keys and queries (every dot exact in fp32, so no tolerance): KV head 0 is loud
// (every logit 8..12), KV head 1 quiet (local logits 0..1) with its needle (logit 5) in chunk 0.
// The paper's rule ranks chunk 3 first (head 0's 11 beats the needle's 5); with offsets (head 0:
// 12, head 1: 1) the needle's 5 - 1 = 4 beats head 0's best 11 - 12 = -1 and chunk 0 is kept.
struct LoudQuiet {
  static constexpr int D = 64, Hkv = 2, n_key = 22;  // sinks 0-1, candidates 2..17 (4 chunks of 4), window 18..21
  std::vector<float> k = std::vector<float>(size_t(n_key * Hkv * D), 0.f), q = std::vector<float>(size_t(Hkv * D), 0.f);
  LoudQuiet() {
    for (int g = 0; g < Hkv; ++g) q[size_t(g * D)] = 1.f;  // q = e0: the dot is the key's element 0
    for (int j = 0; j < n_key; ++j) {
      const bool local = j < 2 || j >= 18;
      set(j, 0, local ? 12.f : float(8 + (j - 2) / 4));
      set(j, 1, j >= 18 ? 1.f : 0.f);
      for (int e = 1; e < D; ++e) k[size_t((j * Hkv + 1) * D + e)] = float((j * 7 + e) % 5) - 2.f;  // q ignores these
    }
    set(3, 1, 5.f);  // the needle: chunk 0, entry 1
  }
  void set(int j, int g, float v) { k[size_t((j * Hkv + g) * D)] = v; }
  IhipStageInput input(const float* offset) const {
    return {.q = q.data(), .n_qs = 1, .k = k.data(), .k_stride = Hkv * D, .n_kv_head = Hkv, .head_dim = D,
            .rope = IhipRopeMode::none, .offset = offset};
  }
};

TEST(IhipRankLocal, QuietHeadsNeedleIsLostByRawLogitsAndKeptWithOffsets) {
  const LoudQuiet c;
  std::vector<int32_t> cand(16);
  std::iota(cand.begin(), cand.end(), 2);
  std::vector<float> off;
  ihip_local_offsets(c.input(nullptr), {.rows = 1, .pos0 = 21, .n_sink = 2, .win_begin = 18, .n_chunk = 4}, off);
  EXPECT_EQ(off, (std::vector<float>{12.f, 1.f}));
  const IhipStage st{4, 4};
  EXPECT_EQ(ihip_chunk_scores(st, c.input(nullptr), cand), (std::vector<float>{8.f, 9.f, 10.f, 11.f}));
  EXPECT_EQ(ihip_chunk_scores(st, c.input(off.data()), cand), (std::vector<float>{4.f, -1.f, -1.f, -1.f}));
  std::vector<int32_t> raw, local;
  ihip_prune_stage(st, c.input(nullptr), cand, raw);
  ihip_prune_stage(st, c.input(off.data()), cand, local);
  EXPECT_EQ(raw, (std::vector<int32_t>{14, 15, 16, 17}));
  EXPECT_EQ(local, (std::vector<int32_t>{2, 3, 4, 5}));
}

// Ties after the offsets (exact integers): a second needle of the same logit in chunk 2 ties with
// chunk 0's (4 = 4), and chunk 0, the earlier, is kept; with K = 2 both needles' chunks are.
TEST(IhipRankLocal, ExactIntegerTiesKeepTheEarliestChunk) {
  LoudQuiet c;
  c.set(11, 1, 5.f);  // chunk 2, entry 1
  std::vector<int32_t> cand(16);
  std::iota(cand.begin(), cand.end(), 2);
  const std::vector<float> off{12.f, 1.f};
  EXPECT_EQ(ihip_chunk_scores({4, 4}, c.input(off.data()), cand), (std::vector<float>{4.f, -1.f, 4.f, -1.f}));
  std::vector<int32_t> out;
  ihip_prune_stage({4, 4}, c.input(off.data()), cand, out);
  EXPECT_EQ(out, (std::vector<int32_t>{2, 3, 4, 5}));
  ihip_prune_stage({4, 8}, c.input(off.data()), cand, out);
  EXPECT_EQ(out, (std::vector<int32_t>{2, 3, 4, 5, 10, 11, 12, 13}));
}

}  // namespace
}  // namespace longctx

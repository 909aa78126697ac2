// test_minference_index.cpp (tests/cuda): the GPU MInference index builders
// (kernels/cuda/minference_index.h) against the CPU builders of src/sparse, the source of truth,
// on fresh random bf16 Q/K (rounded to bf16 before the CPU sees them as fp32; seed printed).
//
// How the comparison stays honest although fp32 sums differ in order between GPU and CPU:
//   1. selection: the GPU's selected lines (VS verticals / slash offsets) and blocks (BS, per
//      query block) must equal the CPU's, except for swaps between near-ties: every line only one
//      side picked must score within a relative 1e-4 of the CPU's k-th score (CPU scores; for BS
//      computed here in fp64), and at most max(2, k/50) lines per selection may differ;
//   2. conversion: the GPU's ranges/columns must equal, exactly, what the CPU conversion makes of
//      the GPU's own selection (convert_vs_index for VS; the block merge for BS), and where both
//      selections agree this is the CPU builder's index itself; A-shape must equal exactly;
//   3. VS scores directly (builds without BS heads): every GPU column/diagonal sum within 1e-4
//      relative of the CPU's;
//   4. end to end: sparse_attention() on the GPU-built index == an fp64 oracle with that index's
//      mask (and the index is the CPU's up to near-tie swaps, by 1-2).
// Shapes: GQA 8/2 d=128, SmolLM2's 9/3 d=64 and Gemma 3's d=256 (4/1, 8/4, 16/8); chunked
// prefill (q_pos0 > 0, n_q % 64 != 0, off the 64 grid); tiny prompts (< 64 tokens); budgets
// larger than the prompt; mixed patterns per head; multi-chunk VS estimates (20K keys);
// block-sparse waves split by heads and by rows and
// rows selected from global memory; long block-sparse rows (~600 key blocks, budgets up to 100);
// exact block-sparse ties (zero queries, periodic keys: the selection must equal the CPU's
// exactly); one builder reused across growing and shrinking builds; prompt-wide VS lines
// (estimate_vs) reused by later chunks.
// Run: build-mindex/tests/cuda/test_minference_index (skips without a Hopper GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/minference_index.h"
#include "kernels/cuda/sparse_attention.h"
#include "kernels/params/attention.h"
#include "methods/a_shape/a_shape_index.h"
#include "methods/minference/block_sparse_index.h"
#include "sparse/sparse_index.h"
#include "methods/minference/vs_convert.h"
#include "methods/minference/vs_estimate.h"
#include "test_util.h"
#include "util/error.h"

namespace longctx::cuda::test {
namespace {

constexpr double kRelTie = 1e-4;  // a "near-tie": within this relative distance of the k-th score
constexpr int64_t kTiePeriod = 37;  // key-block period of the repeating-keys tie inputs (Case::ties == 2)

GpuHeadPattern VS(int64_t kv, int64_t ks) { return {GpuPatternKind::VerticalSlash, kv, ks}; }
GpuHeadPattern BS(int64_t kb) { return {GpuPatternKind::BlockSparse, kb, 0}; }
GpuHeadPattern AS(int64_t sink, int64_t window) { return {GpuPatternKind::AShape, sink, window}; }

struct Case {
  std::string name;
  int n_head = 8, n_kv_head = 2, d = 128;
  int64_t n_q = 0, q_pos0 = 0;
  std::vector<GpuHeadPattern> heads;
  int64_t bs_wave_bytes = 0;
  bool rows_in_global = false;
  // Exact ties (block-sparse tie-break): 0 random inputs; 1 zero queries (every pooled score is
  // 0, forced blocks +inf); 2 key blocks repeating with period kTiePeriod (each pooled score
  // recurs exactly every kTiePeriod blocks). With ties, the BS selections must equal the CPU's
  // exactly (score desc, then the smaller block), not merely up to near-tie swaps.
  int ties = 0;
  int64_t n_kv() const { return q_pos0 + n_q; }
};

// Random inputs, bf16 on the device and the same values as fp32 for the CPU builders.
struct Inputs {
  std::vector<uint16_t> qh, kh;
  std::vector<float> qf, kf;
  std::vector<double> qd, kd;
};
Inputs make_inputs(const Case& c) {
  Inputs in;
  in.qh = random_bf16(size_t(c.n_q) * c.n_head * c.d, 1.0, in.qd);
  in.kh = random_bf16(size_t(c.n_kv()) * c.n_kv_head * c.d, 1.0, in.kd);
  if (c.ties == 1) {
    std::fill(in.qh.begin(), in.qh.end(), uint16_t(0));
    std::fill(in.qd.begin(), in.qd.end(), 0.0);
  } else if (c.ties == 2) {
    const size_t row = size_t(c.n_kv_head) * c.d, period = size_t(kTiePeriod) * 64 * row;
    for (size_t i = period; i < in.kh.size(); ++i) {
      in.kh[i] = in.kh[i - period];
      in.kd[i] = in.kd[i - period];
    }
  }
  in.qf.assign(in.qd.begin(), in.qd.end());
  in.kf.assign(in.kd.begin(), in.kd.end());
  return in;
}

AttnParams cpu_params(const Case& c, const Inputs& in) {
  AttnParams p;
  p.q = in.qf.data();
  p.k = in.kf.data();
  p.n_q = c.n_q;
  p.n_kv = c.n_kv();
  p.n_head = c.n_head;
  p.n_kv_head = c.n_kv_head;
  p.head_dim = c.d;
  p.q_pos0 = c.q_pos0;
  p.scale = 1.f / std::sqrt(float(c.d));
  p.causal = true;
  return p;
}

// The GPU index downloaded into the CPU format (one HeadIndex per query head).
SparseIndex download(const DeviceSparseIndex& ix, int64_t n_q) {
  const int64_t rows = int64_t(ix.n_index_head) * ix.n_qblk;
  std::vector<int64_t> rp(size_t(rows + 1)), cp(size_t(rows + 1));
  copy_d2h(rp.data(), ix.range_ptr, rp.size() * 8);
  copy_d2h(cp.data(), ix.col_ptr, cp.size() * 8);
  EXPECT_EQ(rp.back(), ix.n_ranges);
  EXPECT_EQ(cp.back(), ix.n_cols);
  std::vector<int32_t> rg(size_t(2 * ix.n_ranges)), cl(size_t(ix.n_cols));
  if (!rg.empty()) copy_d2h(rg.data(), ix.ranges, rg.size() * 4);
  if (!cl.empty()) copy_d2h(cl.data(), ix.cols, cl.size() * 4);
  SparseIndex out;
  out.n_q = n_q;
  out.heads.resize(size_t(ix.n_index_head));
  for (int h = 0; h < ix.n_index_head; ++h) {
    HeadIndex& hi = out.heads[size_t(h)];
    for (int64_t b = 0; b < ix.n_qblk; ++b) {
      const int64_t r = h * ix.n_qblk + b;
      for (int64_t i = rp[r]; i < rp[r + 1]; ++i) hi.ranges.push_back({rg[2 * i], rg[2 * i + 1]});
      for (int64_t i = cp[r]; i < cp[r + 1]; ++i) hi.cols.push_back(cl[i]);
      hi.end_block();
    }
  }
  return out;
}

std::string block_str(const HeadIndex& hi, int64_t b) {
  std::string s = "ranges";
  for (const auto& r : hi.block_ranges(b)) s += " [" + std::to_string(r.start) + "," + std::to_string(r.end) + ")";
  s += " cols(" + std::to_string(hi.block_cols(b).size()) + ")";
  int n = 0;
  for (int32_t c : hi.block_cols(b)) {
    if (n++ == 12) {
      s += " ...";
      break;
    }
    s += " " + std::to_string(c);
  }
  return s;
}

// Exact equality of two heads' indices; reports the first differing block.
bool same_head(const HeadIndex& got, const HeadIndex& want, const std::string& what) {
  EXPECT_EQ(got.n_blocks(), want.n_blocks()) << what;
  if (got.n_blocks() != want.n_blocks()) return false;
  for (int64_t b = 0; b < got.n_blocks(); ++b) {
    const auto gr = got.block_ranges(b), wr = want.block_ranges(b);
    const auto gc = got.block_cols(b), wc = want.block_cols(b);
    bool same = gr.size() == wr.size() && gc.size() == wc.size();
    for (size_t i = 0; same && i < gr.size(); ++i) same = gr[i].start == wr[i].start && gr[i].end == wr[i].end;
    for (size_t i = 0; same && i < gc.size(); ++i) same = gc[i] == wc[i];
    if (!same) {
      ADD_FAILURE() << what << ": block " << b << " differs\n  gpu: " << block_str(got, b)
                    << "\n  cpu: " << block_str(want, b);
      return false;
    }
  }
  return true;
}

// Compares two top-k selections (ascending indices) of the same scores. Returns the number of
// lines picked by only one side; fails unless each of them is a near-tie of the CPU's k-th score.
int64_t compare_selection(const std::vector<double>& score, const std::vector<int32_t>& cpu,
                          const std::vector<int32_t>& gpu, double eps, const std::string& what) {
  EXPECT_EQ(gpu.size(), cpu.size()) << what;
  EXPECT_TRUE(std::is_sorted(gpu.begin(), gpu.end())) << what << ": GPU selection not ascending";
  EXPECT_TRUE(std::adjacent_find(gpu.begin(), gpu.end()) == gpu.end()) << what << ": GPU selection repeats";
  std::vector<int32_t> only_cpu, only_gpu;
  std::set_difference(cpu.begin(), cpu.end(), gpu.begin(), gpu.end(), std::back_inserter(only_cpu));
  std::set_difference(gpu.begin(), gpu.end(), cpu.begin(), cpu.end(), std::back_inserter(only_gpu));
  if (only_cpu.empty() && only_gpu.empty()) return 0;
  double kth = std::numeric_limits<double>::infinity();
  for (int32_t i : cpu) kth = std::min(kth, score[size_t(i)]);
  const double tol = eps;
  for (int32_t x : only_gpu)
    EXPECT_GE(score[size_t(x)], kth - tol) << what << ": GPU picked " << x << " (score " << score[size_t(x)]
                                           << ") well below the CPU's k-th score " << kth;
  for (int32_t y : only_cpu)
    EXPECT_LE(score[size_t(y)], kth + tol) << what << ": GPU dropped " << y << " (score " << score[size_t(y)]
                                           << ") well above the CPU's k-th score " << kth;
  const size_t allowed = std::max<size_t>(2, cpu.size() / 50);
  EXPECT_LE(only_gpu.size(), allowed) << what << ": too many differing lines";
  return int64_t(only_gpu.size());
}

struct Stats {
  int64_t selections = 0, exact = 0, swapped_lines = 0;
};

// Builds case c on the GPU (with builder b when given) and checks every head as described in the
// file comment. Returns the GPU index (downloaded).
SparseIndex check_case(const Case& c, MinferenceIndexBuilder* shared = nullptr, const Inputs* given = nullptr,
                       Stats* total = nullptr) {
  const Inputs in_local = given ? Inputs{} : make_inputs(c);
  const Inputs& in = given ? *given : in_local;
  DevBuf q(in.qh.size() * 2), k(in.kh.size() * 2);
  q.upload(in.qh);
  k.upload(in.kh);
  MinferenceBuilderShape shape;
  shape.n_head = c.n_head;
  shape.n_kv_head = c.n_kv_head;
  shape.head_dim = c.d;
  shape.max_q = c.n_q;
  shape.max_kv = c.n_kv();
  shape.bs_wave_bytes = c.bs_wave_bytes;
  shape.bs_rows_in_global = c.rows_in_global;
  std::unique_ptr<MinferenceIndexBuilder> own;
  if (!shared) own = std::make_unique<MinferenceIndexBuilder>(shape);
  MinferenceIndexBuilder& builder = shared ? *shared : *own;
  MinferenceIndexParams mp;
  mp.q = q.p;
  mp.k = k.p;
  mp.n_q = c.n_q;
  mp.n_kv = c.n_kv();
  mp.q_pos0 = c.q_pos0;
  mp.heads = c.heads;
  const DeviceSparseIndex dix = builder.build(mp);
  device_sync();
  EXPECT_EQ(dix.n_index_head, c.n_head);
  EXPECT_EQ(dix.n_qblk, n_query_blocks(c.n_q));
  const SparseIndex got = download(dix, c.n_q);

  const AttnParams p = cpu_params(c, in);
  const int group = c.n_head / c.n_kv_head;
  const int64_t n_keys = c.n_kv();
  bool any_bs = false;
  for (const auto& hp : c.heads) any_bs |= hp.kind == GpuPatternKind::BlockSparse;
  Stats st;
  for (int h = 0; h < c.n_head; ++h) {
    const GpuHeadPattern& hp = c.heads[size_t(h)];
    const std::string what = c.name + " head " + std::to_string(h);
    const HeadIndex& gh = got.heads[size_t(h)];
    if (hp.kind == GpuPatternKind::AShape) {
      HeadIndex want;
      build_a_shape_index({.sink = hp.vertical, .window = hp.slash}, c.n_q, c.q_pos0, c.n_kv(), want);
      same_head(gh, want, what + " (a_shape)");
      EXPECT_TRUE(gh.cols.empty());
      continue;
    }
    const GpuHeadSelection sel = builder.selection(h, hp.kind == GpuPatternKind::VerticalSlash && !any_bs);
    if (hp.kind == GpuPatternKind::VerticalSlash) {
      VsScores sc;
      estimate_vs_scores(p, h, sc);
      VsLines cl;
      select_vs_lines(sc, hp.vertical, hp.slash, cl);
      // Scores as select_vs_lines ranks them (forced lines +inf).
      std::vector<double> vs(sc.vertical.begin(), sc.vertical.end()), ss(sc.slash.begin(), sc.slash.end());
      for (int64_t j = 0; j < std::min<int64_t>(kForcedSinkColumns, n_keys); ++j) vs[size_t(j)] = INFINITY;
      for (int64_t o = 0; o < std::min<int64_t>(kForcedLocalDiagonals, n_keys); ++o) ss[size_t(o)] = INFINITY;
      auto eps_of = [](const std::vector<double>& s, const std::vector<int32_t>& sel_cpu) {
        double kth = INFINITY;
        for (int32_t i : sel_cpu) kth = std::min(kth, s[size_t(i)]);
        return std::isfinite(kth) ? kRelTie * std::fabs(kth) + 1e-12 : 0.0;
      };
      const int64_t dv = compare_selection(vs, cl.vertical, sel.vertical, eps_of(vs, cl.vertical), what + " verticals");
      const int64_t ds = compare_selection(ss, cl.slash, sel.slash, eps_of(ss, cl.slash), what + " slashes");
      st.selections += 2;
      st.exact += (dv == 0) + (ds == 0);
      st.swapped_lines += dv + ds;
      if (!any_bs) {  // direct score check
        EXPECT_EQ(sel.vertical_score.size(), size_t(n_keys));
        EXPECT_EQ(sel.slash_score.size(), size_t(n_keys));
      }
      if (!any_bs && sel.vertical_score.size() == size_t(n_keys) && sel.slash_score.size() == size_t(n_keys)) {
        int64_t bad = 0;
        double worst = 0;
        for (int64_t j = 0; j < n_keys; ++j)
          for (int which = 0; which < 2; ++which) {
            const double g = which ? sel.slash_score[size_t(j)] : sel.vertical_score[size_t(j)];
            const double w = which ? ss[size_t(j)] : vs[size_t(j)];
            if (std::isinf(w)) {
              bad += !(std::isinf(g) && g > 0);
              continue;
            }
            const double rel = std::fabs(g - w) / std::max(std::fabs(w), 1e-30);
            worst = std::max(worst, rel);
            bad += !(rel <= kRelTie);
          }
        EXPECT_EQ(bad, 0) << what << ": VS scores off by up to " << worst << " (relative)";
      }
      // Conversion: exactly the CPU's Algorithm 4 on the GPU's lines.
      HeadIndex want;
      convert_vs_index({sel.vertical, sel.slash}, c.n_q, c.q_pos0, c.n_kv(), want);
      same_head(gh, want, what + " (vertical-slash conversion)");
    } else {
      std::vector<float> pooled;
      pool_keys(p, h / group, pooled);
      HeadIndex cpu;
      build_block_sparse_index(p, h, hp.vertical, pooled, cpu);
      // Pooled scores in fp64 (ranking scores only; forced diagonal blocks +inf).
      const int d = c.d;
      const int64_t nkb = (n_keys + 63) / 64;
      std::vector<double> kbar(size_t(nkb * d), 0.0);
      for (int64_t cb = 0; cb < nkb; ++cb) {
        const int64_t j0 = cb * 64, j1 = std::min(j0 + 64, n_keys);
        for (int64_t j = j0; j < j1; ++j)
          for (int t = 0; t < d; ++t) kbar[size_t(cb * d + t)] += in.kd[(size_t(j) * c.n_kv_head + h / group) * d + t];
        for (int t = 0; t < d; ++t) kbar[size_t(cb * d + t)] /= double(j1 - j0);
      }
      HeadIndex want;
      for (int64_t b = 0; b < n_query_blocks(c.n_q); ++b) {
        const int64_t i0 = b * 64, i1 = std::min(i0 + 64, c.n_q);
        const int64_t first = c.q_pos0 + i0, last = c.q_pos0 + i1 - 1;
        const int64_t n_cand = std::min(nkb, last / 64 + 1), diag0 = first / 64;
        std::vector<double> qbar(size_t(d), 0.0), score(static_cast<size_t>(n_cand));
        for (int64_t i = i0; i < i1; ++i)
          for (int t = 0; t < d; ++t) qbar[size_t(t)] += in.qd[(size_t(i) * c.n_head + h) * d + t];
        double row_scale = 0;
        for (int64_t cb = 0; cb < n_cand; ++cb) {
          if (cb >= diag0) {
            score[size_t(cb)] = INFINITY;
            continue;
          }
          double s = 0;
          for (int t = 0; t < d; ++t) s += qbar[size_t(t)] * kbar[size_t(cb * d + t)];
          score[size_t(cb)] = s / double(i1 - i0) * p.scale;
          row_scale = std::max(row_scale, std::fabs(score[size_t(cb)]));
        }
        // The CPU builder's choice, read back from its merged ranges.
        std::vector<int32_t> cpu_blocks, gpu_blocks(sel.blocks.begin() + sel.block_ptr[size_t(b)],
                                                   sel.blocks.begin() + sel.block_ptr[size_t(b) + 1]);
        for (const auto& r : cpu.block_ranges(b))
          for (int32_t cb = r.start / 64; cb <= (r.end - 1) / 64; ++cb) cpu_blocks.push_back(cb);
        const int64_t dsw = compare_selection(score, cpu_blocks, gpu_blocks, kRelTie * row_scale + 1e-12,
                                              what + " block " + std::to_string(b));
        if (c.ties != 0) {
          EXPECT_EQ(gpu_blocks, cpu_blocks) << what << " block " << b << ": exact ties must break toward the smaller block";
        }
        st.selections += 1;
        st.exact += dsw == 0;
        st.swapped_lines += dsw;
        // Expected ranges of the GPU's selection: adjacent blocks merged, as build_block_sparse_index.
        for (int32_t cb : gpu_blocks) {
          const int32_t s = cb * 64, e = int32_t(std::min<int64_t>(s + 64, n_keys));
          if (want.range_ptr.back() < int64_t(want.ranges.size()) && want.ranges.back().end == s)
            want.ranges.back().end = e;
          else
            want.ranges.push_back({s, e});
        }
        want.end_block();
      }
      same_head(gh, want, what + " (block-sparse ranges)");
      EXPECT_TRUE(gh.cols.empty()) << what;
    }
  }
  std::printf("  mindex %-22s n_q=%lld q_pos0=%lld heads=%d/%d d=%d: %lld ranges %lld cols; selections %lld exact %lld, "
              "%lld near-tie swapped lines\n",
              c.name.c_str(), (long long)c.n_q, (long long)c.q_pos0, c.n_head, c.n_kv_head, c.d,
              (long long)dix.n_ranges, (long long)dix.n_cols, (long long)st.selections, (long long)st.exact,
              (long long)st.swapped_lines);
  // Random inputs make exact ties rare: most selections must agree exactly.
  EXPECT_GE(double(st.exact), 0.8 * double(st.selections)) << c.name;
  EXPECT_GT(dix.n_ranges, 0) << c.name;
  if (total) {
    total->selections += st.selections;
    total->exact += st.exact;
    total->swapped_lines += st.swapped_lines;
  }
  return got;
}

// The Llama-3-8B-262K budget mix over n heads, cycling (bench/bench_sparse.cu kVsMix order).
std::vector<GpuHeadPattern> llama_vs(int n) {
  const GpuHeadPattern mix[] = {VS(1000, 6096), VS(30, 800), VS(100, 800), VS(3500, 100), VS(500, 700)};
  std::vector<GpuHeadPattern> v;
  for (int h = 0; h < n; ++h) v.push_back(mix[h % 5]);
  return v;
}

TEST(MinferenceIndex, VerticalSlashGqa) {
  LC_REQUIRE_GPU();
  check_case({.name = "vs_gqa", .n_q = 1000,
              .heads = {VS(100, 200), VS(30, 50), VS(0, 0), VS(300, 600), VS(64, 64), VS(1, 1000), VS(500, 10), VS(100, 200)}});
}

TEST(MinferenceIndex, BlockSparseGqa) {
  LC_REQUIRE_GPU();
  check_case({.name = "bs_gqa", .n_q = 1000, .heads = {BS(3), BS(8), BS(1), BS(100), BS(0), BS(5), BS(2), BS(12)}});
}

TEST(MinferenceIndex, MixedChunkedPrefill) {
  LC_REQUIRE_GPU();
  check_case({.name = "mixed_chunk", .n_q = 300, .q_pos0 = 700,
              .heads = {VS(100, 200), BS(4), AS(64, 256), VS(30, 800), BS(7), VS(200, 60), AS(0, 100), BS(2)}});
  // Off the 64 grid: two diagonal key blocks per query block; n_q % 64 != 0.
  check_case({.name = "offgrid_chunk", .n_q = 200, .q_pos0 = 130,
              .heads = {BS(3), BS(1), VS(40, 60), VS(100, 300), BS(6), AS(10, 70), VS(30, 50), BS(100)}});
  check_case({.name = "long_chunk", .n_q = 1000, .q_pos0 = 3000,
              .heads = {VS(1000, 2000), VS(30, 800), BS(20), VS(100, 800), BS(5), AS(1024, 512), VS(500, 700), BS(40)}});
}

TEST(MinferenceIndex, TinyPrompts) {
  LC_REQUIRE_GPU();
  check_case({.name = "tiny", .n_head = 4, .n_kv_head = 2, .n_q = 37,
              .heads = {VS(100, 200), BS(3), AS(4, 8), VS(30, 50)}});
  check_case({.name = "tiny_chunk", .n_head = 4, .n_kv_head = 2, .n_q = 10, .q_pos0 = 20,
              .heads = {VS(5, 5), VS(100, 100), BS(1), BS(100)}});
  check_case({.name = "one_token", .n_head = 4, .n_kv_head = 1, .n_q = 1,
              .heads = {VS(1, 1), BS(1), AS(1, 1), VS(30, 50)}});
  check_case({.name = "block_plus_one", .n_head = 4, .n_kv_head = 2, .n_q = 65,
              .heads = {VS(10, 60), VS(40, 70), BS(1), AS(2, 3)}});
}

TEST(MinferenceIndex, BudgetsLargerThanPrompt) {
  LC_REQUIRE_GPU();
  check_case({.name = "clamped", .n_head = 4, .n_kv_head = 2, .n_q = 500,
              .heads = {VS(5000, 5000), BS(1000), VS(1000, 6096), AS(100000, 100000)}});
}

TEST(MinferenceIndex, SmolLMHeadDim64) {
  LC_REQUIRE_GPU();
  check_case({.name = "smol_d64_vs", .n_head = 9, .n_kv_head = 3, .d = 64, .n_q = 2000, .heads = llama_vs(9)});
  check_case({.name = "smol_d64_mixed", .n_head = 9, .n_kv_head = 3, .d = 64, .n_q = 700, .q_pos0 = 1300,
              .heads = {VS(100, 200), BS(8), AS(64, 256), VS(30, 800), BS(3), VS(200, 60), BS(20), VS(1000, 6096),
                        AS(0, 64)}});
}

TEST(MinferenceIndex, LongMultiChunkEstimate) {
  LC_REQUIRE_GPU();
  // 20K keys: the VS passes split the keys over many CTA chunks (warm-up tiles, pending sums
  // across tile and chunk boundaries); scores are checked directly (no BS head in this build).
  check_case({.name = "long_vs", .n_q = 20000, .heads = llama_vs(8)});
  check_case({.name = "long_mixed", .n_q = 6000, .q_pos0 = 14000,
              .heads = {VS(1000, 6096), BS(100), VS(30, 800), BS(10), AS(1024, 4096), VS(3500, 100), BS(50), VS(500, 700)}});
}

TEST(MinferenceIndex, BlockSparseWaves) {
  LC_REQUIRE_GPU();
  // Scratch far smaller than one head's scores: waves of row ranges; rows selected from global.
  check_case({.name = "bs_rowsplit", .n_head = 4, .n_kv_head = 1, .n_q = 8192,
              .heads = {BS(10), BS(100), BS(1), BS(33)}, .bs_wave_bytes = 16 << 10, .rows_in_global = true});
  // Scratch of a few heads: waves of whole heads.
  check_case({.name = "bs_headwaves", .n_head = 4, .n_kv_head = 1, .n_q = 3000, .q_pos0 = 100,
              .heads = {BS(10), VS(100, 300), BS(1), BS(33)}, .bs_wave_bytes = 40 << 10});
}

TEST(MinferenceIndex, BlockSparseExactTies) {
  LC_REQUIRE_GPU();
  // Every pooled score 0 (zero queries): each row is one big tie, the first blocks win; in the
  // group-maximum filter every group ties too.
  check_case({.name = "bs_ties_zero_q", .n_head = 4, .n_kv_head = 2, .n_q = 8192,
              .heads = {BS(10), BS(100), BS(1), BS(33)}, .ties = 1});
  // Key blocks repeating every 37 blocks: each score recurs ~n/37 times, so the k-th score is
  // usually shared by several blocks (filter path, plain path, rows from global memory).
  check_case({.name = "bs_ties_periodic", .n_head = 4, .n_kv_head = 2, .n_q = 6000, .q_pos0 = 4000,
              .heads = {BS(10), BS(100), BS(3), BS(50)}, .ties = 2});
  check_case({.name = "bs_ties_periodic_global", .n_head = 4, .n_kv_head = 1, .n_q = 4000,
              .heads = {BS(10), BS(40), BS(1), BS(7)}, .rows_in_global = true, .ties = 2});
}

TEST(MinferenceIndex, BlockSparseLongRows) {
  LC_REQUIRE_GPU();
  // Rows of ~600 key blocks (~40 groups of 16) with budgets of 33..100: the select's group filter
  // gathers more than one warp's worth of groups per row, from 16-byte aligned rows; most score
  // tiles take the epilogue's fast path. Random keys, then keys repeating every 37 blocks (ties
  // among the group maxima and among the gathered scores).
  check_case({.name = "bs_long_rows", .n_head = 4, .n_kv_head = 1, .n_q = 4096, .q_pos0 = 36000,
              .heads = {BS(33), BS(100), BS(40), BS(64)}});
  check_case({.name = "bs_long_rows_ties", .n_head = 4, .n_kv_head = 2, .n_q = 2048, .q_pos0 = 38000,
              .heads = {BS(33), BS(100), BS(40), BS(64)}, .ties = 2});
}

TEST(MinferenceIndex, ReusedBuilderGrowsAndShrinks) {
  LC_REQUIRE_GPU();
  MinferenceBuilderShape shape{.n_head = 8, .n_kv_head = 2, .head_dim = 128, .max_q = 4096, .max_kv = 8192};
  MinferenceIndexBuilder b(shape);
  Stats st;
  check_case({.name = "reuse_small", .n_q = 300, .heads = llama_vs(8)}, &b, nullptr, &st);
  check_case({.name = "reuse_large", .n_q = 4096, .q_pos0 = 4096,
              .heads = {VS(1000, 6096), BS(100), VS(30, 800), BS(10), AS(1024, 4096), VS(3500, 100), BS(50), VS(500, 700)}},
             &b, nullptr, &st);
  check_case({.name = "reuse_small_again", .n_q = 100, .q_pos0 = 50, .heads = llama_vs(8)}, &b, nullptr, &st);
  std::printf("  mindex reuse: %lld selections, %lld exact\n", (long long)st.selections, (long long)st.exact);
}

// MInference's reference estimate: one set of vertical-slash lines per prompt (its last 64 queries
// against all keys), applied to every query block. estimate_vs() on the prompt's last 64 rows, then
// build(reuse_vs_lines) per chunk, must give exactly the rows of the index built for the whole
// prompt in one chunk (all heads: VS rows by the reused lines, BS and A-shape rows by the chunk's
// own queries, which do not depend on the chunking). S = 1000 leaves a partial last block, so the
// per-chunk cut lists (vs_gaps with the chunk's last-block rows) are exercised.
TEST(MinferenceIndex, PromptWideLinesReusedPerChunk) {
  LC_REQUIRE_GPU();
  const int64_t S = 1000, C = 256;
  const Case whole{.name = "prompt_wide", .n_q = S,
                   .heads = {VS(40, 60), VS(200, 120), BS(3), VS(30, 50), AS(64, 128), VS(500, 400), BS(6), VS(64, 300)}};
  const Inputs in = make_inputs(whole);
  const SparseIndex want = check_case(whole, nullptr, &in);  // also checked against the CPU builders
  DevBuf q(in.qh.size() * 2), k(in.kh.size() * 2);
  q.upload(in.qh);
  k.upload(in.kh);
  MinferenceIndexBuilder b({.n_head = whole.n_head, .n_kv_head = whole.n_kv_head, .head_dim = whole.d, .max_q = C,
                            .max_kv = S});
  const size_t q_row = size_t(whole.n_head) * whole.d * 2;  // bytes per query row
  MinferenceIndexParams est;
  est.q = static_cast<char*>(q.p) + size_t(S - 64) * q_row;
  est.k = k.p;
  est.n_q = 64;
  est.q_pos0 = S - 64;
  est.n_kv = S;
  est.heads = whole.heads;
  MinferenceIndexParams early = est;  // reuse before any estimate
  early.reuse_vs_lines = true;
  early.n_q = C, early.q_pos0 = 0, early.n_kv = C, early.q = q.p;
  EXPECT_THROW(b.build(early), Error);
  b.estimate_vs(est);
  for (int64_t c0 = 0; c0 < S; c0 += C) {
    const int64_t n = std::min(C, S - c0);
    MinferenceIndexParams mp = est;
    mp.q = static_cast<char*>(q.p) + size_t(c0) * q_row;
    mp.n_q = n;
    mp.q_pos0 = c0;
    mp.n_kv = c0 + n;
    mp.reuse_vs_lines = true;
    const SparseIndex got = download(b.build(mp), n);
    for (int h = 0; h < whole.n_head; ++h) {
      HeadIndex part;  // the whole-prompt index's rows of this chunk's query blocks
      const HeadIndex& w = want.heads[size_t(h)];
      for (int64_t blk = c0 / 64; blk < (c0 + n + 63) / 64; ++blk) {
        for (const auto& r : w.block_ranges(blk)) part.ranges.push_back(r);
        for (int32_t col : w.block_cols(blk)) part.cols.push_back(col);
        part.end_block();
      }
      same_head(got.heads[size_t(h)], part, "chunk at " + std::to_string(c0) + " head " + std::to_string(h));
    }
  }
  MinferenceIndexParams other = est;  // lines selected for other budgets cannot be reused
  other.reuse_vs_lines = true;
  other.heads[0] = VS(41, 60);
  other.n_q = C, other.q_pos0 = 0, other.n_kv = C, other.q = q.p;
  EXPECT_THROW(b.build(other), Error);
  EXPECT_THROW(b.estimate_vs(early), Error);  // estimate_vs makes lines, never reuses them
}

TEST(MinferenceIndex, Errors) {
  LC_REQUIRE_GPU();
  EXPECT_THROW(MinferenceIndexBuilder({.n_head = 8, .n_kv_head = 2, .head_dim = 96, .max_q = 64, .max_kv = 64}), Error);
  EXPECT_THROW(MinferenceIndexBuilder({.n_head = 8, .n_kv_head = 3, .head_dim = 128, .max_q = 64, .max_kv = 64}), Error);
  MinferenceIndexBuilder b({.n_head = 2, .n_kv_head = 1, .head_dim = 128, .max_q = 128, .max_kv = 256});
  DevBuf q(size_t(256) * 2 * 128 * 2), k(size_t(256) * 128 * 2);
  memset_async(q.p, 0, q.bytes);
  memset_async(k.p, 0, k.bytes);
  MinferenceIndexParams p;
  p.q = q.p;
  p.k = k.p;
  p.n_q = 128;
  p.n_kv = 256;
  p.q_pos0 = 128;
  p.heads = {VS(10, 10), BS(2)};
  auto bad = [&](auto mutate, const char* what) {
    MinferenceIndexParams x = p;
    mutate(x);
    EXPECT_THROW(b.build(x), Error) << what;
  };
  bad([](MinferenceIndexParams& x) { x.heads.pop_back(); }, "head count");
  bad([](MinferenceIndexParams& x) { x.n_q = 129, x.q_pos0 = 0; }, "n_q > max_q");
  bad([](MinferenceIndexParams& x) { x.n_kv = 257; }, "n_kv > max_kv");
  bad([](MinferenceIndexParams& x) { x.q_pos0 = 129; }, "queries past the keys");
  bad([](MinferenceIndexParams& x) { x.heads[0] = VS(-1, 10); }, "negative budget");
  bad([](MinferenceIndexParams& x) { x.heads[1] = BS(-3); }, "negative block budget");
  bad([](MinferenceIndexParams& x) { x.k = nullptr; }, "no k");
  bad([](MinferenceIndexParams& x) { x.n_q = 0; }, "no queries");
  EXPECT_NO_THROW(b.build(p));
  EXPECT_GT(MinferenceIndexBuilder::device_bytes({.n_head = 32, .n_kv_head = 8, .head_dim = 128, .max_q = 1 << 20,
                                                   .max_kv = 1 << 20}),
            size_t(256) << 20);
}

// sparse_attention() on the GPU-built index vs an fp64 oracle with the same mask.
void check_end_to_end(const Case& c) {
  const Inputs in = make_inputs(c);
  std::vector<double> vd;
  const auto vh = random_bf16(size_t(c.n_kv()) * c.n_kv_head * c.d, 1.0, vd);
  const SparseIndex ix = check_case(c, nullptr, &in);  // index == CPU (up to near-tie swaps)
  DevBuf q(in.qh.size() * 2), k(in.kh.size() * 2), v(vh.size() * 2), o(in.qh.size() * 2),
      lse(size_t(c.n_q) * c.n_head * 4);
  q.upload(in.qh);
  k.upload(in.kh);
  v.upload(vh);
  o.poison();
  MinferenceIndexBuilder b({.n_head = c.n_head, .n_kv_head = c.n_kv_head, .head_dim = c.d, .max_q = c.n_q,
                            .max_kv = c.n_kv()});
  MinferenceIndexParams mp;
  mp.q = q.p;
  mp.k = k.p;
  mp.n_q = c.n_q;
  mp.n_kv = c.n_kv();
  mp.q_pos0 = c.q_pos0;
  mp.heads = c.heads;
  SparseAttnParams sp;
  sp.q = q.p;
  sp.k = k.p;
  sp.v = v.p;
  sp.o = o.p;
  sp.lse = lse.as<float>();
  sp.n_q = c.n_q;
  sp.n_kv = c.n_kv();
  sp.n_head = c.n_head;
  sp.n_kv_head = c.n_kv_head;
  sp.head_dim = c.d;
  sp.q_pos0 = c.q_pos0;
  sp.index = b.build(mp);
  sp.workspace = b.attention_workspace();
  sp.workspace_bytes = b.attention_workspace_bytes();
  sparse_attention(sp);
  device_sync();
  const SparseIndex gi = download(sp.index, c.n_q);  // the same build as ix (deterministic)
  for (int h = 0; h < c.n_head; ++h) same_head(gi.heads[size_t(h)], ix.heads[size_t(h)], c.name + " rebuild");
  const auto oh = o.download<uint16_t>(in.qh.size());
  const auto lh = lse.download<float>(size_t(c.n_q) * c.n_head);
  const int D = c.d, group = c.n_head / c.n_kv_head;
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> got, ref, lgot, lref, sc(size_t(c.n_kv()));
  std::vector<char> mask(size_t(c.n_kv()));
  for (int h = 0; h < c.n_head; ++h) {
    const HeadIndex& hi = gi.heads[size_t(h)];
    const int kvh = h / group;
    for (int64_t i = 0; i < c.n_q; ++i) {
      std::fill(mask.begin(), mask.end(), 0);
      for (const auto& r : hi.block_ranges(i / 64))
        for (int64_t j = r.start; j < std::min<int64_t>(r.end, c.n_kv()); ++j) mask[size_t(j)] = 1;
      for (int32_t cc : hi.block_cols(i / 64)) mask[size_t(cc)] = 1;
      double mx = -INFINITY;
      for (int64_t j = 0; j < c.n_kv(); ++j) {
        if (j > c.q_pos0 + i) mask[size_t(j)] = 0;
        if (!mask[size_t(j)]) continue;
        double s = 0;
        for (int t = 0; t < D; ++t)
          s += in.qd[(size_t(i) * c.n_head + h) * D + t] * in.kd[(size_t(j) * c.n_kv_head + kvh) * D + t];
        sc[size_t(j)] = s * scale;
        mx = std::max(mx, sc[size_t(j)]);
      }
      double l = 0;
      std::vector<double> acc(size_t(D), 0.0);
      for (int64_t j = 0; j < c.n_kv(); ++j) {
        if (!mask[size_t(j)]) continue;
        const double pj = std::exp(sc[size_t(j)] - mx);
        l += pj;
        for (int t = 0; t < D; ++t) acc[size_t(t)] += pj * vd[(size_t(j) * c.n_kv_head + kvh) * D + t];
      }
      for (int t = 0; t < D; ++t) {
        ref.push_back(l > 0 ? acc[size_t(t)] / l : 0.0);
        got.push_back(bf16_to_f32(oh[(size_t(i) * c.n_head + h) * D + t]));
      }
      lref.push_back(l > 0 ? mx + std::log(l) : -INFINITY);
      lgot.push_back(lh[size_t(h) * c.n_q + i]);
    }
  }
  const auto eo = compare(got, ref, 5e-3 * max_abs(vd), 1e-2);
  const auto el = compare(lgot, lref, 2e-3, 1e-5);
  std::printf("  mindex e2e %-18s O %s | LSE %s\n", c.name.c_str(), eo.str().c_str(), el.str().c_str());
  EXPECT_EQ(eo.n_bad, 0) << c.name << ": " << eo.str();
  EXPECT_EQ(eo.n_nan, 0) << c.name;
  EXPECT_LT(eo.rel_l2, 1e-2) << c.name << ": " << eo.str();
  EXPECT_EQ(el.n_bad, 0) << c.name << ": " << el.str();
}

TEST(MinferenceIndex, EndToEndSparseAttention) {
  LC_REQUIRE_GPU();
  check_end_to_end({.name = "e2e_mixed", .n_head = 4, .n_kv_head = 2, .n_q = 700,
                    .heads = {VS(60, 120), BS(3), AS(16, 128), VS(30, 300)}});
  check_end_to_end({.name = "e2e_chunk", .n_head = 4, .n_kv_head = 2, .n_q = 200, .q_pos0 = 300,
                    .heads = {BS(2), VS(100, 50), VS(30, 60), BS(5)}});
}

// head_dim 256: Gemma 3's global layers (gemma-3-270m: 4 query heads, 1 KV head; the larger
// Gemma 3 models: 8/4 and 16/8). The VS estimate runs its D = 256 instance (Q fragments of 16
// k-steps), the BS scores four 64-wide head-dim chunks (192 KB of staged tiles per CTA).
TEST(MinferenceIndex, GemmaHeadDim256) {
  LC_REQUIRE_GPU();
  check_case({.name = "gemma_d256_vs", .n_head = 4, .n_kv_head = 1, .d = 256, .n_q = 2000,
              .heads = {VS(1000, 6096), VS(30, 800), VS(100, 800), VS(500, 700)}});
  check_case({.name = "gemma_d256_bs", .n_head = 8, .n_kv_head = 4, .d = 256, .n_q = 1500,
              .heads = {BS(3), BS(8), BS(1), BS(100), BS(0), BS(5), BS(2), BS(12)}});
  check_case({.name = "gemma_d256_mixed", .n_head = 8, .n_kv_head = 4, .d = 256, .n_q = 700, .q_pos0 = 1300,
              .heads = {VS(100, 200), BS(8), AS(64, 256), VS(30, 800), BS(3), VS(200, 60), BS(20), VS(1000, 6096)}});
  check_case({.name = "gemma_d256_tiny", .n_head = 4, .n_kv_head = 1, .d = 256, .n_q = 37,
              .heads = {VS(100, 200), BS(3), AS(4, 8), VS(30, 50)}});
  // Multi-chunk VS estimate (12K keys) and long block-sparse rows, with 16 heads over 8 KV heads.
  check_case({.name = "gemma_d256_long", .n_head = 16, .n_kv_head = 8, .d = 256, .n_q = 4000, .q_pos0 = 8000,
              .heads = {VS(1000, 6096), BS(100), VS(30, 800), BS(10), AS(1024, 4096), VS(3500, 100), BS(50),
                        VS(500, 700), VS(1000, 6096), BS(100), VS(30, 800), BS(10), AS(1024, 4096), VS(3500, 100),
                        BS(50), VS(500, 700)}});
}

TEST(MinferenceIndex, EndToEndSparseAttentionHeadDim256) {
  LC_REQUIRE_GPU();
  check_end_to_end({.name = "e2e_d256_mixed", .n_head = 4, .n_kv_head = 1, .d = 256, .n_q = 700,
                    .heads = {VS(60, 120), BS(3), AS(16, 128), VS(30, 300)}});
  check_end_to_end({.name = "e2e_d256_chunk", .n_head = 4, .n_kv_head = 2, .d = 256, .n_q = 200, .q_pos0 = 300,
                    .heads = {BS(2), VS(100, 50), VS(30, 60), BS(5)}});
}

}  // namespace
}  // namespace longctx::cuda::test

// bench_sparse.cu (bench): the MInference sparse attention kernels on one layer of Llama-3-8B
// geometry (32 query / 8 KV heads, d = 128, bf16) against our dense Hopper kernel.
//
// What, per sequence length S (one prefill chunk of S queries against S keys, causal):
//   - dense: attention_prefill_sm90 (measured at --dense-seqs; extrapolated by S^2 elsewhere);
//   - block-sparse: every (query head, 64-row block) attends the diagonal key block plus 99
//     others (100 blocks per row, MInference's default), chosen at random, one per equal
//     segment of the causal history (distinct, spread over the whole context);
//   - vertical-slash: per head the budgets of the published Llama-3-8B-262K config, in its
//     proportions over the 32 heads (15 x (1000, 6096), 9 x (30, 800), 5 x (100, 800),
//     2 x (3500, 100), 1 x (500, 700)); lines planted as the estimate finds them on real heads:
//     the 30 sink columns and the 100 nearest diagonals (forced by the reference), further
//     slashes 85% from a local band (offset 100 + exponential, mean 1024) and 15% uniform over
//     the context, further verticals uniform; converted with Algorithm 4 (exact merged ranges +
//     columns outside them), as sparse/vs_convert.cpp does.
// For each: plan + kernel time, the kernel work (rows x attended keys, causal-clipped, summed
// over heads: what a tile kernel must compute) and the FLOP rate on it (4 d per pair), and the
// tile-level rate (64 x 64 tiles the kernel visits, masked slots included, range tails packed as
// the kernel packs them: RangeTiles).
// How: indices are built on the host (16 threads on the device machine) and uploaded; CUDA
// events, warmup, median (METHOD.md). Inputs random (never zeros).
// --inputs structured (the realistic case): Q/K from kernels/cuda/structured_qk.h (local/slash, sink,
// vertical-token and topic structure planted in the vectors, not in the index), V random, and
// the indices ESTIMATED from them on the GPU by cuda::MinferenceIndexBuilder, exactly as the
// engine does: block-sparse k_b = 100 for every head, and vertical-slash with the Llama-3-8B
// budget mix above. Reported: index build + plan + kernel, the build's share, the kernel's rate;
// the block-sparse index is written to --mask-dir (bs_mask_<S>.bin) so that
// bench/flex_baseline.py --mask-dir runs FlexAttention on the very same blocks.
// --head-dim 256: Gemma 3 12B's global layers (16 / 8 heads, d 256), random inputs only: the
// Hopper sparse kernel with its 3- and 2-stage rings ("impl": "sm90", "sm90_stages2") and the
// generic mma.sync kernel (sparse_attention_generic.h, "generic", the dispatch before the Hopper
// kernel took d 256), each against the dense Hopper kernel.
// --fp8: also the Hopper kernel with fp8 e4m3 K/V tiles (SparseAttnParams::kv_dtype fp8_e4m3,
// "impl": "sm90_fp8"; estimated indices: "kernel_fp8_ms"), on an e4m3 copy of the same K/V at
// the fp8 cache's scale rule (amax / 448), side by side with the bf16 kernel on the same index.
// --estimate (implied by structured): the indices estimated on the GPU as above from the random
// inputs too (index build included; any head dim the builders take). Random Q/K make scattered
// vertical-slash lines, so that pattern costs far more than on real heads; block-sparse is typical.
// Run: build-gpusparse/bench/longctx_bench_sparse [--seqs 131072,524288,1048576]
//        [--dense-seqs 131072,524288] [--inputs random|structured] [--mask-dir DIR] [--json out.json]
//        [--head-dim 256] [--estimate] [--fp8];
//      scripts/gpu-sparse.sh runs it.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_sm90.h"
#include "kernels/cuda/sparse_attention_generic.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/fp8_vec.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/minference_index.h"
#include "kernels/cuda/sparse_attention.h"
#include "kernels/cuda/structured_qk.h"
#include "bench/bench_util.h"
#include "bench/fp8_copy.cuh"

using namespace longctx::cuda;
using longctx::bench::JsonRecord;
using longctx::bench::parse_list;
using longctx::bench::time_ms;

namespace {

constexpr int kB = kSparseQBlock;
// The layer's shape: Llama-3-8B (32 / 8 heads, d 128), or with --head-dim 256 Gemma 3 12B's global
// layers (16 / 8 heads, d 256).
int kHeads = 32, kKvHeads = 8, kD = 128;
bool g_fp8 = false;  // --fp8: the fp8-tile kernel beside the bf16 one

// The sparse kernels timed on each index: the Hopper one (its default ring), and at d 256 also
// its 2-stage ring and the generic kernel.
struct SparseImpl {
  const char* name;
  bool hopper;
  int stages;  // SparseAttnParams::sm90_stages
  bool fp8 = false;  // K/V as e4m3 (kv_dtype fp8_e4m3)
};
std::vector<SparseImpl> sparse_impls() {
  std::vector<SparseImpl> v = {{"sm90", true, 0}};
  if (kD == 256) v.insert(v.end(), {{"sm90_stages2", true, 2}, {"generic", false, 0}});
  if (g_fp8) v.push_back({"sm90_fp8", true, 0, true});
  return v;
}

// The e4m3 copy of a bf16 tensor [n] (n % 8 == 0) at the fp8 cache's scale rule
// (bench/fp8_copy.cuh); returns the scale (read back: setup, outside the timings).
float quantize_e4m3(const void* x, int64_t n, void* out) {
  auto* amax = static_cast<unsigned*>(dev_malloc(4));
  longctx::bench::fp8_copy(x, n, out, amax, nullptr);
  const float scale = longctx::bench::fp8_scale(amax, nullptr);
  dev_free(amax);
  return scale;
}
constexpr int kBsBlocks = 100;  // MInference block_sparse default: 100 key blocks per query block
// The published Llama-3-8B-262K config's (vertical, slash) budgets, in proportion over 32 heads.
struct Vs { int kv, ks, heads; };
constexpr Vs kVsMix[] = {{1000, 6096, 15}, {30, 800, 9}, {100, 800, 5}, {3500, 100, 2}, {500, 700, 1}};
constexpr int kForcedCols = 30, kForcedDiags = 100;  // the reference's forced lines

// The Hopper kernel's walk over one query block's merged ranges (sparse_attention_sm90.cu):
// whole 64-key tiles while more than kSparsePackMax keys remain, then a tail of at most
// kSparseGatherMax keys gathered with the columns (64 a tile), a longer one as 16-key segments
// packed four to a tile. add() each range, then take(columns) the block's tile count.
struct RangeTiles {
  double tiles = 0;
  int64_t segs = 0, gathered = 0;
  void add(int64_t keys) {
    for (; keys > kSparsePackMax; keys -= kB) tiles += 1;
    if (keys > 0 && keys <= kSparseGatherMax) gathered += keys;
    else if (keys > 0) segs += (keys + kSparsePackSeg - 1) / kSparsePackSeg;
  }
  double take(int64_t cols = 0) {
    constexpr int64_t per_tile = kB / kSparsePackSeg;
    const double t = tiles + double((segs + per_tile - 1) / per_tile) + double((gathered + cols + kB - 1) / kB);
    tiles = 0, segs = 0, gathered = 0;
    return t;
  }
};

// Per-head CSR pieces built in parallel, then concatenated.
struct HeadPart {
  std::vector<int64_t> rcount, ccount;  // per block
  std::vector<int32_t> ranges, cols;
  double pairs = 0, tiles = 0;  // rows x keys (causal-clipped); 64-key tiles visited
};

struct HostIndex {
  std::vector<int64_t> range_ptr{0}, col_ptr{0};
  std::vector<int32_t> ranges, cols;
  double pairs = 0, tiles = 0;
};

HostIndex build(int64_t S, const std::function<void(int, HeadPart&)>& head_fn) {
  std::vector<HeadPart> parts(kHeads);
  std::vector<std::thread> th;
  const int nt = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  for (int t = 0; t < nt; ++t)
    th.emplace_back([&, t] {
      for (int h = t; h < kHeads; h += nt) head_fn(h, parts[h]);
    });
  for (auto& x : th) x.join();
  HostIndex ix;
  for (auto& p : parts) {
    for (size_t b = 0; b < p.rcount.size(); ++b) {
      ix.range_ptr.push_back(ix.range_ptr.back() + p.rcount[b]);
      ix.col_ptr.push_back(ix.col_ptr.back() + p.ccount[b]);
    }
    ix.ranges.insert(ix.ranges.end(), p.ranges.begin(), p.ranges.end());
    ix.cols.insert(ix.cols.end(), p.cols.begin(), p.cols.end());
    ix.pairs += p.pairs;
    ix.tiles += p.tiles;
    p = HeadPart{};
  }
  (void)S;
  return ix;
}

// Block-sparse: diagonal + (kBsBlocks - 1) distinct earlier blocks, one per equal segment.
HostIndex block_sparse_index(int64_t S) {
  const int64_t nqb = (S + kB - 1) / kB;
  return build(S, [&](int h, HeadPart& p) {
    std::mt19937_64 g(1000 + h);
    std::vector<int64_t> sel;
    for (int64_t b = 0; b < nqb; ++b) {
      sel.clear();
      if (b < kBsBlocks) {
        for (int64_t c = 0; c <= b; ++c) sel.push_back(c);
      } else {
        const int64_t m = kBsBlocks - 1;
        for (int64_t i = 0; i < m; ++i) {
          const int64_t lo = b * i / m, hi = b * (i + 1) / m;  // [lo, hi) non-empty since b >= m
          sel.push_back(lo + int64_t(g() % uint64_t(hi - lo)));
        }
        sel.push_back(b);
      }
      int64_t nr = 0;
      RangeTiles rt;
      const int64_t last = std::min(S, (b + 1) * kB) - 1;
      for (size_t i = 0; i < sel.size();) {
        size_t j = i;
        while (j + 1 < sel.size() && sel[j + 1] == sel[j] + 1) ++j;
        const int64_t s = sel[i] * kB, e = std::min(S, (sel[j] + 1) * kB);
        p.ranges.push_back(int32_t(s));
        p.ranges.push_back(int32_t(e));
        ++nr;
        rt.add(std::min(e, last + 1) - s);
        i = j + 1;
      }
      p.tiles += rt.take();
      // pairs: off-diagonal blocks full, the diagonal block causal
      const int64_t rows = last - b * kB + 1;
      p.pairs += double(sel.size() - 1) * kB * rows + double(rows) * (rows + 1) / 2;
      p.rcount.push_back(nr);
      p.ccount.push_back(0);
    }
  });
}

// Vertical-slash with planted lines (see the header comment), Algorithm 4 conversion.
HostIndex vertical_slash_index(int64_t S) {
  const int64_t nqb = (S + kB - 1) / kB;
  return build(S, [&](int h, HeadPart& p) {
    int hh = h * 32 / kHeads, mix = 0;  // the 32-head mix in proportion over kHeads
    while (hh >= kVsMix[mix].heads) hh -= kVsMix[mix++].heads;
    const int64_t kv = std::min<int64_t>(S, std::max(kVsMix[mix].kv, 30));
    const int64_t ks = std::min<int64_t>(S, std::max(kVsMix[mix].ks, 50));
    std::mt19937_64 g(2000 + h);
    std::exponential_distribution<double> ex(1.0 / 1024);
    std::vector<char> is_col(size_t(S), 0), is_diag(size_t(S), 0);
    std::vector<int32_t> cols, diags;
    for (int64_t c = 0; c < std::min<int64_t>(kForcedCols, S); ++c) is_col[c] = 1;
    for (int64_t n = std::min<int64_t>(kForcedCols, S); n < kv;) {
      const int64_t c = int64_t(g() % uint64_t(S));
      if (!is_col[c]) is_col[c] = 1, ++n;
    }
    for (int64_t o = 0; o < std::min<int64_t>(kForcedDiags, S); ++o) is_diag[o] = 1;
    for (int64_t n = std::min<int64_t>(kForcedDiags, S); n < ks;) {
      const bool local = (g() % 100) < 85;
      const int64_t o = local ? std::min<int64_t>(S - 1, kForcedDiags + int64_t(ex(g))) : int64_t(g() % uint64_t(S));
      if (!is_diag[o]) is_diag[o] = 1, ++n;
    }
    for (int64_t c = 0; c < S; ++c) if (is_col[c]) cols.push_back(int32_t(c));
    for (int64_t o = S - 1; o >= 0; --o) if (is_diag[o]) diags.push_back(int32_t(o));  // descending offsets
    for (int64_t b = 0; b < nqb; ++b) {
      const int64_t first = b * kB, last = std::min(S, first + kB) - 1, rows = last - first + 1;
      int64_t nr = 0, nc = 0, rs = -1, re = -1;
      size_t ci = 0;
      double keys = 0;
      RangeTiles rt;
      auto flush = [&] {
        if (rs < 0) return;
        // columns before this range's end that it does not cover
        while (ci < cols.size() && cols[ci] < re) {
          if (cols[ci] < rs && cols[ci] <= last) p.cols.push_back(cols[ci]), ++nc;
          ++ci;
        }
        p.ranges.push_back(int32_t(rs));
        p.ranges.push_back(int32_t(re));
        ++nr;
        rt.add(re - rs);
        keys += double(re - rs);
        // causal within the range: keys > first are seen by fewer rows
        if (re - 1 > first) {
          const int64_t lo = std::max(rs, first + 1);
          for (int64_t k = lo; k < re; ++k) p.pairs -= double(k - first);  // rows before k miss it
        }
      };
      for (int32_t o : diags) {
        if (o > last) continue;
        const int64_t s = std::max<int64_t>(0, first - o), e = last - o + 1;
        if (rs >= 0 && s <= re) re = std::max(re, e);
        else { flush(); rs = s; re = e; }
      }
      flush();
      while (ci < cols.size() && cols[ci] <= last) p.cols.push_back(cols[ci++]), ++nc;
      p.tiles += rt.take(nc);
      p.pairs += keys * double(rows) + double(nc) * double(rows);  // columns are all before the block (o = 0 kept)
      p.rcount.push_back(nr);
      p.ccount.push_back(nc);
    }
  });
}

struct DevIndex {
  void *rp = nullptr, *cp = nullptr, *rg = nullptr, *cl = nullptr, *ws = nullptr;
  DeviceSparseIndex ix;
  size_t ws_bytes = 0;
  explicit DevIndex(const HostIndex& h, int64_t nqb) {
    rp = dev_malloc(h.range_ptr.size() * 8);
    cp = dev_malloc(h.col_ptr.size() * 8);
    rg = dev_malloc(std::max<size_t>(1, h.ranges.size()) * 4);
    cl = dev_malloc(std::max<size_t>(1, h.cols.size()) * 4);
    copy_h2d(rp, h.range_ptr.data(), h.range_ptr.size() * 8);
    copy_h2d(cp, h.col_ptr.data(), h.col_ptr.size() * 8);
    if (!h.ranges.empty()) copy_h2d(rg, h.ranges.data(), h.ranges.size() * 4);
    if (!h.cols.empty()) copy_h2d(cl, h.cols.data(), h.cols.size() * 4);
    ix.n_index_head = kHeads;
    ix.n_qblk = nqb;
    ix.range_ptr = static_cast<const int64_t*>(rp);
    ix.col_ptr = static_cast<const int64_t*>(cp);
    ix.ranges = static_cast<const int32_t*>(rg);
    ix.cols = static_cast<const int32_t*>(cl);
    ix.n_ranges = h.range_ptr.back();
    ix.n_cols = h.col_ptr.back();
    ws_bytes = sparse_attention_workspace_bytes(ix);
    ws = dev_malloc(ws_bytes);
  }
  ~DevIndex() {
    for (void* p : {rp, cp, rg, cl, ws}) dev_free(p);
  }
};

// Copies a device index back and counts its kernel work: per block, rows x |union of the
// block's ranges and columns, clipped to the block's causal frontier| (pairs), and 64-key tiles.
struct IndexWork {
  double pairs = 0, tiles = 0;
  HostIndex host;
};
IndexWork index_work(const DeviceSparseIndex& ix, int64_t S) {
  IndexWork w;
  HostIndex& h = w.host;
  const size_t rows = size_t(ix.n_index_head) * size_t(ix.n_qblk);
  h.range_ptr.resize(rows + 1);
  h.col_ptr.resize(rows + 1);
  copy_d2h(h.range_ptr.data(), ix.range_ptr, (rows + 1) * 8);
  copy_d2h(h.col_ptr.data(), ix.col_ptr, (rows + 1) * 8);
  h.ranges.resize(size_t(h.range_ptr.back()) * 2);
  h.cols.resize(size_t(h.col_ptr.back()));
  if (!h.ranges.empty()) copy_d2h(h.ranges.data(), ix.ranges, h.ranges.size() * 4);
  if (!h.cols.empty()) copy_d2h(h.cols.data(), ix.cols, h.cols.size() * 4);
  std::vector<std::pair<int64_t, int64_t>> rg;
  for (size_t r = 0; r < rows; ++r) {
    const int64_t b = int64_t(r) % ix.n_qblk, first = b * kB, last = std::min(S, first + kB) - 1;
    rg.clear();
    for (int64_t i = h.range_ptr[r]; i < h.range_ptr[r + 1]; ++i) {
      const int64_t s0 = h.ranges[2 * i], e0 = std::min<int64_t>(h.ranges[2 * i + 1], last + 1);
      if (s0 < e0) rg.push_back({s0, e0});
    }
    std::sort(rg.begin(), rg.end());
    std::vector<std::pair<int64_t, int64_t>> mg;
    for (auto& x : rg) {
      if (!mg.empty() && x.first <= mg.back().second) mg.back().second = std::max(mg.back().second, x.second);
      else mg.push_back(x);
    }
    auto pairs_of = [&](int64_t key) { return double(last - std::max(first, key) + 1); };  // rows that see key
    RangeTiles rt;
    for (auto& x : mg) {
      rt.add(x.second - x.first);
      // sum over keys k in [s, e) of rows seeing k: keys <= first are seen by all rows
      const int64_t full_end = std::min(x.second, first + 1);
      if (full_end > x.first) w.pairs += double(full_end - x.first) * double(last - first + 1);
      for (int64_t key = std::max(x.first, first + 1); key < x.second; ++key) w.pairs += pairs_of(key);
    }
    int64_t nc = 0, prev = -1;
    size_t mi = 0;  // columns ascending: two-pointer walk over the merged ranges
    for (int64_t i = h.col_ptr[r]; i < h.col_ptr[r + 1]; ++i) {
      const int64_t c = h.cols[i];
      if (c == prev || c > last) continue;
      prev = c;
      while (mi < mg.size() && mg[mi].second <= c) ++mi;
      if (mi < mg.size() && c >= mg[mi].first) continue;  // inside a range
      ++nc;
      w.pairs += pairs_of(c);
    }
    w.tiles += rt.take(nc);
  }
  return w;
}

// Block lists of a block-sparse index for FlexAttention: int32 header {S, heads, n_qblk, max},
// counts [heads * n_qblk] and key blocks [heads * n_qblk * max] (the diagonal block excluded:
// flex_baseline.py gives it as the partial, causally masked block).
void write_flex_mask(const HostIndex& h, int64_t S, int64_t nqb, const std::string& path) {
  int32_t maxb = 1;
  std::vector<std::vector<int32_t>> lists(size_t(kHeads) * nqb);
  for (size_t r = 0; r < lists.size(); ++r) {
    const int64_t b = int64_t(r) % nqb;
    for (int64_t i = h.range_ptr[r]; i < h.range_ptr[r + 1]; ++i)
      for (int64_t c = h.ranges[2 * i] / kB; c * kB < h.ranges[2 * i + 1] && c <= b; ++c)
        if (c != b) lists[r].push_back(int32_t(c));
    std::sort(lists[r].begin(), lists[r].end());
    lists[r].erase(std::unique(lists[r].begin(), lists[r].end()), lists[r].end());
    maxb = std::max<int32_t>(maxb, int32_t(lists[r].size()));
  }
  FILE* f = std::fopen(path.c_str(), "wb");
  LC_REQUIRE(f, "bench_sparse: cannot write %s", path.c_str());
  const int32_t hdr[4] = {int32_t(S), kHeads, int32_t(nqb), maxb};
  std::fwrite(hdr, 4, 4, f);
  for (auto& l : lists) {
    const int32_t n = int32_t(l.size());
    std::fwrite(&n, 4, 1, f);
  }
  std::vector<int32_t> row(static_cast<size_t>(maxb));
  for (auto& l : lists) {
    std::fill(row.begin(), row.end(), 0);
    std::copy(l.begin(), l.end(), row.begin());
    std::fwrite(row.data(), 4, row.size(), f);
  }
  std::fclose(f);
}

// The 32-head mix in proportion over kHeads (as vertical_slash_index).
std::vector<GpuHeadPattern> vs_mix_patterns() {
  std::vector<GpuHeadPattern> heads;
  for (int h = 0; h < kHeads; ++h) {
    int hh = h * 32 / kHeads, mix = 0;
    while (hh >= kVsMix[mix].heads) hh -= kVsMix[mix++].heads;
    heads.push_back({GpuPatternKind::VerticalSlash, kVsMix[mix].kv, kVsMix[mix].ks});
  }
  return heads;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> seqs = {131072, 524288, 1048576}, dense_seqs = {131072, 524288};
  const char* json_path = nullptr;
  std::string inputs = "random", mask_dir;
  bool estimate = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seqs") && i + 1 < argc) seqs = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--inputs") && i + 1 < argc) inputs = argv[++i];
    else if (!std::strcmp(argv[i], "--mask-dir") && i + 1 < argc) mask_dir = argv[++i];
    else if (!std::strcmp(argv[i], "--dense-seqs") && i + 1 < argc) dense_seqs = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--estimate")) estimate = true;
    else if (!std::strcmp(argv[i], "--fp8")) g_fp8 = true;
    else if (!std::strcmp(argv[i], "--head-dim") && i + 1 < argc && !std::strcmp(argv[i + 1], "256")) {
      kHeads = 16, kKvHeads = 8, kD = 256;
      ++i;
    } else {
      std::fprintf(stderr, "usage: %s [--seqs N,..] [--dense-seqs N,..] [--inputs random|structured] "
                   "[--mask-dir DIR] [--json FILE] [--head-dim 256] [--estimate] [--fp8]\n", argv[0]);
      return 2;
    }
  }
  if (inputs != "random" && inputs != "structured") {
    std::fprintf(stderr, "bench_sparse: --inputs must be random or structured (got '%s')\n", inputs.c_str());
    return 2;
  }
  const bool structured = inputs == "structured";
  estimate = estimate || structured;
  if (structured && kD != 128) {
    std::fprintf(stderr, "bench_sparse: --inputs structured needs head_dim 128 (the GPU index builders)\n");
    return 2;
  }
  try {
    require_hopper();
    const DeviceInfo dev = device_info(0);
    char buf[1024];
    std::snprintf(buf, sizeof buf,
                  "\"inputs\": \"%s\",\n  \"shape\": {\"n_head\": %d, \"n_kv_head\": %d, \"head_dim\": %d, "
                  "\"dtype\": \"bf16\"}",
                  inputs.c_str(), kHeads, kKvHeads, kD);
    JsonRecord js(dev, buf);
    auto emit = [&](const char* line) { js.add(line); };
    for (int64_t S : seqs) {
      const size_t nq = size_t(S) * kHeads * kD, nk = size_t(S) * kKvHeads * kD;
      void* q = dev_malloc(nq * 2);
      void* k = dev_malloc(nk * 2);
      void* v = dev_malloc(nk * 2);
      void* o = dev_malloc(nq * 2);
      float* lse = static_cast<float*>(dev_malloc(size_t(S) * kHeads * 4));
      if (structured) {
        StructuredQk(kHeads, kKvHeads, 5).fill({.q = q, .k = k, .n_tok = S, .pos0 = 0, .seed = 5});
      } else {
        fill_random_bf16(q, int64_t(nq), 21, 1.f);
        fill_random_bf16(k, int64_t(nk), 22, 1.f);
      }
      fill_random_bf16(v, int64_t(nk), 23, 1.f);
      void* k8 = g_fp8 ? dev_malloc(nk) : nullptr;  // e4m3 copies for --fp8
      void* v8 = g_fp8 ? dev_malloc(nk) : nullptr;
      const float k_scale = g_fp8 ? quantize_e4m3(k, int64_t(nk), k8) : 1.f;
      const float v_scale = g_fp8 ? quantize_e4m3(v, int64_t(nk), v8) : 1.f;
      // p's K/V: the bf16 tensors, or (fp8) their e4m3 copies
      auto set_kv = [&](SparseAttnParams& p, bool fp8) {
        p.k = fp8 ? k8 : k;
        p.v = fp8 ? v8 : v;
        p.kv_dtype = fp8 ? KvDtype::fp8_e4m3 : KvDtype::bf16;
        p.k_scale = fp8 ? k_scale : 1.f;
        p.v_scale = fp8 ? v_scale : 1.f;
      };
      const double dense_flops = 2.0 * double(S) * double(S) * kD * kHeads;
      if (std::find(dense_seqs.begin(), dense_seqs.end(), S) != dense_seqs.end()) {
        PrefillParams p;
        p.q = q, p.k = k, p.v = v, p.o = o, p.lse = lse;
        p.n_q = p.n_kv = S;
        p.n_head = kHeads, p.n_kv_head = kKvHeads, p.head_dim = kD;
        const int reps = S <= 131072 ? 3 : 1;
        const double ms = time_ms([&] { attention_prefill_sm90(p, nullptr); }, 1, reps);
        const double tf = dense_flops / (ms * 1e-3) / 1e12;
        std::fprintf(stderr, "S=%lld dense sm90: %.2f ms, %.1f TFLOP/s\n", (long long)S, ms, tf);
        std::snprintf(buf, sizeof buf, "{\"seq\": %lld, \"kernel\": \"dense_sm90\", \"ms\": %.3f, \"tflops\": %.1f, \"reps\": %d}",
                      (long long)S, ms, tf, reps);
        emit(buf);
      }
      if (estimate) {
        MinferenceIndexBuilder builder({.n_head = kHeads, .n_kv_head = kKvHeads, .head_dim = kD, .max_q = S, .max_kv = S});
        for (int kind = 0; kind < 2; ++kind) {
          const char* name = kind == 0 ? "block_sparse_100_estimated" : "vertical_slash_llama3_estimated";
          MinferenceIndexParams ip;
          ip.q = q, ip.k = k, ip.n_q = S, ip.n_kv = S, ip.q_pos0 = 0;
          ip.heads = kind == 0 ? std::vector<GpuHeadPattern>(kHeads, {GpuPatternKind::BlockSparse, kBsBlocks, 0})
                               : vs_mix_patterns();
          const int reps = S <= 131072 ? 10 : S <= 524288 ? 5 : 3;
          DeviceSparseIndex ix;
          const double ms_index = time_ms([&] { ix = builder.build(ip); }, 1, reps);
          SparseAttnParams p;
          p.q = q, p.k = k, p.v = v, p.o = o, p.lse = lse;
          p.n_q = p.n_kv = S;
          p.n_head = kHeads, p.n_kv_head = kKvHeads, p.head_dim = kD;
          p.index = ix;
          p.workspace = builder.attention_workspace();
          p.workspace_bytes = builder.attention_workspace_bytes();
          const double ms_plan = time_ms([&] { sparse_attention_plan(p); }, 1, reps);
          const double ms_run = time_ms([&] { sparse_attention_run(p); }, 1, reps);
          double ms_run8 = 0;
          if (g_fp8) {
            set_kv(p, true);
            ms_run8 = time_ms([&] { sparse_attention_run(p); }, 1, reps);
            set_kv(p, false);
            std::fprintf(stderr, "S=%lld %s: fp8 K/V tiles: kernel %.3f ms (bf16 %.3f ms, %.2fx)\n", (long long)S, name,
                         ms_run8, ms_run, ms_run / ms_run8);
          }
          const IndexWork wk = index_work(ix, S);
          if (kind == 0 && !mask_dir.empty())
            write_flex_mask(wk.host, S, (S + kB - 1) / kB, mask_dir + "/bs_mask_" + std::to_string(S) + ".bin");
          const double flops = 4.0 * kD * wk.pairs, tile_flops = 4.0 * kD * 64.0 * 64.0 * wk.tiles;
          const double ms = ms_index + ms_plan + ms_run;
          std::fprintf(stderr,
                       "S=%lld %s: index %.3f ms + plan %.3f ms + kernel %.3f ms = %.3f ms (index %.1f%% of plan+kernel); "
                       "work %.4f of dense causal; %.1f TFLOP/s on attended pairs, %.1f on visited 64x64 tiles "
                       "(%lld ranges, %lld cols)\n",
                       (long long)S, name, ms_index, ms_plan, ms_run, ms, 100.0 * ms_index / (ms_plan + ms_run),
                       flops / dense_flops, flops / (ms_run * 1e-3) / 1e12, tile_flops / (ms_run * 1e-3) / 1e12,
                       (long long)ix.n_ranges, (long long)ix.n_cols);
          std::snprintf(buf, sizeof buf,
                        "{\"seq\": %lld, \"kernel\": \"%s\", \"ms\": %.3f, \"index_ms\": %.3f, \"plan_ms\": %.4f, "
                        "\"kernel_ms\": %.3f, \"index_share\": %.4f, \"work_fraction\": %.5f, \"tflops_pairs\": %.1f, "
                        "\"tflops_tiles\": %.1f, \"n_ranges\": %lld, \"n_cols\": %lld, \"reps\": %d, "
                        "\"kernel_fp8_ms\": %.3f}",
                        (long long)S, name, ms, ms_index, ms_plan, ms_run, ms_index / (ms_plan + ms_run),
                        flops / dense_flops, flops / (ms_run * 1e-3) / 1e12, tile_flops / (ms_run * 1e-3) / 1e12,
                        (long long)ix.n_ranges, (long long)ix.n_cols, reps, ms_run8);
          emit(buf);
        }
      }
      for (int kind = 0; kind < 2 && !estimate; ++kind) {
        const char* name = kind == 0 ? "block_sparse_100" : "vertical_slash_llama3";
        const auto t0 = std::chrono::steady_clock::now();
        HostIndex hix = kind == 0 ? block_sparse_index(S) : vertical_slash_index(S);
        const double gen_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        DevIndex di(hix, (S + kB - 1) / kB);
        SparseAttnParams p;
        p.q = q, p.k = k, p.v = v, p.o = o, p.lse = lse;
        p.n_q = p.n_kv = S;
        p.n_head = kHeads, p.n_kv_head = kKvHeads;
        p.index = di.ix;
        p.workspace = di.ws;
        p.workspace_bytes = di.ws_bytes;
        const int reps = S <= 131072 ? 10 : S <= 524288 ? 5 : 3;
        p.head_dim = kD;
        for (const SparseImpl& impl : sparse_impls()) {
          p.sm90_stages = impl.stages;
          set_kv(p, impl.fp8);
          const bool hopper = impl.hopper;
          const double ms_plan =
              time_ms([&] { hopper ? sparse_attention_plan(p) : sparse_attention_generic_plan(p); }, 1, reps);
          const double ms_run =
              time_ms([&] { hopper ? sparse_attention_run(p) : sparse_attention_generic_run(p); }, 1, reps);
          const double flops = 4.0 * kD * hix.pairs;
          const double tile_flops = 4.0 * kD * 64.0 * 64.0 * hix.tiles;
          const double ms = ms_plan + ms_run;
          std::fprintf(stderr,
                       "S=%lld %s [%s]: plan %.3f ms + kernel %.3f ms; work %.4f of dense causal; %.1f TFLOP/s on attended "
                       "pairs, %.1f on visited 64x64 tiles (index gen on host %.1f s, %lld ranges, %lld cols)\n",
                       (long long)S, name, impl.name, ms_plan, ms_run, flops / dense_flops,
                       flops / (ms_run * 1e-3) / 1e12, tile_flops / (ms_run * 1e-3) / 1e12, gen_s,
                       (long long)di.ix.n_ranges, (long long)di.ix.n_cols);
          std::snprintf(buf, sizeof buf,
                        "{\"seq\": %lld, \"kernel\": \"%s\", \"impl\": \"%s\", \"ms\": %.3f, \"plan_ms\": %.4f, "
                        "\"kernel_ms\": %.3f, \"work_fraction\": %.5f, \"tflops_pairs\": %.1f, \"tflops_tiles\": %.1f, "
                        "\"n_ranges\": %lld, \"n_cols\": %lld, \"reps\": %d}",
                        (long long)S, name, impl.name, ms, ms_plan, ms_run, flops / dense_flops,
                        flops / (ms_run * 1e-3) / 1e12, tile_flops / (ms_run * 1e-3) / 1e12, (long long)di.ix.n_ranges,
                        (long long)di.ix.n_cols, reps);
          emit(buf);
        }
      }
      for (void* x : {q, k, v, o, static_cast<void*>(lse), k8, v8}) dev_free(x);
    }
    js.finish(json_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_sparse: %s\n", e.what());
    return 1;
  }
  return 0;
}

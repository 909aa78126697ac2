// sparse_decode_cases.h (tests): random sparse-decode problems and their fp64 oracle, shared by
// the CPU reference test (tests/kernels) and the CUDA test (tests/cuda).
//
// A case is a batch of sequences of mixed lengths in a paged KV pool with a random,
// non-contiguous block table (unused table slots and spare pages point at a page of NaNs, so a
// kernel reading past a sequence shows up as NaN), bf16/fp8/f32 element types, and a decode index
// whose rows mix adversarial shapes: empty rows, rows empty after clipping, overlapping and
// touching ranges, ranges past the length, duplicate columns, columns inside ranges, single-key
// rows, sinks + window, HiP-like key blocks, TokenSelect-like token lists, whole-sequence rows.
// The oracle is "dense attention with the same mask" in fp64: the mask is marked straight from
// the raw ranges and columns, independent of any normalisation code.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/params/decode_index.h"
#include "kernels/params/kv_view.h"
#include "kernels/ref/fp8_e4m3.h"
#include "util/half.h"

namespace longctx::test {

struct DecodeCaseShape {
  std::vector<int32_t> lens;  // tokens per sequence (n_seq = lens.size())
  int n_head = 32, n_kv_head = 8, n_index_head = 1, head_dim = 128, page_size = 16;
  KvElem elem = KvElem::bf16;
  int spare_pages = 3;     // extra pages (NaN) in the pool
  int extra_capacity = 5;  // index capacity beyond what the rows use (graph buffers are fixed)
  double q_scale = 1.0;    // larger: peakier softmax
};

struct DecodeCase {
  DecodeCaseShape shape;
  int n_seq = 0, max_pages = 0;
  int64_t n_pages = 0, nan_page = 0;
  std::vector<int32_t> block_table;  // [n_seq][max_pages]
  // Pools [n_pages * page_size][n_kv_head][head_dim] in the stored type, plus the values a kernel
  // sees (dequantised, NaN on spare pages) as float.
  std::vector<float> k_f32, v_f32;
  std::vector<uint16_t> k_bf16, v_bf16;
  std::vector<uint8_t> k_fp8, v_fp8;
  float k_scale = 1.f, v_scale = 1.f;
  std::vector<uint16_t> q_bf16;  // [n_seq][n_head][head_dim]
  std::vector<float> q;          // the same values as float
  // Index (CSR over rows s * n_index_head + ih), with capacity beyond the used entries.
  std::vector<int32_t> range_ptr, ranges, col_ptr, cols;
  int64_t range_capacity = 0, col_capacity = 0;

  int64_t pool_rows() const { return n_pages * shape.page_size; }
  int64_t row_elems() const { return int64_t(shape.n_kv_head) * shape.head_dim; }
  const void* k_pool() const {
    return shape.elem == KvElem::f32 ? (const void*)k_f32.data()
           : shape.elem == KvElem::bf16 ? (const void*)k_bf16.data() : (const void*)k_fp8.data();
  }
  const void* v_pool() const {
    return shape.elem == KvElem::f32 ? (const void*)v_f32.data()
           : shape.elem == KvElem::bf16 ? (const void*)v_bf16.data() : (const void*)v_fp8.data();
  }
  KvView host_view() const {
    KvView v;
    v.k_pool = k_pool();
    v.v_pool = v_pool();
    v.elem = shape.elem;
    v.k_scale = k_scale;
    v.v_scale = v_scale;
    v.block_table = block_table.data();
    v.seq_lens = shape.lens.data();
    v.n_seq = n_seq;
    v.max_pages_per_seq = max_pages;
    v.page_size = shape.page_size;
    v.n_pages = n_pages;
    v.n_kv_head = shape.n_kv_head;
    v.head_dim = shape.head_dim;
    return v;
  }
  DecodeIndex host_index() const {
    DecodeIndex ix;
    ix.n_seq = n_seq;
    ix.n_index_head = shape.n_index_head;
    ix.range_ptr = range_ptr.data();
    ix.ranges = ranges.data();
    ix.col_ptr = col_ptr.data();
    ix.cols = cols.data();
    ix.range_capacity = range_capacity;
    ix.col_capacity = col_capacity;
    return ix;
  }
};

// One index row of a given kind for a sequence of len tokens (ranges as (start, end) pairs).
inline void make_row(int kind, int64_t len, std::mt19937_64& rng, std::vector<int32_t>& rg, std::vector<int32_t>& cl) {
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int64_t L = std::max<int64_t>(len, 1);
  switch (kind) {
    case 0: break;  // empty row
    case 1:         // empty after clipping: everything at or past the length
      rg = {int32_t(len), int32_t(len + 5), int32_t(len + 10), int32_t(len + 100)};
      cl = {int32_t(len), int32_t(len + 3)};
      break;
    case 2: {  // random overlapping / touching ranges, duplicate columns, columns inside ranges
      const int nr = int(uni(1, 6));
      std::vector<int64_t> starts(nr);
      for (auto& s : starts) s = uni(-3, L + 4);
      std::sort(starts.begin(), starts.end());
      for (int i = 0; i < nr; ++i) {
        const int64_t e = uni(0, 3) == 0 && i > 0 ? starts[i] : starts[i] + uni(0, std::max<int64_t>(L / 3, 1));
        rg.push_back(int32_t(starts[i]));
        rg.push_back(int32_t(e));
        if (i + 1 < nr && uni(0, 2) == 0) starts[i + 1] = std::max(starts[i + 1], e);  // touching
      }
      const int nc = int(uni(0, 24));
      for (int i = 0; i < nc; ++i) cl.push_back(int32_t(uni(-2, L + 2)));
      if (!rg.empty()) cl.push_back(rg[0]);  // inside (or at the start of) a range
      if (!cl.empty()) cl.push_back(cl[0]);  // a duplicate
      std::sort(cl.begin(), cl.end());
      // Ranges must stay sorted by start after the touching adjustment.
      std::vector<std::pair<int32_t, int32_t>> pr;
      for (size_t i = 0; i < rg.size(); i += 2) pr.push_back({rg[i], rg[i + 1]});
      std::sort(pr.begin(), pr.end(), [](auto a, auto b) { return a.first < b.first; });
      rg.clear();
      for (auto [a, b] : pr) {
        rg.push_back(a);
        rg.push_back(b);
      }
      break;
    }
    case 3:  // single key
      if (uni(0, 1)) cl = {int32_t(uni(0, L - 1))};
      else {
        const int32_t t = int32_t(uni(0, L - 1));
        rg = {t, t + 1};
      }
      break;
    case 4: {  // sinks + window
      const int64_t sinks = uni(0, 8), window = uni(1, L);
      rg = {0, int32_t(sinks), int32_t(std::max<int64_t>(len - window, 0)), int32_t(len)};
      break;
    }
    case 5: {  // HiP-like key blocks of bs tokens, some duplicated, the last one possibly past len
      const int64_t bs = uni(2, 64);
      const int64_t nb = (L + bs - 1) / bs;
      std::vector<int64_t> blocks;
      for (int i = 0, n = int(uni(1, 12)); i < n; ++i) blocks.push_back(uni(0, nb - 1));
      blocks.push_back(nb - 1);
      std::sort(blocks.begin(), blocks.end());
      for (int64_t b : blocks) {
        rg.push_back(int32_t(b * bs));
        rg.push_back(int32_t(b * bs + bs));
      }
      break;
    }
    case 6: {  // TokenSelect-like: a sorted list of token slots
      for (int i = 0, n = int(uni(1, 300)); i < n; ++i) cl.push_back(int32_t(uni(0, L - 1)));
      std::sort(cl.begin(), cl.end());
      break;
    }
    default:  // the whole sequence and more
      rg = {-5, int32_t(len + 70)};
      break;
  }
}
constexpr int kRowKinds = 8;

// Builds a random case. Row kinds cycle through all kinds (offset by a random start) so every
// batch holds each of them.
inline DecodeCase make_case(const DecodeCaseShape& shape, std::mt19937_64& rng) {
  DecodeCase c;
  c.shape = shape;
  c.n_seq = int(shape.lens.size());
  const int ps = shape.page_size, D = shape.head_dim;
  int64_t used_pages = 0;
  for (int32_t len : shape.lens) {
    c.max_pages = std::max<int>(c.max_pages, int((len + ps - 1) / ps));
    used_pages += (len + ps - 1) / ps;
  }
  c.max_pages = std::max(c.max_pages + 1, 1);  // one slot more than the longest needs (points at NaNs)
  c.n_pages = used_pages + shape.spare_pages + 1;
  c.nan_page = c.n_pages - 1;
  std::vector<int32_t> perm(size_t(c.n_pages - 1));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<char> used(size_t(c.n_pages), 0);
  c.block_table.assign(size_t(c.n_seq) * c.max_pages, int32_t(c.nan_page));
  size_t next = 0;
  for (int s = 0; s < c.n_seq; ++s)
    for (int p = 0; p < (shape.lens[s] + ps - 1) / ps; ++p) {
      c.block_table[size_t(s) * c.max_pages + p] = perm[next];
      used[size_t(perm[next++])] = 1;
    }
  // Pools: N(0,1) keys, N(0,2^2) values; rows of unused pages, and slots past a sequence's length
  // inside its last page, are NaN.
  const int64_t n = c.pool_rows() * c.row_elems();
  std::normal_distribution<float> nk(0.f, 1.f), nv(0.f, 2.f);
  c.k_f32.resize(size_t(n));
  c.v_f32.resize(size_t(n));
  std::vector<char> live(size_t(c.pool_rows()), 0);
  for (int s = 0; s < c.n_seq; ++s)
    for (int64_t t = 0; t < shape.lens[s]; ++t)
      live[size_t(int64_t(c.block_table[size_t(s) * c.max_pages + t / ps]) * ps + t % ps)] = 1;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t r = 0; r < c.pool_rows(); ++r)
    for (int64_t e = 0; e < c.row_elems(); ++e) {
      const size_t i = size_t(r * c.row_elems() + e);
      c.k_f32[i] = live[size_t(r)] ? nk(rng) : nan;
      c.v_f32[i] = live[size_t(r)] ? nv(rng) : nan;
    }
  if (shape.elem == KvElem::bf16) {
    c.k_bf16.resize(size_t(n));
    c.v_bf16.resize(size_t(n));
    for (size_t i = 0; i < size_t(n); ++i) {
      c.k_bf16[i] = f32_to_bf16(c.k_f32[i]);
      c.v_bf16[i] = f32_to_bf16(c.v_f32[i]);
      c.k_f32[i] = bf16_to_f32(c.k_bf16[i]);
      c.v_f32[i] = bf16_to_f32(c.v_bf16[i]);
    }
  } else if (shape.elem == KvElem::fp8_e4m3) {
    // Per-layer scales from the live values' range, as a cache writer would pick them.
    float mk = 0.f, mv = 0.f;
    for (size_t i = 0; i < size_t(n); ++i)
      if (!std::isnan(c.k_f32[i])) {
        mk = std::max(mk, std::fabs(c.k_f32[i]));
        mv = std::max(mv, std::fabs(c.v_f32[i]));
      }
    c.k_scale = std::max(mk, 1e-3f) / 448.f;
    c.v_scale = std::max(mv, 1e-3f) / 448.f;
    c.k_fp8.resize(size_t(n));
    c.v_fp8.resize(size_t(n));
    for (size_t i = 0; i < size_t(n); ++i) {
      c.k_fp8[i] = f32_to_e4m3(c.k_f32[i] / c.k_scale);
      c.v_fp8[i] = f32_to_e4m3(c.v_f32[i] / c.v_scale);
      c.k_f32[i] = e4m3_to_f32(c.k_fp8[i]) * c.k_scale;
      c.v_f32[i] = e4m3_to_f32(c.v_fp8[i]) * c.v_scale;
    }
  }
  // Queries, bf16-rounded (the GPU kernel takes bf16 q).
  std::normal_distribution<float> nq(0.f, float(shape.q_scale));
  c.q_bf16.resize(size_t(c.n_seq) * shape.n_head * D);
  c.q.resize(c.q_bf16.size());
  for (size_t i = 0; i < c.q.size(); ++i) {
    c.q_bf16[i] = f32_to_bf16(nq(rng));
    c.q[i] = bf16_to_f32(c.q_bf16[i]);
  }
  // Index rows.
  const int start_kind = int(std::uniform_int_distribution<int>(0, kRowKinds - 1)(rng));
  c.range_ptr = {0};
  c.col_ptr = {0};
  for (int s = 0, row = 0; s < c.n_seq; ++s)
    for (int ih = 0; ih < shape.n_index_head; ++ih, ++row) {
      std::vector<int32_t> rg, cl;
      make_row((start_kind + row) % kRowKinds, shape.lens[s], rng, rg, cl);
      c.ranges.insert(c.ranges.end(), rg.begin(), rg.end());
      c.cols.insert(c.cols.end(), cl.begin(), cl.end());
      c.range_ptr.push_back(int32_t(c.ranges.size() / 2));
      c.col_ptr.push_back(int32_t(c.cols.size()));
    }
  c.range_capacity = int64_t(c.ranges.size() / 2) + shape.extra_capacity;
  c.col_capacity = int64_t(c.cols.size()) + shape.extra_capacity;
  c.ranges.resize(size_t(2 * c.range_capacity), -7);  // garbage past the used entries
  c.cols.resize(size_t(c.col_capacity), -7);
  return c;
}

// fp64 oracle: dense softmax attention over keys 0..len-1 with the row's mask.
//   o [n_seq][n_head][head_dim], lse [n_seq][n_head] (-inf and O = 0 for empty rows)
inline void oracle(const DecodeCase& c, std::vector<double>& o, std::vector<double>& lse) {
  const auto& sh = c.shape;
  const int D = sh.head_dim, group = sh.n_head / sh.n_kv_head, hpi = sh.n_head / sh.n_index_head;
  const double scale = 1.0 / std::sqrt(double(D));
  o.assign(size_t(c.n_seq) * sh.n_head * D, 0.0);
  lse.assign(size_t(c.n_seq) * sh.n_head, -std::numeric_limits<double>::infinity());
  for (int s = 0; s < c.n_seq; ++s) {
    const int64_t len = sh.lens[s];
    for (int h = 0; h < sh.n_head; ++h) {
      const int64_t row = int64_t(s) * sh.n_index_head + h / hpi;
      std::vector<char> mask(size_t(len), 0);
      for (int64_t i = c.range_ptr[size_t(row)]; i < c.range_ptr[size_t(row) + 1]; ++i)
        for (int64_t t = std::max<int64_t>(c.ranges[size_t(2 * i)], 0); t < std::min<int64_t>(c.ranges[size_t(2 * i + 1)], len); ++t)
          mask[size_t(t)] = 1;
      for (int64_t i = c.col_ptr[size_t(row)]; i < c.col_ptr[size_t(row) + 1]; ++i)
        if (c.cols[size_t(i)] >= 0 && c.cols[size_t(i)] < len) mask[size_t(c.cols[size_t(i)])] = 1;
      const float* q = c.q.data() + (size_t(s) * sh.n_head + h) * D;
      const int kvh = h / group;
      std::vector<double> sc(size_t(len), -std::numeric_limits<double>::infinity());
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t t = 0; t < len; ++t) {
        if (!mask[size_t(t)]) continue;
        const int64_t prow = int64_t(c.block_table[size_t(s) * c.max_pages + t / sh.page_size]) * sh.page_size + t % sh.page_size;
        const float* k = c.k_f32.data() + prow * c.row_elems() + int64_t(kvh) * D;
        double acc = 0;
        for (int d = 0; d < D; ++d) acc += double(q[d]) * double(k[d]);
        sc[size_t(t)] = acc * scale;
        mx = std::max(mx, sc[size_t(t)]);
      }
      if (mx == -std::numeric_limits<double>::infinity()) continue;
      double sum = 0;
      double* out = o.data() + (size_t(s) * sh.n_head + h) * D;
      for (int64_t t = 0; t < len; ++t) {
        if (!mask[size_t(t)]) continue;
        const double w = std::exp(sc[size_t(t)] - mx);
        sum += w;
        const int64_t prow = int64_t(c.block_table[size_t(s) * c.max_pages + t / sh.page_size]) * sh.page_size + t % sh.page_size;
        const float* v = c.v_f32.data() + prow * c.row_elems() + int64_t(kvh) * D;
        for (int d = 0; d < D; ++d) out[d] += w * double(v[d]);
      }
      for (int d = 0; d < D; ++d) out[d] /= sum;
      lse[size_t(s) * sh.n_head + h] = mx + std::log(sum);
    }
  }
}

// Largest |value| the kernels read from V (live rows), for absolute tolerances.
inline double max_abs_v(const DecodeCase& c) {
  double m = 0;
  for (float x : c.v_f32)
    if (!std::isnan(x)) m = std::max(m, double(std::fabs(x)));
  return m;
}

}  // namespace longctx::test

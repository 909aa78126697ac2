// sparse_test_util.h (tests/cuda): what the sparse attention tests of both kernels share
// (test_sparse_attention.cpp: Hopper; test_sparse_attention_generic.cpp: mma.sync, d 64/128):
// the problem shape, the random index generators, the index on the device (DevIndex), and fp8 K/V
// for the fp8-tile cases (also test_sparse_window.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cuda/sparse_attention.h"
#include "kernels/ref/fp8_e4m3.h"
#include "sparse/sparse_index.h"
#include "test_util.h"

namespace longctx::cuda::test {

struct Shape {
  int64_t n_q, n_kv, q_pos0;
  int n_head, n_kv_head;
  bool causal = true;
};

// A fresh generator seeded from the run's printed seed (test_util.h rng()).
inline std::mt19937_64 gen() { return std::mt19937_64(rng()()); }

// Ends block row `hi`'s current block with ranges rs and columns cs, each sorted (the format's
// order: by range start, columns ascending; overlaps and repeats stay).
inline void end_block_sorted(HeadIndex& hi, std::vector<KeyRange> rs, std::vector<int32_t> cs) {
  std::sort(rs.begin(), rs.end(), [](auto& a, auto& c) { return a.start < c.start; });
  for (auto& r : rs) hi.ranges.push_back(r);
  std::sort(cs.begin(), cs.end());
  for (int32_t c : cs) hi.cols.push_back(c);
  hi.end_block();
}

// Many short ranges and many columns per block (150 ranges of 1-20 keys, 200 columns): most tiles
// are partial, ranges overlap and columns fall inside ranges.
inline SparseIndex many_short(const Shape& sh, int n_index_head, std::mt19937_64& g) {
  std::uniform_int_distribution<int32_t> key(0, int32_t(sh.n_kv) - 1), len(1, 20);
  SparseIndex idx;
  idx.n_q = sh.n_q;
  idx.heads.resize(size_t(n_index_head));
  for (auto& hi : idx.heads)
    for (int64_t b = 0; b < n_query_blocks(sh.n_q); ++b) {
      std::vector<KeyRange> rs;
      for (int i = 0; i < 150; ++i) {
        const int32_t s0 = key(g);
        rs.push_back({s0, s0 + len(g)});
      }
      std::vector<int32_t> cs;
      for (int i = 0; i < 200; ++i) cs.push_back(key(g));
      end_block_sorted(hi, std::move(rs), std::move(cs));
    }
  return idx;
}

// Random index: per block 0..4 ranges (sorted by start, overlapping, some ending past n_kv),
// 0..90 columns (sorted, with repeats, some inside ranges, some past the causal frontier);
// p_empty of the blocks get nothing.
inline SparseIndex random_index(const Shape& sh, int n_index_head, double p_empty, std::mt19937_64& g) {
  SparseIndex idx;
  idx.n_q = sh.n_q;
  idx.heads.resize(size_t(n_index_head));
  std::uniform_real_distribution<double> u(0, 1);
  for (auto& hi : idx.heads)
    for (int64_t b = 0; b < n_query_blocks(sh.n_q); ++b) {
      if (u(g) >= p_empty) {
        const int nr = int(u(g) * 5);
        std::vector<KeyRange> rs;
        for (int i = 0; i < nr; ++i) {
          const int32_t s = int32_t(u(g) * sh.n_kv);
          const int32_t len = int32_t(u(g) * (u(g) < 0.3 ? 400 : 100));
          rs.push_back({s, std::min<int32_t>(int32_t(sh.n_kv + 70), s + len)});
        }
        std::sort(rs.begin(), rs.end(), [](auto& a, auto& c) { return a.start < c.start; });
        for (auto& r : rs) hi.ranges.push_back(r);
        const int ncol = int(u(g) * 91);
        std::vector<int32_t> cs;
        for (int i = 0; i < ncol; ++i) {
          cs.push_back(int32_t(u(g) * sh.n_kv));
          if (u(g) < 0.1) cs.push_back(cs.back());  // repeat
        }
        std::sort(cs.begin(), cs.end());
        for (int32_t c : cs) hi.cols.push_back(c);
      }
      hi.end_block();
    }
  return idx;
}

// The CPU index flattened to the device CSR layout of sparse_attention.h, on the device.
struct DevIndex {
  std::vector<int64_t> range_ptr{0}, col_ptr{0};
  std::vector<int32_t> ranges, cols;
  std::unique_ptr<DevBuf> rp, cp, rg, cl;
  DeviceSparseIndex ix;
  DevIndex(const SparseIndex& idx, int64_t n_q) {
    for (const auto& hi : idx.heads)
      for (int64_t b = 0; b < hi.n_blocks(); ++b) {
        for (const auto& r : hi.block_ranges(b)) {
          ranges.push_back(r.start);
          ranges.push_back(r.end);
        }
        for (int32_t c : hi.block_cols(b)) cols.push_back(c);
        range_ptr.push_back(int64_t(ranges.size() / 2));
        col_ptr.push_back(int64_t(cols.size()));
      }
    rp = std::make_unique<DevBuf>(range_ptr.size() * 8);
    cp = std::make_unique<DevBuf>(col_ptr.size() * 8);
    rg = std::make_unique<DevBuf>(std::max<size_t>(ranges.size(), 1) * 4);
    cl = std::make_unique<DevBuf>(std::max<size_t>(cols.size(), 1) * 4);
    rp->upload(range_ptr);
    cp->upload(col_ptr);
    if (!ranges.empty()) rg->upload(ranges);
    if (!cols.empty()) cl->upload(cols);
    ix.n_index_head = int(idx.heads.size());
    ix.n_qblk = n_query_blocks(n_q);
    ix.range_ptr = rp->as<int64_t>();
    ix.col_ptr = cp->as<int64_t>();
    ix.ranges = rg->as<int32_t>();
    ix.cols = cl->as<int32_t>();
    ix.n_ranges = range_ptr.back();
    ix.n_cols = col_ptr.back();
  }
};

// fp8 K or V for the fp8-tile cases (SparseAttnParams::kv_dtype fp8_e4m3): e4m3 codes of x at the
// fp8 cache's scale rule (amax onto e4m3's range), and the dequantized values (code * scale) that
// the fp64 oracle reads, so the kernel is judged against attention over exactly what it was given.
struct Fp8Tensor {
  std::vector<uint8_t> codes;   // [x.size()] e4m3
  std::vector<float> dequant;   // [x.size()] e4m3_to_f32(code) * scale
  float scale = 1.f;
};

inline Fp8Tensor quantize_e4m3(const std::vector<float>& x) {
  float amax = 0.f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  Fp8Tensor t;
  t.scale = fp8_scale_for_amax(amax);
  t.codes.resize(x.size());
  t.dequant.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    t.codes[i] = f32_to_e4m3(x[i] / t.scale);
    t.dequant[i] = e4m3_to_f32(t.codes[i]) * t.scale;
  }
  return t;
}

}  // namespace longctx::cuda::test

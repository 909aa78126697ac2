// test_builders.cpp: each index builder vs a brute-force reimplementation of its selection rule
// on small shapes (A-shape, VS estimate, VS line selection, VS conversion, block-sparse).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include "methods/a_shape/a_shape_index.h"
#include "methods/minference/block_sparse_index.h"
#include "methods/minference/vs_convert.h"
#include "methods/minference/vs_estimate.h"
#include "test_util.h"
#include "util/error.h"

namespace longctx {
namespace {

// The key set block b of hi attends, as a bitmap over [0, n_kv).
std::vector<bool> block_set(const HeadIndex& hi, int64_t b, int64_t n_kv) {
  std::vector<bool> s(size_t(n_kv), false);
  for (const auto& r : hi.block_ranges(b))
    for (int64_t j = std::max<int64_t>(r.start, 0); j < std::min<int64_t>(r.end, n_kv); ++j) s[size_t(j)] = true;
  for (const int32_t c : hi.block_cols(b)) s[size_t(c)] = true;
  return s;
}

struct Chunk {
  int64_t n_q, q_pos0;
};
const Chunk kChunks[] = {{1, 0}, {64, 0}, {200, 0}, {130, 77}, {65, 300}, {10, 1000}};

TEST(AShapeIndex, MatchesRule) {
  for (const auto c : kChunks)
    for (const auto& [sink, window] : {std::pair<int64_t, int64_t>{4, 16}, {0, 64}, {30, 1}, {100, 100}, {2000, 5}}) {
      const int64_t n_kv = c.q_pos0 + c.n_q;
      HeadIndex hi;
      build_a_shape_index({.sink = sink, .window = window}, c.n_q, c.q_pos0, n_kv, hi);
      ASSERT_EQ(hi.n_blocks(), n_query_blocks(c.n_q));
      for (int64_t b = 0; b < hi.n_blocks(); ++b) {
        const int64_t first = c.q_pos0 + b * 64, last = c.q_pos0 + std::min<int64_t>((b + 1) * 64, c.n_q) - 1;
        const auto got = block_set(hi, b, n_kv);
        for (int64_t j = 0; j < n_kv; ++j) {
          const bool want = j <= last && (j < sink || j >= first - window + 1);
          ASSERT_EQ(got[size_t(j)], want) << "sink " << sink << " window " << window << " block " << b << " key " << j;
        }
      }
    }
}

TEST(VsEstimate, MatchesBruteForce) {
  for (const auto c : kChunks) {
    auto pr = test::make_problem(c.n_q, c.q_pos0, 4, 2, 16, 31 + c.n_q);
    for (int h = 0; h < 4; ++h) {
      VsScores s;
      estimate_vs_scores(pr.p, h, s);
      const int64_t n_keys = c.q_pos0 + c.n_q;
      ASSERT_EQ(s.n_keys, n_keys);
      std::vector<double> vert(size_t(n_keys), 0), slash(size_t(n_keys), 0);
      const int hk = h / 2;
      for (int64_t i = std::max<int64_t>(0, c.n_q - 64); i < c.n_q; ++i) {
        const int64_t qp = c.q_pos0 + i;
        std::vector<double> a(size_t(qp + 1));
        for (int64_t j = 0; j <= qp; ++j) {
          double dot = 0;
          for (int t = 0; t < 16; ++t) dot += double(pr.q[size_t((i * 4 + h) * 16 + t)]) * pr.k[size_t((j * 2 + hk) * 16 + t)];
          a[size_t(j)] = dot * pr.p.scale;
        }
        const double mx = *std::max_element(a.begin(), a.end());
        double sum = 0;
        for (auto& x : a) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j <= qp; ++j) {
          vert[size_t(j)] += a[size_t(j)] / sum;
          slash[size_t(qp - j)] += a[size_t(j)] / sum;
        }
      }
      for (int64_t j = 0; j < n_keys; ++j) {
        ASSERT_NEAR(s.vertical[size_t(j)], vert[size_t(j)], 1e-5) << j;
        ASSERT_NEAR(s.slash[size_t(j)], slash[size_t(j)], 1e-5) << j;
      }
    }
  }
}

// Brute-force top-k: sort every index by (forced first, score desc, index asc), take k.
std::vector<int32_t> brute_top(const std::vector<float>& score, int64_t n_forced, int64_t k) {
  std::vector<int32_t> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) {
    const bool fa = a < n_forced, fb = b < n_forced;
    if (fa != fb) return fa;
    if (fa) return a < b;
    return score[size_t(a)] > score[size_t(b)];
  });
  idx.resize(size_t(std::min<int64_t>(k, int64_t(idx.size()))));
  std::sort(idx.begin(), idx.end());
  return idx;
}

TEST(VsSelect, ForcedLinesAndClampedBudgets) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (const int64_t n : {10, 40, 120, 1000}) {
    VsScores s;
    s.n_keys = n;
    for (int64_t j = 0; j < n; ++j) s.vertical.push_back(u(rng)), s.slash.push_back(u(rng));
    for (const auto& [kv, ks] : {std::pair<int64_t, int64_t>{0, 0}, {30, 50}, {100, 800}, {1000, 6096}, {3500, 100}, {5, 120}}) {
      VsLines lines;
      select_vs_lines(s, kv, ks, lines);
      const int64_t want_kv = std::min(n, std::max<int64_t>(kv, 30)), want_ks = std::min(n, std::max<int64_t>(ks, 50));
      EXPECT_EQ(lines.vertical, brute_top(s.vertical, 30, want_kv)) << n << " " << kv;
      EXPECT_EQ(lines.slash, brute_top(s.slash, 100, want_ks)) << n << " " << ks;
      // The sinks and, budget permitting, the nearest diagonals are always there.
      for (int32_t j = 0; j < std::min<int64_t>(n, 30); ++j) EXPECT_TRUE(std::binary_search(lines.vertical.begin(), lines.vertical.end(), j));
      EXPECT_EQ(lines.slash.front(), 0);
    }
  }
  VsScores s;
  s.n_keys = 4;
  s.vertical.assign(4, 0.f);
  s.slash.assign(4, 0.f);
  VsLines lines;
  EXPECT_THROW(select_vs_lines(s, -1, 10, lines), Error);
}

TEST(VsConvert, MatchesBruteForceAndIsCanonical) {
  std::mt19937_64 rng(17);
  for (const auto c : kChunks)
    for (int trial = 0; trial < 6; ++trial) {
      const int64_t n_kv = c.q_pos0 + c.n_q;
      auto pick = [&](int64_t n, int64_t k) {
        std::set<int32_t> s;
        std::uniform_int_distribution<int64_t> d(0, n - 1);
        for (int64_t i = 0; i < k; ++i) s.insert(int32_t(d(rng)));
        return std::vector<int32_t>(s.begin(), s.end());
      };
      VsLines lines;
      lines.vertical = pick(n_kv, 1 + trial * 5);
      lines.slash = pick(n_kv, 1 + trial * 7);
      const bool has_diag = trial % 2 == 0;
      if (has_diag && lines.slash.front() != 0) lines.slash.insert(lines.slash.begin(), 0);
      HeadIndex hi;
      convert_vs_index(lines, c.n_q, c.q_pos0, n_kv, hi);
      ASSERT_EQ(hi.n_blocks(), n_query_blocks(c.n_q));
      for (int64_t b = 0; b < hi.n_blocks(); ++b) {
        const int64_t first = c.q_pos0 + b * 64, last = c.q_pos0 + std::min<int64_t>((b + 1) * 64, c.n_q) - 1;
        const auto got = block_set(hi, b, n_kv);
        for (int64_t j = 0; j < n_kv; ++j) {
          bool want = j <= last && std::binary_search(lines.vertical.begin(), lines.vertical.end(), int32_t(j));
          for (const int32_t o : lines.slash) want = want || (j >= first - o && j <= last - o);
          ASSERT_EQ(got[size_t(j)], want) << "block " << b << " key " << j;
        }
        // Canonical: ranges disjoint, sorted, not touching; columns outside ranges, causal.
        const auto rs = hi.block_ranges(b);
        for (size_t i = 0; i < rs.size(); ++i) {
          EXPECT_LT(rs[i].start, rs[i].end);
          if (i) {
            EXPECT_GT(rs[i].start, rs[i - 1].end);
          }
        }
        EXPECT_LE(rs.size(), lines.slash.size());
        EXPECT_LE(hi.block_cols(b).size(), lines.vertical.size());
        for (const int32_t col : hi.block_cols(b)) {
          EXPECT_LE(col, last);
          if (has_diag) {
            EXPECT_LT(col, first) << "with o = 0 every column precedes the block";
          }
          for (const auto& r : rs) EXPECT_FALSE(col >= r.start && col < r.end);
        }
      }
    }
}

TEST(BlockSparseIndex, MatchesBruteForce) {
  for (const auto c : kChunks)
    for (const int64_t k_b : {1, 2, 3, 100}) {
      auto pr = test::make_problem(c.n_q, c.q_pos0, 2, 1, 16, 77 + c.n_q + k_b);
      const int64_t n_kv = pr.p.n_kv;
      std::vector<float> pooled;
      pool_keys(pr.p, 0, pooled);
      const int64_t nkb = (n_kv + 63) / 64;
      ASSERT_EQ(int64_t(pooled.size()), nkb * 16);
      for (int h = 0; h < 2; ++h) {
        HeadIndex hi;
        build_block_sparse_index(pr.p, h, k_b, pooled, hi);
        ASSERT_EQ(hi.n_blocks(), n_query_blocks(c.n_q));
        for (int64_t b = 0; b < hi.n_blocks(); ++b) {
          const int64_t i0 = b * 64, i1 = std::min<int64_t>(i0 + 64, c.n_q);
          const int64_t first = c.q_pos0 + i0, last = c.q_pos0 + i1 - 1;
          std::vector<double> qbar(16, 0);
          for (int64_t i = i0; i < i1; ++i)
            for (int t = 0; t < 16; ++t) qbar[size_t(t)] += pr.q[size_t((i * 2 + h) * 16 + t)] / double(i1 - i0);
          const int64_t n_cand = last / 64 + 1;
          struct Cand {
            int64_t c;
            bool forced;
            double s;
          };
          std::vector<Cand> cands;
          for (int64_t cb = 0; cb < n_cand; ++cb) {
            const int64_t j0 = cb * 64, j1 = std::min(j0 + 64, n_kv);
            double s = 0;
            for (int t = 0; t < 16; ++t) {
              double kb = 0;
              for (int64_t j = j0; j < j1; ++j) kb += pr.k[size_t(j * 16 + t)];
              s += qbar[size_t(t)] * kb / double(j1 - j0);
            }
            cands.push_back({cb, cb >= first / 64, s});
          }
          std::stable_sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) {
            if (a.forced != b.forced) return a.forced;
            return a.s > b.s;
          });
          const int64_t n_forced = std::count_if(cands.begin(), cands.end(), [](const Cand& x) { return x.forced; });
          std::vector<bool> want(size_t(n_kv), false);
          for (int64_t i = 0; i < std::min<int64_t>(int64_t(cands.size()), std::max(k_b, n_forced)); ++i)
            for (int64_t j = cands[size_t(i)].c * 64; j < std::min(cands[size_t(i)].c * 64 + 64, n_kv); ++j)
              want[size_t(j)] = true;
          EXPECT_EQ(block_set(hi, b, n_kv), want) << "block " << b << " k_b " << k_b;
          // The block's own positions are always covered (no empty rows).
          for (int64_t j = first; j <= last; ++j) EXPECT_TRUE(want[size_t(j)]);
        }
      }
    }
}

}  // namespace
}  // namespace longctx

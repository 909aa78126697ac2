// self_extend_attention.cpp: see self_extend_attention.h.
#include "methods/self_extend/self_extend_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/ref/attention.h"
#include "sparse/merge_states.h"
#include "sparse/sparse_attention.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {

namespace {

// Rows per rotation task: enough rows to amortise a task, few enough to split a decode step's keys.
constexpr int64_t kRopeGrain = 64;

// Rotate-half RoPE of rows [0, T) of x [T, n_heads, d], row t at position pos_of(t), with
// rope_apply_ref's fp32 arithmetic (angle float(pos) * inv_freq[i], cos/sin times the factor),
// so pos_of(t) = pos0 + t gives rope_apply_ref's values bit for bit. cos/sin are computed once per
// run of equal positions (G grouped keys share one).
template <class PosFn>
void rope_rows(float* x, int64_t T, int n_heads, int d, PosFn pos_of, const LayerRope& rope, ThreadPool& pool) {
  const int half = d / 2;
  pool.parallel_for(
      T,
      [&](int64_t t0, int64_t t1) {
        std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
        int64_t have = -1;
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t pos = pos_of(t);
          if (pos != have) {
            for (int i = 0; i < half; ++i) {
              const float a = float(pos) * rope.inv_freq[i];
              c[size_t(i)] = std::cos(a) * rope.factor;
              s[size_t(i)] = std::sin(a) * rope.factor;
            }
            have = pos;
          }
          for (int h = 0; h < n_heads; ++h) {
            float* v = x + (t * n_heads + h) * d;
            for (int i = 0; i < half; ++i) {
              const float a = v[i], b = v[i + half];
              v[i] = a * c[size_t(i)] - b * s[size_t(i)];
              v[i + half] = b * c[size_t(i)] + a * s[size_t(i)];
            }
          }
        }
      },
      kRopeGrain);
}

// idx restricted, per query block b, to the keys [lo(b), hi(b)) (lo/hi from the block's first and
// last absolute row positions): the near part keeps keys > first - W, the far part keys <= last - W.
template <class Bounds>
SparseIndex clip_index(const SparseIndex& idx, int64_t q_pos0, Bounds bounds) {
  SparseIndex out;
  out.n_q = idx.n_q;
  out.heads.resize(idx.heads.size());
  const int64_t nb = n_query_blocks(idx.n_q);
  for (size_t h = 0; h < idx.heads.size(); ++h) {
    const HeadIndex& in = idx.heads[h];
    HeadIndex& o = out.heads[h];
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t first = q_pos0 + b * kSparseBlockQ;
      const int64_t last = q_pos0 + std::min<int64_t>((b + 1) * kSparseBlockQ, idx.n_q) - 1;
      const auto [lo, hi] = bounds(first, last);
      for (const KeyRange& r : in.block_ranges(b)) {
        const int64_t s = std::max<int64_t>(r.start, lo), e = std::min<int64_t>(r.end, hi);
        if (s < e) o.ranges.push_back({int32_t(s), int32_t(e)});
      }
      for (const int32_t c : in.block_cols(b))
        if (c >= lo && c < hi) o.cols.push_back(c);
      o.end_block();
    }
  }
  return out;
}

}  // namespace

SelfExtendQK self_extend_grouped(const AttnParams& p, const SelfExtendParams& se, const LayerRope& rope,
                                 ThreadPool& pool) {
  if (!se.on()) fail("internal: self_extend_grouped with Self-Extend off");
  SelfExtendQK g;
  const int64_t Q = int64_t(p.n_head) * p.head_dim, KV = int64_t(p.n_kv_head) * p.head_dim;
  g.q.assign(p.q, p.q + p.n_q * Q);
  g.k.assign(p.k, p.k + p.n_kv * KV);
  rope_rows(g.q.data(), p.n_q, p.n_head, p.head_dim,
            [&](int64_t i) { return self_extend_query_pos(se, p.q_pos0 + i); }, rope, pool);
  rope_rows(g.k.data(), p.n_kv, p.n_kv_head, p.head_dim, [&](int64_t j) { return self_extend_key_pos(se, j); }, rope,
            pool);
  g.p = p;
  g.p.q = g.q.data();
  g.p.k = g.k.data();
  return g;
}

void attend_self_extend_ref(const SelfExtendStep& st, ThreadPool& pool) {
  const AttnParams& p = st.p;
  const int64_t W = st.se.neighbor;
  if (!st.se.on()) fail("internal: attend_self_extend_ref with Self-Extend off");
  if (!p.causal) fail("self_extend: needs causal attention (positions are a causal model's)");
  if (p.window > 0) fail("internal: self_extend on a sliding-window layer (those keep their own positions)");
  if (st.grouped.p.q_pos0 != p.q_pos0 || st.grouped.p.n_q != p.n_q || st.grouped.p.n_kv != p.n_kv)
    fail("internal: self_extend grouped q/k were made for another step");
  if (p.n_q == 0) return;
  const int64_t Q = int64_t(p.n_head) * p.head_dim, KV = int64_t(p.n_kv_head) * p.head_dim;
  const float kNegInf = -std::numeric_limits<float>::infinity();

  // Near (SE1): q and the keys a row can reach within W, rotated at their own positions. Keys
  // below k0 stay zero and are never read (window W; the clipped index starts at k0 or later).
  const int64_t k0 = std::max<int64_t>(0, p.q_pos0 - W + 1);
  std::vector<float> qn(p.q, p.q + p.n_q * Q), kn(size_t(p.n_kv * KV), 0.f);
  std::memcpy(kn.data() + k0 * KV, p.k + k0 * KV, size_t((p.n_kv - k0) * KV) * sizeof(float));
  rope_rows(qn.data(), p.n_q, p.n_head, p.head_dim, [&](int64_t i) { return p.q_pos0 + i; }, st.rope, pool);
  rope_rows(kn.data() + k0 * KV, p.n_kv - k0, p.n_kv_head, p.head_dim, [&](int64_t j) { return k0 + j; }, st.rope,
            pool);
  std::vector<float> o_near(size_t(p.n_q * Q)), lse_near(size_t(p.n_head * p.n_q));
  AttnParams pn = p;
  pn.q = qn.data();
  pn.k = kn.data();
  pn.o = o_near.data();
  pn.lse = lse_near.data();
  pn.window = W;

  // Far (SE2): grouped q and k, row q sees keys <= q - W (query positions moved back by W).
  std::vector<float> o_far(size_t(p.n_q * Q), 0.f), lse_far(size_t(p.n_head * p.n_q), kNegInf);
  AttnParams pf = st.grouped.p;
  pf.o = o_far.data();
  pf.lse = lse_far.data();
  pf.window = 0;
  pf.q_pos0 = p.q_pos0 - W;  // rows with q < W: no key, LSE = -inf

  if (st.index) {
    const SparseIndex near = clip_index(*st.index, p.q_pos0, [&](int64_t first, int64_t) {
      return std::pair<int64_t, int64_t>{first - W + 1, std::numeric_limits<int32_t>::max()};
    });
    const SparseIndex far = clip_index(*st.index, p.q_pos0, [&](int64_t, int64_t last) {
      return std::pair<int64_t, int64_t>{0, last - W + 1};
    });
    sparse_attention_ref(pn, near, pool);
    sparse_attention_ref(pf, far, pool);
  } else {
    attention_dense_ref(pn, pool);
    // The dense kernel wants q_pos0 >= 0: run the rows that have far keys (i >= i0) only.
    const int64_t i0 = std::clamp<int64_t>(W - p.q_pos0, 0, p.n_q);
    if (i0 < p.n_q) {
      const int64_t m = p.n_q - i0;
      std::vector<float> lse(size_t(p.n_head * m));
      pf.q = st.grouped.p.q + i0 * Q;
      pf.o = o_far.data() + i0 * Q;
      pf.lse = lse.data();
      pf.n_q = m;
      pf.q_pos0 = p.q_pos0 + i0 - W;
      pf.n_kv = pf.q_pos0 + m;  // the last row's far keys
      attention_dense_ref(pf, pool);
      for (int h = 0; h < p.n_head; ++h)
        std::memcpy(lse_far.data() + h * p.n_q + i0, lse.data() + h * m, size_t(m) * sizeof(float));
    }
  }
  // (SE3): one softmax over both key sets.
  merge_attention_states({.o_a = o_near.data(), .lse_a = lse_near.data(), .o_b = o_far.data(), .lse_b = lse_far.data(),
                          .o = p.o, .lse = p.lse, .n_q = p.n_q, .n_head = p.n_head, .head_dim = p.head_dim},
                         pool);
}

}  // namespace longctx

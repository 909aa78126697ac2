// run_cpu.cpp: see run_cpu.h.
#include "methods/run_cpu.h"

#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/ref/attention.h"
#include "kernels/ref/ops.h"
#include "methods/self_extend/self_extend_attention.h"
#include "sparse/sparse_attention.h"
#include "util/error.h"

namespace longctx {

std::vector<KeySegment> AttentionMethod::select_keys(const AttnParams&, Phase, const LayerRope&, MethodState&,
                                                     ThreadPool&) const {
  fail("attention method '{}' reads rotated keys; it cannot run on a pre-RoPE KV cache", name());
}

void attend_cpu(const MethodRun& run, const AttnParams& p, ThreadPool& pool) {
  if (p.n_q == 0) return;
  if (run.rope) {
    const SelfExtendParams* se = p.window > 0 ? nullptr : run.method.self_extend(run.phase);
    if (se) {  // grouped positions for far keys; a sparse step's index comes from the grouped q/k
      const SelfExtendQK g = self_extend_grouped(p, *se, *run.rope, pool);
      SparseIndex idx;
      const bool sparse = run.method.route(step_of(p, run.phase)) == Route::sparse;
      if (sparse) idx = run.method.build_index(g.p, run.phase, run.state, pool);
      attend_self_extend_ref({.p = p, .se = *se, .rope = *run.rope, .grouped = g, .index = sparse ? &idx : nullptr},
                             pool);
      return;
    }
    std::vector<KeySegment> seg;
    if (p.window > 0) {  // a sliding-window layer: every key at its own position
      seg.push_back({0, p.n_q, std::vector<int32_t>(size_t(p.n_kv))});
      std::iota(seg[0].keys.begin(), seg[0].keys.end(), 0);
    } else {
      seg = run.method.select_keys(p, run.phase, *run.rope, run.state, pool);
    }
    attend_compacted_ref(p, seg, *run.rope, pool);
    return;
  }
  // A sliding-window layer's window is its sparsity: methods apply to global layers only.
  if (p.window > 0 || run.method.route(step_of(p, run.phase)) == Route::dense) {
    attention_dense_ref(p, pool);
    return;
  }
  const SparseIndex idx = run.method.build_index(p, run.phase, run.state, pool);
  sparse_attention_ref(p, idx, pool);
}

void attend_compacted_ref(const AttnParams& p, std::span<const KeySegment> segments, const LayerRope& rope,
                          ThreadPool& pool) {
  const int64_t D = p.head_dim, KV = int64_t(p.n_kv_head) * D, Q = int64_t(p.n_head) * D;
  std::vector<float> q, k, v, lse;  // one segment's [C, Q], [L, KV], [L, KV], [n_head, C]
  int64_t covered = 0;
  for (const KeySegment& s : segments) {
    const int64_t C = s.q_end - s.q_begin, L = int64_t(s.keys.size());
    if (s.q_begin != covered || C <= 0 || s.q_end > p.n_q || L < C)
      fail("internal: pre-RoPE segment rows [{}, {}) of {} (keys {})", s.q_begin, s.q_end, p.n_q, L);
    covered = s.q_end;
    for (int64_t j = 0; j < L; ++j) {
      const int32_t key = s.keys[size_t(j)];
      if (key < 0 || key >= p.n_kv || (j > 0 && key <= s.keys[size_t(j - 1)]))
        fail("internal: pre-RoPE key set not sorted within [0, {}) at entry {}", p.n_kv, j);
      if (j >= L - C && key != p.q_pos0 + s.q_begin + (j - (L - C)))
        fail("internal: pre-RoPE key set must end with the segment's own rows");
    }
    k.resize(size_t(L * KV));
    v.resize(size_t(L * KV));
    for (int64_t j = 0; j < L; ++j) {
      std::memcpy(k.data() + j * KV, p.k + int64_t(s.keys[size_t(j)]) * KV, size_t(KV) * sizeof(float));
      std::memcpy(v.data() + j * KV, p.v + int64_t(s.keys[size_t(j)]) * KV, size_t(KV) * sizeof(float));
    }
    q.assign(p.q + s.q_begin * Q, p.q + s.q_end * Q);
    rope_apply_ref(k.data(), L, p.n_kv_head, int(D), 0, rope.inv_freq, pool, rope.factor);
    rope_apply_ref(q.data(), C, p.n_head, int(D), L - C, rope.inv_freq, pool, rope.factor);
    AttnParams g = p;
    g.q = q.data();
    g.k = k.data();
    g.v = v.data();
    g.o = p.o + s.q_begin * Q;
    g.n_q = C;
    g.n_kv = L;
    g.q_pos0 = L - C;
    if (p.lse) {
      lse.resize(size_t(p.n_head * C));
      g.lse = lse.data();
    }
    attention_dense_ref(g, pool);
    if (p.lse)
      for (int h = 0; h < p.n_head; ++h)
        std::memcpy(p.lse + h * p.n_q + s.q_begin, lse.data() + h * C, size_t(C) * sizeof(float));
  }
  if (covered != p.n_q) fail("internal: pre-RoPE segments cover {} of {} query rows", covered, p.n_q);
}

}  // namespace longctx

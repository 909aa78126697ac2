// infinitehip_method.cpp: see infinitehip_method.h.
#include "methods/infinitehip/infinitehip_method.h"

#include <algorithm>
#include <numeric>

#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {

Route InfiniteHipMethod::route(const AttnStep& s) const {
  const int layer = std::max(s.layer, 0);
  if (hp_.dense_layer(layer)) return Route::dense;
  // Nothing is pruned while the last row's candidates fit every stage's k.
  const int64_t q_last = s.q_pos0 + s.n_q - 1;
  return ihip_candidate_end(hp_, q_last) - hp_.n_sink <= ihip_min_k(hp_, layer) ? Route::dense : Route::sparse;
}

IhipKeySet InfiniteHipMethod::decode_set(const AttnParams& p, const IhipRopeTable* table, State& st) const {
  const int N = hp_.n_stage();
  const size_t l = size_t(std::max(p.layer, 0));
  if (st.layers.size() <= l) st.layers.resize(l + 1);
  if (st.refreshes.empty()) st.refreshes.assign(size_t(N), 0);
  State::Layer& c = st.layers[l];
  if (c.refresh_pos.empty()) c.refresh_pos.assign(size_t(N), -1);
  const int64_t pos = p.q_pos0;
  int first = N;
  for (int i = 0; i < N && first == N; ++i) {
    const int64_t r = c.refresh_pos[size_t(i)];
    if (r < 0 || pos < r || pos - r >= hp_.refresh[size_t(i)]) first = i;
  }
  if (first < N) {
    ihip_prune_block({.hp = hp_, .p = p, .table = table, .row0 = 0, .rows = 1}, first, c.outs);
    for (int i = first; i < N; ++i) c.refresh_pos[size_t(i)] = pos;
    if (first == 0) c.win_begin = ihip_candidate_end(hp_, pos);
    ++st.refreshes[size_t(first)];
  } else {
    ++st.cached_steps;
  }
  IhipKeySet s = ihip_key_set(hp_, pos, c.outs.back());
  s.win_begin = c.win_begin;
  return s;
}

std::vector<IhipKeySet> InfiniteHipMethod::key_sets(const AttnParams& p, Phase phase, const LayerRope* rope, State& st,
                                                    ThreadPool& pool) const {
  const IhipRopeTable* table = nullptr;
  if (hp_.rope) {
    if (!rope) fail("internal: infinitehip with rope=on needs the layer's RoPE");
    const int64_t n_pos = ihip_rope_positions(hp_, p.n_kv);
    // One table per (inv_freq, size): a larger context rebuilds it (sizes grow by doubling).
    auto it = st.tables.lower_bound({rope->inv_freq, n_pos});
    if (it == st.tables.end() || it->first.first != rope->inv_freq) {
      int64_t size = 4096;
      while (size < n_pos) size *= 2;
      it = st.tables.emplace(std::make_pair(rope->inv_freq, size), ihip_rope_table(rope->inv_freq, p.head_dim, size)).first;
    }
    table = &it->second;
  }
  if (phase == Phase::decode && p.n_q == 1) return {decode_set(p, table, st)};
  const int64_t n_blk = n_query_blocks(p.n_q);
  std::vector<IhipKeySet> sets(static_cast<size_t>(n_blk));
  pool.parallel_for(n_blk, [&](int64_t b0, int64_t b1) {
    std::vector<std::vector<int32_t>> outs;
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t row0 = b * kSparseBlockQ, rows = std::min<int64_t>(kSparseBlockQ, p.n_q - row0);
      ihip_prune_block({.hp = hp_, .p = p, .table = table, .row0 = row0, .rows = rows}, 0, outs);
      sets[size_t(b)] = ihip_key_set(hp_, p.q_pos0 + row0 + rows - 1, std::move(outs.back()));
    }
  });
  return sets;
}

SparseIndex InfiniteHipMethod::build_index(const AttnParams& p, Phase phase, MethodState& state,
                                           ThreadPool& pool) const {
  return ihip_sparse_index(key_sets(p, phase, nullptr, static_cast<State&>(state), pool), p.n_q);
}

std::vector<KeySegment> InfiniteHipMethod::select_keys(const AttnParams& p, Phase phase, const LayerRope& rope,
                                                       MethodState& state, ThreadPool& pool) const {
  std::vector<KeySegment> out;
  if (route(step_of(p, phase)) == Route::dense) {  // every key at its own position
    out.push_back({0, p.n_q, std::vector<int32_t>(size_t(p.n_kv))});
    std::iota(out[0].keys.begin(), out[0].keys.end(), 0);
    return out;
  }
  const std::vector<IhipKeySet> sets = key_sets(p, phase, &rope, static_cast<State&>(state), pool);
  for (size_t b = 0; b < sets.size(); ++b) {
    const int64_t r0 = int64_t(b) * kSparseBlockQ;
    out.push_back({r0, std::min<int64_t>(r0 + kSparseBlockQ, p.n_q), sets[b].keys()});
  }
  return out;
}

std::unique_ptr<AttentionMethod> make_infinitehip_method(const std::string& arg, const MethodContext& ctx) {
  IhipParams hp = parse_ihip_params(arg);
  if (ctx.n_layer > 0 && !hp.dense_layers.empty() && hp.dense_layers.back() >= ctx.n_layer)
    fail("infinitehip: dense_layers names layer {} but the model has {} layers (0..{})", hp.dense_layers.back(),
         ctx.n_layer, ctx.n_layer - 1);
  if (ctx.head_dim > 512) fail("infinitehip: head_dim {} > 512 is not supported", ctx.head_dim);
  return std::make_unique<InfiniteHipMethod>(std::move(hp));
}

}  // namespace longctx

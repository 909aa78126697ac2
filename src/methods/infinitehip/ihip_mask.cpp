// ihip_mask.cpp: see ihip_mask.h.
#include "methods/infinitehip/ihip_mask.h"

#include <algorithm>

#include "util/error.h"

namespace longctx {

std::vector<int32_t> IhipKeySet::keys() const {
  std::vector<int32_t> k;
  k.reserve(size_t(sink_end) + selected.size() + size_t(std::max<int64_t>(0, end - win_begin)));
  for (int64_t j = 0; j < sink_end; ++j) k.push_back(int32_t(j));
  k.insert(k.end(), selected.begin(), selected.end());
  for (int64_t j = std::max(win_begin, sink_end); j < end; ++j) k.push_back(int32_t(j));
  return k;
}

int64_t ihip_min_k(const IhipParams& hp, int layer) {
  int64_t min_k = hp.last_k(layer);
  for (const IhipStage& st : hp.stages) min_k = std::min(min_k, st.k);
  return min_k;
}

IhipStage ihip_stage(const IhipParams& hp, int layer, int i) {
  IhipStage s = hp.stages[size_t(i)];
  if (i == hp.n_stage() - 1) s.k = hp.last_k(layer);
  return s;
}

int64_t ihip_rope_positions(const IhipParams& hp, int64_t n_kv) {
  int min_lc = hp.stages[0].l_c;
  for (const IhipStage& s : hp.stages) min_lc = std::min(min_lc, s.l_c);
  // relative: q at n_stream + 1; chunk-indexed: keys at chunk ids < n_chunk, q at most
  // n_chunk - 1 + n_stream.
  return hp.n_stream + 2 + (n_kv + min_lc - 1) / min_lc;
}

void ihip_prune_block(const IhipBlockPrune& b, int first, std::vector<std::vector<int32_t>>& outs) {
  const IhipParams& hp = b.hp;
  const AttnParams& p = b.p;
  const int layer = std::max(p.layer, 0), N = hp.n_stage();
  const IhipRopeMode mode = hp.rope_mode(layer);
  const int64_t pos0 = p.q_pos0 + b.row0, q_last = pos0 + b.rows - 1;
  outs.resize(size_t(N));
  std::vector<int32_t> range;
  if (first == 0) {
    const int64_t cand_end = ihip_candidate_end(hp, q_last);
    for (int64_t j = hp.n_sink; j < cand_end; ++j) range.push_back(int32_t(j));
  }
  std::vector<float> q;       // [n_kv_head][group * rows][d]
  std::vector<float> offset;  // rank=local: [n_kv_head][group * rows]
  for (int i = first; i < N; ++i) {
    const std::vector<int32_t>& cand = i == 0 ? range : outs[size_t(i - 1)];
    const IhipStage st = ihip_stage(hp, layer, i);
    const int64_t n_chunk = (int64_t(cand.size()) + st.l_c - 1) / st.l_c;
    const bool prunes = n_chunk > st.keep_chunks();  // else every candidate survives: no scores needed
    if (prunes)
      ihip_pack_queries(p.q, p.n_head, p.n_kv_head, p.head_dim, b.row0, b.rows, pos0, mode, b.table, n_chunk,
                        hp.n_stream, q);
    IhipStageInput in{.q = q.data(), .n_qs = int(p.n_head / p.n_kv_head * b.rows), .k = p.k,
                      .k_stride = int64_t(p.n_kv_head) * p.head_dim, .n_kv_head = p.n_kv_head,
                      .head_dim = p.head_dim, .rope = mode, .table = b.table};
    if (prunes && hp.rank == IhipRank::local) {
      ihip_local_offsets(in, {.rows = b.rows, .pos0 = pos0, .n_sink = hp.n_sink,
                              .win_begin = ihip_candidate_end(hp, q_last), .n_chunk = n_chunk}, offset);
      in.offset = offset.data();
    }
    ihip_prune_stage(st, in, cand, outs[size_t(i)]);
  }
}

IhipKeySet ihip_key_set(const IhipParams& hp, int64_t q_last, std::vector<int32_t> selected) {
  IhipKeySet s;
  s.sink_end = std::min(hp.n_sink, q_last + 1);
  s.selected = std::move(selected);
  s.win_begin = ihip_candidate_end(hp, q_last);
  s.end = q_last + 1;
  return s;
}

SparseIndex ihip_sparse_index(std::span<const IhipKeySet> blocks, int64_t n_q) {
  SparseIndex idx;
  idx.n_q = n_q;
  idx.heads.resize(1);
  HeadIndex& hi = idx.heads[0];
  for (const IhipKeySet& s : blocks) {
    const int64_t first = hi.range_ptr.back();
    auto add = [&](int64_t a, int64_t e) {
      if (a >= e) return;
      if (int64_t(hi.ranges.size()) > first && hi.ranges.back().end >= a)
        hi.ranges.back().end = int32_t(std::max<int64_t>(hi.ranges.back().end, e));  // touching runs: one range
      else
        hi.ranges.push_back({int32_t(a), int32_t(e)});
    };
    add(0, s.sink_end);
    for (size_t i = 0; i < s.selected.size();) {  // runs of consecutive positions
      size_t j = i + 1;
      while (j < s.selected.size() && s.selected[j] == s.selected[j - 1] + 1) ++j;
      add(s.selected[i], int64_t(s.selected[j - 1]) + 1);
      i = j;
    }
    add(std::max(s.win_begin, s.sink_end), s.end);
    hi.end_block();
  }
  return idx;
}

}  // namespace longctx

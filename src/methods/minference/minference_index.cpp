// minference_index.cpp: see minference_index.h.
#include "methods/minference/minference_index.h"

#include <algorithm>

#include "methods/a_shape/a_shape_index.h"
#include "methods/minference/block_sparse_index.h"
#include "methods/minference/vs_convert.h"
#include "methods/minference/vs_estimate.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {

namespace {

// Head h's lines estimated from p's last queries (p: a chunk, or the prompt's last kLastQ rows).
VsLines estimate_head_lines(const AttnParams& p, int h, const HeadPattern& hp, double ratio) {
  VsScores scores;
  VsLines lines;
  estimate_vs_scores(p, h, scores);
  select_vs_lines(scores, int64_t(double(hp.vertical) * ratio), int64_t(double(hp.slash) * ratio), lines);
  return lines;
}

void check_head_count(const AttnParams& p, std::span<const HeadPattern> heads) {
  if (int64_t(heads.size()) != p.n_head)
    fail("minference: {} head patterns for a layer with {} query heads", heads.size(), p.n_head);
}

}  // namespace

void build_head_index(const AttnParams& p, int h, const HeadPattern& hp, HeadIndex& out, double ratio,
                      const VsLines* lines) {
  switch (hp.kind) {
    case PatternKind::VerticalSlash:
      if (!lines) {
        convert_vs_index(estimate_head_lines(p, h, hp, ratio), p.n_q, p.q_pos0, p.n_kv, out);
      } else {  // the prompt's lines; this chunk's queries see no column at or past its n_kv (causal)
        VsLines mine{.vertical = {}, .slash = lines->slash};
        const auto end = std::lower_bound(lines->vertical.begin(), lines->vertical.end(), p.n_kv);
        mine.vertical.assign(lines->vertical.begin(), end);
        convert_vs_index(mine, p.n_q, p.q_pos0, p.n_kv, out);
      }
      break;
    case PatternKind::BlockSparse: {
      std::vector<float> pooled;
      pool_keys(p, h / (p.n_head / p.n_kv_head), pooled);
      build_block_sparse_index(p, h, hp.vertical, pooled, out);
      break;
    }
    case PatternKind::AShape:
      build_a_shape_index({.sink = hp.vertical, .window = hp.slash}, p.n_q, p.q_pos0, p.n_kv, out);
      break;
  }
}

SparseIndex build_minference_index(const AttnParams& p, std::span<const HeadPattern> heads, ThreadPool& pool,
                                   double ratio, std::span<const VsLines> prompt_lines) {
  check_head_count(p, heads);
  if (!prompt_lines.empty() && prompt_lines.size() != heads.size())
    fail("internal: {} prompt-wide line sets for {} heads", prompt_lines.size(), heads.size());
  SparseIndex idx;
  idx.n_q = p.n_q;
  idx.heads.resize(heads.size());
  pool.parallel_for(p.n_head, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h)
      build_head_index(p, int(h), heads[size_t(h)], idx.heads[size_t(h)], ratio,
                       prompt_lines.empty() ? nullptr : &prompt_lines[size_t(h)]);
  });
  return idx;
}

std::vector<VsLines> estimate_prompt_lines(const AttnParams& p, std::span<const HeadPattern> heads, ThreadPool& pool,
                                           double ratio) {
  check_head_count(p, heads);
  std::vector<VsLines> lines(heads.size());
  pool.parallel_for(p.n_head, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h)
      if (heads[size_t(h)].kind == PatternKind::VerticalSlash)
        lines[size_t(h)] = estimate_head_lines(p, int(h), heads[size_t(h)], ratio);
  });
  return lines;
}

}  // namespace longctx

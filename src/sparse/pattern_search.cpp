// pattern_search.cpp: see pattern_search.h.
#include "sparse/pattern_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

#include "kernels/ref/attention.h"
#include "sparse/a_shape_index.h"
#include "sparse/block_sparse_index.h"
#include "sparse/sparse_attention.h"
#include "sparse/sparse_index.h"
#include "sparse/vs_convert.h"
#include "sparse/vs_estimate.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {

std::vector<SearchCandidate> table4_candidates() {
  return {{PatternKind::AShape, kAShapeDefaultSink, kAShapeDefaultWindow},
          {PatternKind::VerticalSlash, 30, 2048},
          {PatternKind::VerticalSlash, 100, 1800},
          {PatternKind::VerticalSlash, 500, 1500},
          {PatternKind::VerticalSlash, 3000, 200},
          {PatternKind::BlockSparse, kBlockSparseDefaultTopK, 0}};
}

namespace {

// Smallest x in [lo, hi] whose work reaches target, or its predecessor if that is closer.
// work() must be non-decreasing in x.
int64_t match_budget(int64_t lo, int64_t hi, int64_t target, const std::function<int64_t(int64_t)>& work) {
  if (hi <= lo || work(lo) >= target) return lo;
  if (work(hi) <= target) return hi;
  int64_t a = lo, b = hi;  // work(a) < target <= work(b)
  while (b - a > 1) {
    const int64_t mid = a + (b - a) / 2;
    (work(mid) < target ? a : b) = mid;
  }
  return target - work(a) < work(b) - target ? a : b;
}

int64_t scale_budget(int64_t v, double r) { return v == 0 ? 0 : std::max<int64_t>(1, std::llround(double(v) * r)); }

}  // namespace

std::vector<HeadSearchResult> search_layer(const AttnParams& p_in, const SearchOptions& opt, ThreadPool& pool) {
  if (!p_in.causal || p_in.q_pos0 != 0 || p_in.n_q != p_in.n_kv)
    fail("search_patterns: a layer capture must be a causal prefill from position 0 (n_q {} n_kv {} q_pos0 {})",
         p_in.n_q, p_in.n_kv, p_in.q_pos0);
  if (opt.candidates.empty()) fail("search_patterns: no candidate patterns");
  if (opt.reference_len <= 0) fail("search_patterns: reference_len must be positive");
  const int64_t S = p_in.n_q;
  const int H = p_in.n_head, d = p_in.head_dim;
  const int64_t ldo = int64_t(H) * d;

  // 1. Dense outputs of every head.
  std::vector<float> y(size_t(S * ldo)), yc(size_t(S * ldo));
  AttnParams p = p_in;
  p.o = y.data();
  p.lse = nullptr;
  attention_dense_ref(p, pool);
  std::vector<double> norm2(static_cast<size_t>(H), 0.0);
  for (int64_t i = 0; i < S; ++i)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < d; ++t) norm2[size_t(h)] += double(y[size_t(i * ldo + h * d + t)]) * y[size_t(i * ldo + h * d + t)];

  // 2. Candidates scaled to the sample; the FLOPs target is the (first) A-shape candidate's work.
  const double r = std::min(1.0, double(S) / double(opt.reference_len));
  std::vector<SearchCandidate> cands = opt.candidates;
  for (auto& c : cands) c.vertical = scale_budget(c.vertical, r), c.slash = scale_budget(c.slash, r);
  AShapeParams target_shape{scale_budget(kAShapeDefaultSink, r), scale_budget(kAShapeDefaultWindow, r)};
  for (const auto& c : cands)
    if (c.kind == PatternKind::AShape) {
      target_shape = {c.vertical, c.slash};
      break;
    }
  HeadIndex target_index;
  build_a_shape_index(target_shape, S, 0, S, target_index);
  const int64_t target = head_kernel_pairs(target_index, S, 0, S);
  const double dense_work = double(dense_causal_pairs(S, 0, 1));

  // VS scores of every head, estimated once and shared by the VS candidates.
  const bool any_vs = std::any_of(cands.begin(), cands.end(), [](auto& c) { return c.kind == PatternKind::VerticalSlash; });
  std::vector<VsScores> vs(static_cast<size_t>(H));
  std::vector<std::vector<float>> pooled_k(static_cast<size_t>(p.n_kv_head));
  pool.parallel_for(H, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h)
      if (any_vs) estimate_vs_scores(p, int(h), vs[size_t(h)]);
  });
  pool.parallel_for(p.n_kv_head, [&](int64_t k0, int64_t k1) {
    for (int64_t hk = k0; hk < k1; ++hk) pool_keys(p, int(hk), pooled_k[size_t(hk)]);
  });
  const int group = H / p.n_kv_head;

  std::vector<HeadSearchResult> res(static_cast<size_t>(H));
  for (const auto& c : cands) {
    // 3. Per head: FLOPs-matched budgets and the index.
    SparseIndex idx;
    idx.n_q = S;
    idx.heads.resize(size_t(H));
    std::vector<HeadPattern> hp(size_t(H), HeadPattern{c.kind, c.vertical, c.slash, 0});
    pool.parallel_for(H, [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; ++h) {
        HeadIndex& out = idx.heads[size_t(h)];
        HeadPattern& pat = hp[size_t(h)];
        switch (c.kind) {
          case PatternKind::AShape:
            build_a_shape_index({pat.vertical, pat.slash}, S, 0, S, out);
            break;
          case PatternKind::VerticalSlash: {
            VsLines lines;
            auto build = [&](int64_t k_s, HeadIndex& hi) {
              select_vs_lines(vs[size_t(h)], pat.vertical, k_s, lines);
              convert_vs_index(lines, S, 0, S, hi);
            };
            if (opt.match_flops) {
              pat.slash = match_budget(kMinSlash, S, target, [&](int64_t k_s) {
                HeadIndex hi;
                build(k_s, hi);
                return head_kernel_pairs(hi, S, 0, S);
              });
            }
            build(pat.slash, out);
            break;
          }
          case PatternKind::BlockSparse: {
            const auto& pk = pooled_k[size_t(h / group)];
            if (opt.match_flops) {
              pat.vertical = match_budget(1, (S + kSparseBlockQ - 1) / kSparseBlockQ, target, [&](int64_t k_b) {
                HeadIndex hi;
                build_block_sparse_index(p, int(h), k_b, pk, hi);
                return head_kernel_pairs(hi, S, 0, S);
              });
            }
            build_block_sparse_index(p, int(h), pat.vertical, pk, out);
            break;
          }
        }
      }
    });
    // 4. Sparse outputs and per-head errors.
    AttnParams ps = p;
    ps.o = yc.data();
    sparse_attention_ref(ps, idx, pool);
    for (int h = 0; h < H; ++h) {
      double e2 = 0;
      for (int64_t i = 0; i < S; ++i)
        for (int t = 0; t < d; ++t) {
          const double diff = double(yc[size_t(i * ldo + h * d + t)]) - y[size_t(i * ldo + h * d + t)];
          e2 += diff * diff;
        }
      HeadPattern pat = hp[size_t(h)];
      pat.score = norm2[size_t(h)] > 0 ? std::sqrt(e2 / norm2[size_t(h)]) : std::sqrt(e2);
      const double work = double(head_kernel_pairs(idx.heads[size_t(h)], S, 0, S)) / dense_work;
      auto& rh = res[size_t(h)];
      if (rh.candidates.empty() || pat.score < rh.best.score) rh.best = pat;
      rh.candidates.push_back({pat, work});
    }
  }
  return res;
}

nlohmann::json SearchReport::to_json() const {
  nlohmann::json j = {{"n_tokens", n_tokens}, {"layers", nlohmann::json::array()}};
  for (const auto& layer : layers) {
    nlohmann::json jl = nlohmann::json::array();
    for (const auto& h : layer) {
      nlohmann::json jc = nlohmann::json::array();
      for (const auto& c : h.candidates)
        jc.push_back({{"pattern", pattern_name(c.pattern.kind)},
                      {"vertical", c.pattern.vertical},
                      {"slash", c.pattern.slash},
                      {"rel_l2_error", c.pattern.score},
                      {"work_vs_dense", c.work}});
      jl.push_back({{"best", pattern_name(h.best.kind)}, {"rel_l2_error", h.best.score}, {"candidates", jc}});
    }
    j["layers"].push_back(jl);
  }
  return j;
}

nlohmann::json search_patterns(Engine& engine, std::span<const int32_t> sample_tokens, const SearchOptions& opt,
                               ProgressFn progress, SearchReport* report) {
  const ModelConfig& cfg = engine.config();
  int64_t n = int64_t(sample_tokens.size());
  if (opt.max_tokens > 0) n = std::min(n, opt.max_tokens);
  n = std::min(n, engine.max_context());
  if (n < kSparseBlockQ)
    fail("search-patterns: the sample has {} tokens; give at least {} (ideally ~30K, the paper's sample)", n,
         kSparseBlockQ);
  MInferenceConfig out;
  out.layers.resize(size_t(cfg.n_layer));
  if (report) {
    report->n_tokens = n;
    report->layers.assign(size_t(cfg.n_layer), {});
  }
  const auto t0 = std::chrono::steady_clock::now();
  int64_t done = 0;
  engine.capture_attention(sample_tokens.first(size_t(n)), [&](const AttnCapture& c) {
    if (c.layer < 0 || c.layer >= cfg.n_layer) fail("search-patterns: capture of unknown layer {}", c.layer);
    AttnParams p;
    p.q = c.q, p.k = c.k, p.v = c.v;
    p.n_q = p.n_kv = c.n_tokens;
    p.n_head = c.n_head, p.n_kv_head = c.n_kv_head, p.head_dim = c.head_dim;
    p.q_pos0 = 0;
    p.scale = 1.f / std::sqrt(float(c.head_dim));
    p.causal = true;
    p.layer = c.layer;
    auto res = search_layer(p, opt, global_pool());
    auto& heads = out.layers[size_t(c.layer)];
    heads.clear();
    for (const auto& r : res) heads.push_back(r.best);
    if (report) report->layers[size_t(c.layer)] = std::move(res);
    ++done;
    if (progress)
      progress({done, cfg.n_layer, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()});
  });
  for (int l = 0; l < cfg.n_layer; ++l)
    if (int(out.layers[size_t(l)].size()) != cfg.n_head)
      fail("search-patterns: the model reported no attention capture for layer {}", l);
  return out.to_json();
}

}  // namespace longctx

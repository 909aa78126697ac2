// pattern_search.cpp: see pattern_search.h.
#include "methods/minference/pattern_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

#include "kernels/ref/attention.h"
#include "kernels/ref/head_error.h"
#include "methods/a_shape/a_shape_index.h"
#include "methods/minference/block_sparse_index.h"
#include "methods/minference/minference_index.h"
#include "sparse/sparse_attention.h"
#include "sparse/sparse_index.h"
#include "methods/minference/vs_convert.h"
#include "methods/minference/vs_estimate.h"
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

// Smallest x in [lo, hi] whose work reaches target, or its predecessor if that is closer; hi when
// even work(hi) does not exceed target. work() must be non-decreasing in x.
// The search gallops up from lo (steps 1, 2, 4, ...) before bisecting: matched budgets sit far
// below hi (a VS k_s of a few hundred against hi = S), and evaluating a VS budget costs time
// proportional to it (Algorithm 4 over every query block), so probing near S/2 first, as a plain
// bisection does, cost most of the search at 128K (same result: the same monotone function).
int64_t match_budget(int64_t lo, int64_t hi, int64_t target, const std::function<int64_t(int64_t)>& work) {
  if (hi <= lo || work(lo) >= target) return lo;
  int64_t a = lo, b = hi;  // work(a) < target <= work(b) once the gallop stops
  for (int64_t step = 1;; step *= 2) {
    const int64_t x = std::min(hi, lo + step);
    const int64_t w = work(x);
    if (x == hi && w <= target) return hi;
    if (w >= target) {
      b = x;
      break;
    }
    a = x;
  }
  while (b - a > 1) {
    const int64_t mid = a + (b - a) / 2;
    (work(mid) < target ? a : b) = mid;
  }
  return target - work(a) < work(b) - target ? a : b;
}

int64_t scale_budget(int64_t v, double r) { return v == 0 ? 0 : std::max<int64_t>(1, std::llround(double(v) * r)); }

}  // namespace

namespace {

void check_layer(const AttnParams& p) {
  if (!p.causal || p.q_pos0 != 0 || p.n_q != p.n_kv)
    fail("search_patterns: a layer capture must be a causal prefill from position 0 (n_q {} n_kv {} q_pos0 {})",
         p.n_q, p.n_kv, p.q_pos0);
}

}  // namespace

std::vector<std::vector<HeadPattern>> plan_layer(const AttnParams& p, const SearchOptions& opt, ThreadPool& pool) {
  check_layer(p);
  if (opt.candidates.empty()) fail("search_patterns: no candidate patterns");
  if (opt.reference_len < 0) fail("search_patterns: reference_len must be >= 0 (0 = no scaling)");
  const int64_t S = p.n_q;
  const int H = p.n_head;

  // 2. Candidates scaled to the sample; the FLOPs target is the (first) A-shape candidate's work.
  const double r = opt.reference_len == 0 ? 1.0 : std::min(1.0, double(S) / double(opt.reference_len));
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

  // VS scores of every head, estimated once and shared by the VS candidates.
  const bool any_vs = std::any_of(cands.begin(), cands.end(), [](auto& c) { return c.kind == PatternKind::VerticalSlash; });
  const bool any_bs = std::any_of(cands.begin(), cands.end(), [](auto& c) { return c.kind == PatternKind::BlockSparse; });
  std::vector<VsScores> vs(static_cast<size_t>(H));
  std::vector<std::vector<float>> pooled_k(static_cast<size_t>(p.n_kv_head));
  if (opt.match_flops && any_vs)
    pool.parallel_for(H, [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; ++h) estimate_vs_scores(p, int(h), vs[size_t(h)]);
    });
  if (opt.match_flops && any_bs)
    pool.parallel_for(p.n_kv_head, [&](int64_t k0, int64_t k1) {
      for (int64_t hk = k0; hk < k1; ++hk) pool_keys(p, int(hk), pooled_k[size_t(hk)]);
    });
  const int group = H / p.n_kv_head;

  // 3. Per head: FLOPs-matched budgets.
  std::vector<std::vector<HeadPattern>> plans(static_cast<size_t>(H));
  pool.parallel_for(H, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
      auto& hp = plans[size_t(h)];
      for (const auto& c : cands) {
        HeadPattern pat{c.kind, c.vertical, c.slash, 0};
        if (opt.match_flops && c.kind == PatternKind::VerticalSlash) {
          VsLines lines;
          pat.slash = match_budget(kMinSlash, S, target, [&](int64_t k_s) {
            HeadIndex hi;
            select_vs_lines(vs[size_t(h)], pat.vertical, k_s, lines);
            convert_vs_index(lines, S, 0, S, hi);
            return head_kernel_pairs(hi, S, 0, S);
          });
        } else if (opt.match_flops && c.kind == PatternKind::BlockSparse) {
          BlockScores bs;  // scored once; each tried budget only selects
          score_key_blocks(p, int(h), pooled_k[size_t(h / group)], bs);
          pat.vertical = match_budget(1, (S + kSparseBlockQ - 1) / kSparseBlockQ, target, [&](int64_t k_b) {
            HeadIndex hi;
            select_key_blocks(bs, k_b, hi);
            return head_kernel_pairs(hi, S, 0, S);
          });
        }
        hp.push_back(pat);
      }
    }
  });
  return plans;
}

void CpuScorer::begin_layer(const AttnParams& p) {
  check_layer(p);
  p_ = p;
  const size_t n = size_t(p.n_q * p.n_head * p.head_dim);
  y_.assign(n, 0.f);
  yc_.assign(n, 0.f);
  AttnParams pd = p;
  pd.o = y_.data();
  pd.lse = nullptr;
  attention_dense_ref(pd, pool_);
}

std::vector<double> CpuScorer::errors(const SparseIndex& idx) {
  if (y_.empty()) fail("internal: CpuScorer::errors before begin_layer");
  AttnParams ps = p_;
  ps.o = yc_.data();
  ps.lse = nullptr;
  sparse_attention_ref(ps, idx, pool_);
  const HeadErrorSums s = head_error_sums_ref({yc_.data(), y_.data(), p_.n_q, p_.n_head, p_.head_dim});
  std::vector<double> e(size_t(p_.n_head));
  for (size_t h = 0; h < e.size(); ++h) e[h] = rel_l2_error(s.diff2[h], s.norm2[h]);
  return e;
}

std::vector<std::vector<CandidateResult>> score_layer(const AttnParams& p,
                                                      const std::vector<std::vector<HeadPattern>>& plans,
                                                      ThreadPool& pool, CandidateScorer* scorer) {
  check_layer(p);
  const int64_t S = p.n_q;
  const int H = p.n_head;
  if (int64_t(plans.size()) != H) fail("search_patterns: {} head plans for a layer with {} heads", plans.size(), H);
  const size_t n_cand = plans[0].size();
  for (const auto& hp : plans)
    if (hp.size() != n_cand) fail("search_patterns: every head needs the same number of candidates");

  // 1. Dense outputs of every head.
  std::unique_ptr<CpuScorer> cpu;
  if (!scorer) scorer = (cpu = std::make_unique<CpuScorer>(pool)).get();
  scorer->begin_layer(p);
  const double dense_work = double(dense_causal_pairs(S, 0, 1));

  std::vector<std::vector<CandidateResult>> res(static_cast<size_t>(H));
  for (size_t c = 0; c < n_cand; ++c) {
    // The engine's own builder for each head's candidate c.
    SparseIndex idx;
    idx.n_q = S;
    idx.heads.resize(size_t(H));
    pool.parallel_for(H, [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; ++h) build_head_index(p, int(h), plans[size_t(h)][c], idx.heads[size_t(h)]);
    });
    // 4. Sparse outputs and per-head errors.
    const std::vector<double> err = scorer->errors(idx);
    if (int64_t(err.size()) != H) fail("internal: the {} scorer gave {} errors for {} heads", scorer->device(), err.size(), H);
    for (int h = 0; h < H; ++h) {
      CandidateResult cr;
      cr.pattern = plans[size_t(h)][c];
      cr.pattern.score = err[size_t(h)];
      cr.work = double(head_kernel_pairs(idx.heads[size_t(h)], S, 0, S)) / dense_work;
      cr.sample_errors = {cr.pattern.score};
      res[size_t(h)].push_back(std::move(cr));
    }
  }
  return res;
}

HeadSearchResult choose_best(std::vector<CandidateResult> candidates, const SearchOptions& opt, int64_t dense_window) {
  if (candidates.empty()) fail("search_patterns: no candidate patterns");
  HeadSearchResult r;
  r.candidates = std::move(candidates);
  r.best = r.candidates[0].pattern;
  for (const auto& c : r.candidates)
    if (c.pattern.score < r.best.score) r.best = c.pattern;
  r.best_sparse_error = r.best.score;
  if (opt.dense_above > 0 && r.best.score > opt.dense_above) {
    // Dense, in the published format: A-shape whose window covers every key of the context.
    int64_t sink = kAShapeDefaultSink;
    for (const auto& c : r.candidates)
      if (c.pattern.kind == PatternKind::AShape) {
        sink = c.pattern.vertical;
        break;
      }
    r.best = HeadPattern{PatternKind::AShape, std::min(sink, dense_window), dense_window, 0.0};
    r.dense_fallback = true;
  }
  return r;
}

std::vector<HeadSearchResult> search_layer(const AttnParams& p, const SearchOptions& opt, ThreadPool& pool) {
  auto scores = score_layer(p, plan_layer(p, opt, pool), pool, opt.scorer);
  const int64_t window = opt.dense_window > 0 ? opt.dense_window : p.n_kv;
  std::vector<HeadSearchResult> res;
  for (auto& s : scores) res.push_back(choose_best(std::move(s), opt, window));
  return res;
}

nlohmann::json SearchReport::to_json() const {
  nlohmann::json j = {{"n_tokens", n_tokens}, {"sample_tokens", sample_tokens}, {"layers", nlohmann::json::array()}};
  for (const auto& layer : layers) {
    nlohmann::json jl = nlohmann::json::array();
    for (const auto& h : layer) {
      nlohmann::json jc = nlohmann::json::array();
      for (const auto& c : h.candidates)
        jc.push_back({{"pattern", pattern_name(c.pattern.kind)},
                      {"vertical", c.pattern.vertical},
                      {"slash", c.pattern.slash},
                      {"rel_l2_error", c.pattern.score},
                      {"rel_l2_error_per_sample", c.sample_errors},
                      {"work_vs_dense", c.work}});
      if (h.local_window > 0) {
        jl.push_back({{"local_window", h.local_window},
                      {"best", pattern_name(h.best.kind)},
                      {"vertical", h.best.vertical},
                      {"slash", h.best.slash}});
        continue;
      }
      jl.push_back({{"best", pattern_name(h.best.kind)},
                    {"vertical", h.best.vertical},
                    {"slash", h.best.slash},
                    {"rel_l2_error", h.best.score},
                    {"best_sparse_error", h.best_sparse_error},
                    {"dense_fallback", h.dense_fallback},
                    {"candidates", jc}});
    }
    j["layers"].push_back(jl);
  }
  return j;
}

nlohmann::json search_patterns(const SearchModel& model, std::span<const std::vector<int32_t>> samples,
                               const SearchOptions& opt, ProgressFn progress, SearchReport* report) {
  if (!model.capture || model.n_layer <= 0 || model.n_head <= 0)
    fail("search-patterns: the model has no attention capture or no layers");
  if (samples.empty()) fail("search-patterns: no sample given");
  if (!model.layer_window.empty() && int64_t(model.layer_window.size()) != model.n_layer)
    fail("search-patterns: {} layer windows for a model of {} layers", model.layer_window.size(), model.n_layer);
  if (!(model.scale >= 0)) fail("search-patterns: the attention scale must be >= 0 (0 = 1/sqrt(head_dim))");
  const auto window_of = [&](int l) { return model.layer_window.empty() ? int64_t(0) : model.layer_window[size_t(l)]; };
  int n_global = 0;
  for (int l = 0; l < model.n_layer; ++l) {
    if (window_of(l) < 0) fail("search-patterns: layer {} has a negative window ({})", l, window_of(l));
    n_global += window_of(l) == 0;
  }
  if (n_global == 0)
    fail("search-patterns: every layer of the model has a sliding window; MInference sparsifies global layers "
         "only, so there is nothing to search");
  std::vector<int64_t> used;
  for (const auto& s : samples) {
    int64_t n = int64_t(s.size());
    if (opt.max_tokens > 0) n = std::min(n, opt.max_tokens);
    n = std::min(n, model.max_context);
    if (n < kSparseBlockQ)
      fail("search-patterns: a sample has {} tokens; give at least {} (ideally ~30K, the paper's sample)", n,
           kSparseBlockQ);
    used.push_back(n);
  }
  const size_t L = size_t(model.n_layer);
  std::vector<std::vector<std::vector<HeadPattern>>> plans(L);        // [layer][head][cand], first sample
  std::vector<std::vector<std::vector<CandidateResult>>> scored(L);   // [layer][head][cand], errors summed
  const auto t0 = std::chrono::steady_clock::now();
  int64_t done = 0;
  const int64_t total = n_global * int64_t(samples.size());
  for (size_t si = 0; si < samples.size(); ++si) {
    std::vector<bool> seen(L, false);
    model.capture(std::span<const int32_t>(samples[si]).first(size_t(used[si])), [&](const AttnCapture& c) {
      if (c.layer < 0 || c.layer >= model.n_layer) fail("search-patterns: capture of unknown layer {}", c.layer);
      seen[size_t(c.layer)] = true;
      if (window_of(c.layer) > 0) return;  // a local layer: dense within its window in the engine
      AttnParams p;
      p.q = c.q, p.k = c.k, p.v = c.v;
      p.n_q = p.n_kv = c.n_tokens;
      p.n_head = c.n_head, p.n_kv_head = c.n_kv_head, p.head_dim = c.head_dim;
      p.q_pos0 = 0;
      p.scale = model.scale > 0 ? model.scale : 1.f / std::sqrt(float(c.head_dim));
      p.causal = true;
      p.layer = c.layer;
      const size_t l = size_t(c.layer);
      if (si == 0) plans[l] = plan_layer(p, opt, global_pool());
      auto res = score_layer(p, plans[l], global_pool(), opt.scorer);
      if (si == 0) {
        scored[l] = std::move(res);
      } else {
        for (size_t h = 0; h < res.size(); ++h)
          for (size_t k = 0; k < res[h].size(); ++k) {
            auto& acc = scored[l][h][k];
            acc.pattern.score += res[h][k].pattern.score;
            acc.sample_errors.push_back(res[h][k].pattern.score);
          }
      }
      ++done;
      if (progress)
        progress({done, total, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()});
    });
    for (size_t l = 0; l < L; ++l)
      if (!seen[l]) fail("search-patterns: the model reported no attention capture for layer {}", l);
  }

  const int64_t window = opt.dense_window > 0 ? opt.dense_window : model.max_context;
  MInferenceConfig out;
  out.layers.resize(L);
  if (report) {
    report->n_tokens = used[0];
    report->sample_tokens = used;
    report->layers.assign(L, {});
  }
  for (size_t l = 0; l < L; ++l) {
    if (const int64_t w = window_of(int(l)); w > 0) {
      HeadSearchResult local;
      local.best = local_window_pattern(w);
      local.local_window = w;
      out.layers[l].assign(size_t(model.n_head), local.best);
      if (report) report->layers[l].assign(size_t(model.n_head), local);
      continue;
    }
    for (auto& head : scored[l]) {
      for (auto& c : head) c.pattern.score /= double(samples.size());
      auto best = choose_best(std::move(head), opt, window);
      out.layers[l].push_back(best.best);
      if (report) report->layers[l].push_back(std::move(best));
    }
    if (int(out.layers[l].size()) != model.n_head)
      fail("search-patterns: layer {} has {} heads, the model {}", l, out.layers[l].size(), model.n_head);
  }
  return out.to_json();
}

nlohmann::json search_patterns(const SearchModel& model, std::span<const int32_t> sample_tokens,
                               const SearchOptions& opt, ProgressFn progress, SearchReport* report) {
  const std::vector<std::vector<int32_t>> one{std::vector<int32_t>(sample_tokens.begin(), sample_tokens.end())};
  return search_patterns(model, std::span<const std::vector<int32_t>>(one), opt, std::move(progress), report);
}

}  // namespace longctx

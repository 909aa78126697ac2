// pattern_search.h: MInference offline kernel-aware pattern search (paper Algorithm 1).
//
// What: runs the model densely on one or more sample prompts (SearchModel::capture, e.g.
// Engine::capture_attention) and, for
// every (layer, query head), evaluates candidate sparse patterns of roughly equal kernel FLOPs and
// keeps the one whose attention output is closest to dense. Returns a config in the published
// MInference format (minference_config.h), with our error as the 4th ("score") field.
// Why: each head's pattern type is stable across inputs (paper Fig. 4a), so it is chosen once
// per model; the dynamic index is then rebuilt per prompt.
// How, per layer (all heads in parallel):
//   1. dense output y of every head (kernels/ref dense attention);
//   2. candidates: the Table 4 search space, budgets scaled to the sample: every budget is
//      multiplied by r = min(1, S / reference_len) with reference_len = 30720, the paper's 30K
//      sample, so the candidates keep the sparsity they have at 30K on a shorter sample (at
//      S >= 30K they are used as printed). reference_len = 0 uses Table 4 as printed at every
//      length (what the paper's configs amount to on shorter prompts: one config, absolute
//      budgets). VS floors (k_v >= 30, k_s >= 50) still apply;
//   3. kernel-aware FLOPs matching (the paper's ChangeSpace loop, solved by bisection instead
//      of steps of 50): the target t is the kernel work of the A-shape candidate (scaled
//      1024 sinks + 4096 window); each VS candidate keeps its k_v and gets the k_s whose work
//      (index_kernel_pairs: 64-row blocks x covered keys, columns counted as 1 key) is closest
//      to t; each block-sparse candidate gets the k_b closest to t. VS work depends on the data
//      (how slashes merge), so it is measured on the sample's real index;
//   4. error of a candidate = relative L2 error ||y_c - y|| / ||y|| of the head's output over all
//      rows (the paper compares outputs; the norm is not stated). Each candidate's index is
//      built by the engine's own builder (minference_index.h: build_head_index). Lowest error
//      wins; ties go to the earlier candidate.
// Several samples: the first sample fixes every candidate's budgets (steps 2-3, scaled by the
// first sample's length); every sample scores them (step 4); a head's error is the mean over
// the samples. Step 4 (dense output, each candidate's sparse output, the errors) is pluggable
// (CandidateScorer): the CPU (CpuScorer, the default) or the GPU (gpu/gpu_search.h GpuScorer);
// steps 2-3 and every candidate's index stay on the CPU, so both score identical candidates.
// Optional fallback: a head whose best mean error is above dense_above is written
// dense, as a `stream_llm` head whose window covers the model's context (dense_window), a form
// the reference loads and runs unchanged.
// The budgets written are the ones evaluated (scaled and matched) at the first sample's length.
// Sliding-window layers (SearchModel::layer_window, Gemma 3's local layers) are not searched: the
// engine runs them dense within their window whatever the config says, so only the global layers
// are captured for scoring, and a local layer's heads are written as local_window_pattern(window)
// (minference_config.h). A model whose every layer has a window is refused.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/params/attention.h"
#include "model/attn_capture.h"
#include "methods/minference/minference_config.h"
#include "sparse/sparse_index.h"
#include "util/progress.h"

namespace longctx {

class ThreadPool;

// The paper's sample length (one 30K-token KV-retrieval sample) that Table 4 budgets are for.
inline constexpr int64_t kSearchReferenceLen = 30720;

struct SearchCandidate {
  PatternKind kind = PatternKind::VerticalSlash;
  int64_t vertical = 0;  // VS k_v, A-shape sink, BS k_b
  int64_t slash = 0;     // VS k_s, A-shape window
};

// Step 4's numbers for one layer: the dense output of every head, then per candidate index the
// relative L2 error ||y_c - y|| / ||y|| of each query head's output over all rows
// (kernels/ref/head_error.h). score_layer calls begin_layer once per layer, then errors() once
// per candidate with the index build_head_index made for every head.
class CandidateScorer {
 public:
  virtual ~CandidateScorer() = default;
  virtual const char* device() const = 0;  // "cpu" or "cuda" (progress lines)
  // p: the layer's Q/K/V as plan_layer takes them (causal, q_pos0 = 0, n_q = n_kv = S); the
  // scorer keeps what it needs (the pointers stay valid until the layer's last errors()).
  virtual void begin_layer(const AttnParams& p) = 0;
  // idx: one index head per query head (n_q = S). Returns the error of each query head [n_head].
  virtual std::vector<double> errors(const SparseIndex& idx) = 0;
};

// The CPU scorer: kernels/ref dense attention and sparse/sparse_attention.h, fp32, on pool.
class CpuScorer final : public CandidateScorer {
 public:
  explicit CpuScorer(ThreadPool& pool) : pool_(pool) {}
  const char* device() const override { return "cpu"; }
  void begin_layer(const AttnParams& p) override;
  std::vector<double> errors(const SparseIndex& idx) override;

 private:
  ThreadPool& pool_;
  AttnParams p_;
  std::vector<float> y_, yc_;  // [S, n_head * head_dim] dense and candidate outputs
};

// Table 4: A-shape (1024, 4096); VS (30, 2048), (100, 1800), (500, 1500), (3000, 200); BS 100.
std::vector<SearchCandidate> table4_candidates();

struct SearchOptions {
  std::vector<SearchCandidate> candidates = table4_candidates();
  // Candidates are scaled by min(1, S / reference_len); 0 = no scaling (Table 4 as printed).
  int64_t reference_len = kSearchReferenceLen;
  bool match_flops = true;  // equalise kernel FLOPs to the A-shape target
  int64_t max_tokens = 0;   // use at most this many tokens of each sample (0 = all)
  // Heads whose best (mean) error is above this are written dense (0 = never).
  double dense_above = 0;
  // Window of a dense head's stream_llm pattern; 0 = the engine's context (search_patterns) or
  // the sample length (search_layer).
  int64_t dense_window = 0;
  // Step 4 (not owned); null = a CpuScorer on the search's thread pool.
  CandidateScorer* scorer = nullptr;
};

// Every candidate's result for one head, for reports.
struct CandidateResult {
  HeadPattern pattern;                 // evaluated budgets; score = relative L2 error (mean over samples)
  double work = 0;                     // kernel work / dense causal work on the first sample
  std::vector<double> sample_errors;   // relative L2 error on each sample
};

struct HeadSearchResult {
  HeadPattern best;                        // score = its relative L2 error (0 for a dense fallback)
  int64_t local_window = 0;                // > 0: a sliding-window layer, not searched (no candidates)
  bool dense_fallback = false;             // best sparse error was above dense_above: written dense
  double best_sparse_error = 0;            // the lowest candidate error (also when dense_fallback)
  std::vector<CandidateResult> candidates;
};

// Step 2-3 for one layer: each head's candidates with scaled, FLOPs-matched budgets
// ([head][candidate], in opt.candidates order). p: Q/K/V of the whole sample (n_q = n_kv = S,
// q_pos0 = 0, causal); p.o / p.lse are ignored.
std::vector<std::vector<HeadPattern>> plan_layer(const AttnParams& p, const SearchOptions& opt, ThreadPool& pool);

// Step 4: the relative L2 error and work of every head's given candidates on this layer's
// sample ([head][candidate]; pattern.score = the error, sample_errors = {error}). The indices
// are built on pool; scorer computes the outputs and errors (null = a CpuScorer on pool).
std::vector<std::vector<CandidateResult>> score_layer(const AttnParams& p,
                                                      const std::vector<std::vector<HeadPattern>>& plans,
                                                      ThreadPool& pool, CandidateScorer* scorer = nullptr);

// Picks each head's best candidate (lowest pattern.score, ties to the earlier) and applies the
// dense fallback (opt.dense_above) with a stream_llm window of dense_window.
HeadSearchResult choose_best(std::vector<CandidateResult> candidates, const SearchOptions& opt,
                             int64_t dense_window);

// Searches one layer on one sample: plan_layer + score_layer + choose_best. Returns one result
// per query head.
std::vector<HeadSearchResult> search_layer(const AttnParams& p, const SearchOptions& opt, ThreadPool& pool);

struct SearchReport {
  int64_t n_tokens = 0;                 // tokens of the first sample (the budgets' length)
  std::vector<int64_t> sample_tokens;   // tokens used of every sample
  std::vector<std::vector<HeadSearchResult>> layers;  // [layer][head]
  nlohmann::json to_json() const;                     // every candidate's budgets, errors and work
};

// The model a search runs on: its shape and context, and a dense capture of a prompt's attention
// (the AttnCapture contract: one observer call per layer with its post-RoPE Q, K, V). The CLI and
// the tests wrap a loaded Engine (its capture_attention); tests also give synthetic layers.
struct SearchModel {
  int n_layer = 0;
  int n_head = 0;
  int64_t max_context = 0;  // samples are cut to this many tokens
  // Sliding window of each layer [n_layer] (ModelConfig::layer(l).window; 0 = global); empty =
  // every layer global. Layers with a window are not searched (see the header).
  std::vector<int64_t> layer_window;
  float scale = 0.f;  // attention score scale (ModelConfig::score_scale()); 0 = 1/sqrt(head_dim)
  std::function<void(std::span<const int32_t> tokens, const AttnObserver& observer)> capture;
};

// Algorithm 1 over a model: one capture pass per sample; per global layer, plan_layer on the
// first sample, score_layer on every sample, mean errors, choose_best. progress gets (layers
// searched, global layers x n_samples, elapsed seconds) after every global layer of every sample.
// report, if given, receives every candidate's numbers.
nlohmann::json search_patterns(const SearchModel& model, std::span<const std::vector<int32_t>> samples,
                               const SearchOptions& opt, ProgressFn progress, SearchReport* report = nullptr);
// One sample.
nlohmann::json search_patterns(const SearchModel& model, std::span<const int32_t> sample_tokens,
                               const SearchOptions& opt, ProgressFn progress, SearchReport* report = nullptr);

}  // namespace longctx

// search_cli.cpp: see search_cli.h.
#include "methods/minference/search_cli.h"

#include <CLI/CLI.hpp>

#include <algorithm>

#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/geometry_option.h"
#include "cli/options.h"
#include "longctx/engine.h"
#include "methods/minference/pattern_search.h"
#include "util/error.h"
#include "util/thread_pool.h"

#ifdef LONGCTX_WITH_GPU
#include "gpu/gpu_search.h"
#endif

namespace longctx {

namespace {

struct SearchArgs {
  std::vector<std::string> samples;
  std::string model, output, report;
  std::string device = "cpu";  // as generate: cpu, cuda or auto
  int threads = 0;
  int64_t sample_tokens = 0;
  int64_t reference_len = kSearchReferenceLen;
  double dense_above = 0;
  bool no_match_flops = false;
  // Timing on large geometries (benchmarks only, as `bench model`): random weights of a named
  // geometry on the GPU, a sample of random token ids (such a model has no tokenizer), and
  // optionally structured synthetic Q/K so the candidates see realistic attention structure.
  std::string random_weights;
  int64_t random_tokens = 0;
  bool synthetic_qk = false;
};

// Seed of --random-tokens' ids (fixed: a rerun searches the same sample).
constexpr uint32_t kRandomSampleSeed = 1234;

std::string read_sample(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("search-patterns: cannot open sample file '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.empty()) fail("search-patterns: sample file '{}' is empty", path);
  return text;
}

// The scorer for a model on `device` ("cpu" or "cuda", Engine::device()).
std::unique_ptr<CandidateScorer> make_scorer(const std::string& device) {
  if (device == "cuda") {
#ifdef LONGCTX_WITH_GPU
    return std::make_unique<gpu::GpuScorer>(global_pool());
#else
    fail("search-patterns: the model runs on the GPU but this longctx was built without CUDA");
#endif
  }
  return std::make_unique<CpuScorer>(global_pool());
}

void run_search(const SearchArgs& a) {
  const bool random = !a.random_weights.empty();
  if (random && (a.random_tokens <= 0 || !a.samples.empty()))
    fail("search-patterns: --random-weights takes --random-tokens N (the model has no tokenizer), not --sample");
  if (!random && (a.random_tokens > 0 || a.synthetic_qk))
    fail("search-patterns: --random-tokens and --synthetic-qk are for --random-weights (timing on large geometries)");
  if (!random && a.samples.empty()) fail("search-patterns: give a sample prompt with --sample FILE");
  std::vector<std::string> texts;
  for (const auto& s : a.samples) texts.push_back(read_sample(s));
  if (a.reference_len < 0) fail("search-patterns: --reference-len must be >= 0 (0 = Table 4 as printed)");
  if (a.dense_above < 0) fail("search-patterns: --dense-above must be >= 0 (0 = never)");

  LoadOptions lo;
  lo.model_path = a.model;
  lo.n_threads = a.threads;
  lo.attn = "dense";
  lo.device = a.device;
  lo.random_weights = a.random_weights;
  lo.synthetic_qk = a.synthetic_qk;
  if (random) lo.max_context = a.random_tokens;  // no trained context to respect (as `bench model`)
  auto engine = Engine::load(lo);  // --device cuda without CUDA or a usable GPU fails here, clearly
  const auto& tok = engine->tokenizer();
  std::vector<std::vector<int32_t>> samples;
  std::string lengths;
  if (random) {
    std::mt19937 rng(kRandomSampleSeed);
    std::uniform_int_distribution<int32_t> id(0, engine->config().vocab_size - 1);
    std::vector<int32_t> ids(size_t(std::min(a.random_tokens, engine->max_context())));
    for (auto& t : ids) t = id(rng);
    lengths = std::to_string(ids.size()) + " random";
    samples.push_back(std::move(ids));
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> ids = tok.encode(texts[i], tok.adds_bos(), false);
    if (int64_t(ids.size()) > engine->max_context()) {
      std::fprintf(stderr, "search-patterns: %s has %zu tokens; using the first %lld (the model's context)\n",
                   a.samples[i].c_str(), ids.size(), (long long)engine->max_context());
    }
    const int64_t n_used = std::min<int64_t>({int64_t(ids.size()), engine->max_context(),
                                              a.sample_tokens > 0 ? a.sample_tokens : int64_t(ids.size())});
    lengths += (i ? ", " : "") + std::to_string(n_used);
    samples.push_back(std::move(ids));
  }
  SearchOptions opt;
  opt.max_tokens = a.sample_tokens;
  opt.match_flops = !a.no_match_flops;
  opt.reference_len = a.reference_len;
  opt.dense_above = a.dense_above;
  // Scoring (step 4) runs where the model runs: capture and scoring both on the GPU, or both on
  // the CPU (--device auto may have fallen back).
  std::unique_ptr<CandidateScorer> scorer = make_scorer(engine->device());
  opt.scorer = scorer.get();
  std::fprintf(stderr, "search-patterns: %s, %d layers x %d heads, %zu sample(s) of %s tokens, on %s\n",
               engine->config().name.c_str(), engine->config().n_layer, engine->config().n_head, samples.size(),
               lengths.c_str(), engine->device().c_str());
  SearchReport report;
  const std::string where = engine->device();
  const ModelConfig& mc = engine->config();
  std::vector<int64_t> windows;
  for (int l = 0; l < mc.n_layer; ++l) windows.push_back(mc.layer(l).window);
  const int n_local = int(std::count_if(windows.begin(), windows.end(), [](int64_t w) { return w > 0; }));
  if (n_local > 0)
    std::fprintf(stderr,
                 "search-patterns: searching the %d global layers; the %d sliding-window layers keep their window "
                 "(written as stream_llm with 0 sinks and the window)\n",
                 mc.n_layer - n_local, n_local);
  const SearchModel model{.n_layer = mc.n_layer,
                          .n_head = mc.n_head,
                          .max_context = engine->max_context(),
                          .layer_window = windows,
                          .scale = mc.score_scale(),
                          .capture = [&](std::span<const int32_t> t, const AttnObserver& o) {
                            engine->capture_attention(t, o);
                          }};
  const auto j = search_patterns(model, std::span<const std::vector<int32_t>>(samples), opt, [&](const Progress& p) {
    const double eta = p.done > 0 ? p.elapsed_s / double(p.done) * double(p.total - p.done) : 0;
    std::fprintf(stderr, "search-patterns: layer %lld/%lld (%s), elapsed %.1fs, ETA %.1fs\n", (long long)p.done,
                 (long long)p.total, where.c_str(), p.elapsed_s, eta);
  }, &report);

  std::ofstream out(a.output);
  if (!out) fail("search-patterns: cannot write '{}'", a.output);
  out << j.dump() << "\n";
  if (!a.report.empty()) {
    std::ofstream rep(a.report);
    if (!rep) fail("search-patterns: cannot write '{}'", a.report);
    rep << report.to_json().dump(1) << "\n";
  }
  // Summary: how many heads got each pattern.
  int counts[3] = {0, 0, 0}, dense = 0, local = 0;
  for (const auto& layer : report.layers)
    for (const auto& h : layer) h.local_window > 0 ? ++local : h.dense_fallback ? ++dense : ++counts[int(h.best.kind)];
  std::fprintf(stderr,
               "search-patterns: wrote %s (vertical_and_slash %d, block_sparse %d, stream_llm %d, dense %d heads; "
               "%d heads of sliding-window layers not searched)\n",
               a.output.c_str(), counts[int(PatternKind::VerticalSlash)], counts[int(PatternKind::BlockSparse)],
               counts[int(PatternKind::AShape)], dense, local);
}

}  // namespace

void register_search_patterns_command(CLI::App& app) {
  auto args = std::make_shared<SearchArgs>();
  auto* cmd = app.add_subcommand(
      "search-patterns", "MInference offline search: pick each head's sparse pattern on a sample prompt");
  cmd->add_option("-m,--model", args->model, "model file (.gguf) or HF directory (default: the default model)");
  cmd->add_option("--sample", args->samples,
                  "sample prompt text file (the paper uses one ~30K-token KV-retrieval prompt); repeat for several "
                  "samples: the first fixes the budgets, the errors are averaged over all")
      ->default_str("");
  cmd->add_option("-o,--output", args->output, "config to write (published MInference JSON format)")
      ->required()
      ->check(cli::writable_file());
  cli::add_threads(cmd, args->threads);
  cli::add_device(cmd, args->device);  // cuda: capture and scoring on the GPU
  cmd->add_option("--sample-tokens", args->sample_tokens, "use at most this many tokens of each sample (0 = all)")
      ->check(cli::integer_at_least(0));
  cmd->add_option("--report", args->report, "also write every head's candidate errors and FLOPs to this JSON file")
      ->check(cli::writable_file());
  cmd->add_option("--reference-len", args->reference_len,
                  "scale Table 4's budgets by min(1, S / N) for a sample of S tokens (default 30720, the paper's "
                  "sample; 0 = Table 4 as printed)");
  cmd->add_option("--dense-above", args->dense_above,
                  "write heads whose best mean relative error is above this dense (stream_llm with a window of the "
                  "model's context; default 0 = never)");
  cmd->add_flag("--no-match-flops", args->no_match_flops, "use the candidate budgets as given (no FLOPs matching)");
  cmd->add_option("--random-weights", args->random_weights,
                  "timing only: random weights of a named geometry (llama3-8b, llama3.1-8b, qwen2.5-7b, smollm2-135m, "
                  "gemma3-270m; "
                  "NAME:N keeps N layers) instead of -m; GPU only; the sample is --random-tokens ids")
      ->check(cli::known_geometry());
  cmd->add_option("--random-tokens", args->random_tokens, "with --random-weights: a sample of N random token ids")
      ->check(cli::integer_at_least(0));
  cmd->add_flag("--synthetic-qk", args->synthetic_qk,
                "with --random-weights: structured synthetic Q/K after RoPE (realistic attention structure)");
  cmd->callback([args] { run_search(*args); });
}

}  // namespace longctx

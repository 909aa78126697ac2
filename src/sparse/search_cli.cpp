// search_cli.cpp: see search_cli.h.
#include "sparse/search_cli.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "longctx/engine.h"
#include "sparse/pattern_search.h"
#include "util/error.h"

namespace longctx {

namespace {

struct SearchArgs {
  std::string model, sample, output, report;
  int threads = 0;
  int64_t max_tokens = 0;
  bool no_match_flops = false;
};

void run_search(const SearchArgs& a) {
  std::ifstream in(a.sample, std::ios::binary);
  if (!in) fail("search-patterns: cannot open sample file '{}'", a.sample);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (text.empty()) fail("search-patterns: sample file '{}' is empty", a.sample);

  LoadOptions lo;
  lo.model_path = a.model;
  lo.n_threads = a.threads;
  lo.attn = "dense";
  auto engine = Engine::load(lo);
  const auto& tok = engine->tokenizer();
  std::vector<int32_t> ids = tok.encode(text, tok.adds_bos(), false);
  if (int64_t(ids.size()) > engine->max_context()) {
    std::fprintf(stderr, "search-patterns: the sample has %zu tokens; using the first %lld (the model's context)\n",
                 ids.size(), (long long)engine->max_context());
  }
  SearchOptions opt;
  opt.max_tokens = a.max_tokens;
  opt.match_flops = !a.no_match_flops;
  const int64_t n_used = std::min<int64_t>({int64_t(ids.size()), engine->max_context(),
                                            a.max_tokens > 0 ? a.max_tokens : int64_t(ids.size())});
  std::fprintf(stderr, "search-patterns: %s, %d layers x %d heads, sample %lld tokens\n",
               engine->config().name.c_str(), engine->config().n_layer, engine->config().n_head, (long long)n_used);
  SearchReport report;
  const auto j = search_patterns(*engine, ids, opt, [](const Progress& p) {
    const double eta = p.done > 0 ? p.elapsed_s / double(p.done) * double(p.total - p.done) : 0;
    std::fprintf(stderr, "search-patterns: layer %lld/%lld, elapsed %.1fs, ETA %.1fs\n", (long long)p.done,
                 (long long)p.total, p.elapsed_s, eta);
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
  int counts[3] = {0, 0, 0};
  for (const auto& layer : report.layers)
    for (const auto& h : layer) ++counts[int(h.best.kind)];
  std::fprintf(stderr, "search-patterns: wrote %s (vertical_and_slash %d, block_sparse %d, stream_llm %d heads)\n",
               a.output.c_str(), counts[int(PatternKind::VerticalSlash)], counts[int(PatternKind::BlockSparse)],
               counts[int(PatternKind::AShape)]);
}

}  // namespace

void register_search_patterns_command(CLI::App& app) {
  auto args = std::make_shared<SearchArgs>();
  auto* cmd = app.add_subcommand(
      "search-patterns", "MInference offline search: pick each head's sparse pattern on a sample prompt");
  cmd->add_option("-m,--model", args->model, "model file (.gguf) or HF directory (default: the default model)");
  cmd->add_option("--sample", args->sample, "sample prompt text file (the paper uses one ~30K-token KV-retrieval prompt)")
      ->required();
  cmd->add_option("-o,--output", args->output, "config to write (published MInference JSON format)")->required();
  cmd->add_option("--threads", args->threads, "CPU threads (0 = all cores)");
  cmd->add_option("--max-tokens", args->max_tokens, "use at most this many sample tokens (0 = all)");
  cmd->add_option("--report", args->report, "also write every head's candidate errors and FLOPs to this JSON file");
  cmd->add_flag("--no-match-flops", args->no_match_flops, "use the candidate budgets as given (no FLOPs matching)");
  cmd->callback([args] { run_search(*args); });
}

}  // namespace longctx

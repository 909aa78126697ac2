// eval_cli.cpp: `longctx eval` argument parsing into EvalOptions, then run_eval (eval_cli.h).
#include "eval/eval_cli.h"

#include <memory>

#include "cli/options.h"
#include "eval/lengths.h"
#include "eval/task.h"
#include "util/error.h"

namespace longctx {
namespace {

struct CliState {
  eval::EvalOptions o;
  std::vector<std::string> attn{"dense"};
  std::string lengths = "2k", depths;
  CLI::Option* json = nullptr;
  cli::ContextArgs ctx;
};

std::string task_list() {
  std::string s;
  for (const auto& n : eval::all_task_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

void register_eval_command(CLI::App& app) {
  register_eval_command(app, [](const LoadOptions& lo) { return Engine::load(lo); });
}

void register_eval_command(CLI::App& app, eval::EngineFactory factory) {
  auto st = std::make_shared<CliState>();
  st->o.prefill_chunk = LoadOptions{}.prefill_chunk;  // so --help shows the engine's defaults
  st->o.device = LoadOptions{}.device;
  CLI::App* sub = app.add_subcommand(
      "eval", "Long-context evaluation: retrieval accuracy (passkey, NIAH, RULER), perplexity, attention fidelity");
  sub->add_option("task", st->o.task, "Task: " + task_list())->required();
  sub->add_option("-m,--model", st->o.model_path, "Model (.gguf or HF directory); default: the default model");
  sub->add_option("--attn", st->attn,
                  "Attention method(s), comma-separated for a side-by-side run: dense,a_shape=64,1024,minference")
      ->delimiter('\0');
  sub->add_option("--lengths", st->lengths, "Context lengths in tokens: 2k,4k,8k (k = 1024)");
  sub->add_option("--samples", st->o.samples, "Samples per length (and depth); ppl: windows per length")
      ->check(cli::integer_at_least(1));
  cli::add_seed(sub, st->o.seed, "Seed of the generated prompts");
  sub->add_option("--depths", st->depths, "Needle depths for passkey/niah: 0,0.25,0.5 or 0%,50%,100%");
  st->json = sub->add_option("--json", st->o.json_path, "Write JSON results to FILE (stdout without FILE)")
                 ->expected(0, 1);
  sub->add_option("--out", st->o.out_dir, "Directory for PNG pictures (heatmaps, attention maps)")
      ->check(cli::writable_folder());
  cli::add_max_new_tokens(sub, st->o.max_new_tokens, "Answer tokens (0 = the task's default)");
  cli::add_threads(sub, st->o.threads);
  cli::add_max_context(sub, st->ctx);
  cli::add_device(sub, st->o.device);
  sub->add_option("--kv-cache", st->o.kv_cache, "GPU KV cache: bf16 or fp8 (e4m3, half the memory)")
      ->check(cli::one_of({"bf16", "fp8"}, "KV cache type"));
  cli::add_attn_tiles(sub, st->o.attn_tiles);
  sub->add_option("--gpu-chunk", st->o.gpu_chunk, "Prefill chunk on the GPU in tokens (0 = automatic: 16K)")
      ->check(cli::integer_at_least(0));
  cli::add_prefill_chunk(sub, st->o.prefill_chunk);
  sub->add_option("--text", st->o.text_path,
                  "Plain-text book: the ppl text (default: Paradise Lost from the model cache) and the NIAH haystack");
  sub->add_option("--layer", st->o.attn_layer, "attention: also draw this layer's --head");
  sub->add_option("--head", st->o.attn_head, "attention: the head to draw with --layer");
  sub->add_option("--max-queries", st->o.max_queries, "attention: query rows evaluated per head (0 = all)")
      ->check(cli::integer_at_least(0));
  sub->add_flag("--no-chat", [st](int64_t) { st->o.chat_template = false; }, "Plain prompts, no chat template");
  sub->add_flag("-q,--quiet", st->o.quiet, "No progress lines");
  sub->add_flag("--prompts", st->o.save_prompts, "Include each prompt's full text in the JSON");
  sub->callback([st, factory] {
    eval::EvalOptions o = st->o;
    (void)eval::expand_task(o.task);  // unknown task: list the valid ones before loading anything
    if (!o.json_path.empty()) {
      std::string path = o.json_path;
      if (const std::string bad = cli::writable_file(true)(path); !bad.empty()) cli::usage_error("--json: " + bad);
    }
    cli::check_max_context(st->ctx, o.model_path);
    o.max_context = st->ctx.max_context;
    o.methods = eval::split_methods(st->attn);
    o.lengths = eval::parse_lengths(st->lengths);
    if (!st->depths.empty()) o.depths = eval::parse_depths(st->depths);
    o.json = st->json->count() > 0;
    if ((o.attn_layer >= 0) != (o.attn_head >= 0)) cli::usage_error("--layer and --head go together");
    eval::run_eval(o, factory);
  });
}

}  // namespace longctx

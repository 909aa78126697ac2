// cmd_generate.cpp: `longctx generate`: prompt in, streamed text out, timings on stderr.
//
//   longctx generate -p "The capital of France is" -n 16
//   longctx generate -f long.txt --chat "Who wrote it?"   (the file's text, then the question)
//   longctx generate --chat "Write a haiku about caches" --json
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "longctx/engine.h"
#include "methods/registry.h"
#include "util/error.h"
#include "util/mmap_file.h"

namespace longctx::cli {

namespace {

struct GenerateArgs {
  std::string model, prompt, file, chat, system, attn = "dense", device = "cpu";
  std::string kv_cache = "bf16";
  std::string attn_tiles = "bf16";
  KvOffloadArgs offload;
  std::string cpu_weights = kCliCpuWeights;
  int64_t gpu_chunk = 0;  // prefill chunk on the GPU (0 = automatic)
  int n = 128, top_k = 0, threads = 0;
  float temp = 0.f, top_p = 1.f;
  uint64_t seed = 0;
  ContextArgs ctx;
  int64_t chunk = LoadOptions{}.prefill_chunk;
  std::vector<std::string> stop;
  bool json = false, quiet = false, special = false, ignore_eos = false;
};

std::vector<int32_t> build_prompt(const GenerateArgs& a, const Tokenizer& tok) {
  std::string text;
  if (!a.file.empty()) text = read_text_file(a.file);
  if (!a.prompt.empty()) text = text.empty() ? a.prompt : text + "\n" + a.prompt;
  if (!a.chat.empty()) {
    // --chat MESSAGE, optionally with a document from -f placed before the question.
    std::vector<ChatMessage> msgs;
    if (!a.system.empty()) msgs.push_back({"system", a.system});
    msgs.push_back({"user", text.empty() ? a.chat : text + "\n\n" + a.chat});
    return tok.encode(tok.apply_chat_template(msgs, true), false, true);
  }
  if (text.empty()) fail("the prompt is empty: give -p PROMPT, -f FILE or --chat MESSAGE");
  return tok.encode(text, tok.adds_bos(), a.special);
}

void run(const GenerateArgs& a) {
  check_max_context(a.ctx, a.model);
  LoadOptions lo;
  lo.model_path = a.model;
  lo.n_threads = a.threads;
  lo.max_context = a.ctx.max_context;
  lo.attn = a.attn;
  lo.prefill_chunk = a.chunk;
  lo.device = a.device;
  lo.kv_cache = a.kv_cache;
  lo.attn_tiles = a.attn_tiles;
  lo.kv_offload = a.offload.on;
  lo.kv_host_layers = a.offload.host_layers;
  lo.kv_page_table = a.offload.page_table;
  lo.kv_offload_residual = a.offload.residual;
  lo.cpu_weights = a.cpu_weights;
  lo.gpu_chunk = a.gpu_chunk;
  auto eng = Engine::load(lo);
  const auto prompt = build_prompt(a, eng->tokenizer());

  SamplingParams sp;
  sp.temperature = a.temp;
  sp.top_k = a.top_k;
  sp.top_p = a.top_p;
  sp.seed = a.seed;
  sp.max_tokens = a.n;
  sp.stop = a.stop;
  sp.stop_at_eos = !a.ignore_eos;

  ProgressLine progress("prefill", !a.quiet && int64_t(prompt.size()) > lo.prefill_chunk);
  TokenFn stream;
  if (!a.json) {
    stream = [](int32_t, const std::string& piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  const GenerateResult r = eng->generate(prompt, sp, std::ref(progress), stream);
  const double prefill_tps = r.prefill_s > 0 ? double(r.prompt_tokens) / r.prefill_s : 0;
  const double decode_tps = r.decode_s > 0 && r.tokens.size() > 1 ? double(r.tokens.size() - 1) / r.decode_s : 0;
  if (a.json) {
    nlohmann::json j;
    j["model"] = eng->config().name;
    j["attn"] = a.attn;
    j["prompt_tokens"] = r.prompt_tokens;
    j["tokens"] = r.tokens;
    j["text"] = r.text;
    j["stop_reason"] = r.stop_reason;
    j["timings"] = {{"prefill_s", r.prefill_s},
                    {"decode_s", r.decode_s},
                    {"prefill_tokens_per_s", prefill_tps},
                    {"decode_tokens_per_s", decode_tps},
                    {"generated_tokens", r.tokens.size()}};
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
    std::fflush(stdout);  // the answer's last line before the stats, when both go to one file
    if (!a.quiet)
      std::fprintf(stderr, "[prompt %lld tokens, prefill %.3f s (%.1f tok/s); %zu tokens generated, %.1f tok/s; stop: %s]\n",
                   (long long)r.prompt_tokens, r.prefill_s, prefill_tps, r.tokens.size(), decode_tps,
                   r.stop_reason.c_str());
  }
}

}  // namespace

void register_generate(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  auto* c = app.add_subcommand("generate", "Generate text from a prompt");
  c->add_option("-m,--model", args->model, "GGUF file or HF safetensors directory (default: SmolLM2-135M-Instruct)");
  auto* p = c->add_option("-p,--prompt", args->prompt, "Prompt text");
  c->add_option("-f,--file", args->file, "Read the prompt (or, with --chat, a document) from a file")
      ->check(readable_file());
  auto* ch = c->add_option("--chat", args->chat, "A user message, rendered with the model's chat template");
  c->add_option("--system", args->system, "System message for --chat")->needs(ch);
  p->excludes(ch);
  add_max_new_tokens(c, args->n, "Maximum new tokens");
  c->add_option("--temp", args->temp, "Sampling temperature (0 = greedy)")->check(finite_non_negative());
  c->add_option("--top-k", args->top_k, "Top-k sampling (0 = off)")->check(integer_at_least(0));
  c->add_option("--top-p", args->top_p, "Top-p (nucleus) sampling, in (0, 1] (1 = off)")
      ->check(probability_above_zero());
  add_seed(c, args->seed, "Random seed for sampling");
  c->add_option("--stop", args->stop, "Stop string (repeatable)")->default_str("");
  c->add_option("--attn", args->attn, "Attention method: " + known_methods() + "; per phase: 'prefill:X;decode:Y'");
  add_device(c, args->device);
  add_cpu_weights(c, args->cpu_weights);
  c->add_option("--kv-cache", args->kv_cache,
                "GPU KV cache: bf16, or fp8 (e4m3 with per-layer scales: half the memory; prefill runs layer by layer)")
      ->check(one_of({"bf16", "fp8"}, "KV cache type"));
  add_attn_tiles(c, args->attn_tiles);
  add_kv_offload(c, args->offload);
  c->add_option("--gpu-chunk", args->gpu_chunk, "Prefill chunk on the GPU in tokens (0 = automatic: 16K)")
      ->check(integer_at_least(0));
  add_threads(c, args->threads);
  add_max_context(c, args->ctx);
  add_prefill_chunk(c, args->chunk);
  c->add_flag("--special", args->special, "Parse special tokens like <|im_start|> in -p/-f text");
  c->add_flag("--ignore-eos", args->ignore_eos, "Do not stop at the end-of-generation token");
  c->add_flag("--json", args->json, "Print one JSON object (tokens, text, timings) instead of streaming");
  c->add_flag("-q,--quiet", args->quiet, "No progress or timings on stderr");
  c->callback([args] {
    if (args->prompt.empty() && args->file.empty() && args->chat.empty())
      usage_error("generate needs a prompt: -p PROMPT, -f FILE or --chat MESSAGE");
    run(*args);
  });
}

}  // namespace longctx::cli

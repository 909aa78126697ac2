// cmd_serve.cpp: `longctx serve`: the OpenAI-compatible HTTP server (server/server.h).
//
//   longctx serve                                  (the default model on http://127.0.0.1:8000)
//   longctx serve -m model.gguf --port 9000 --attn a_shape --kv-tokens 65536
//   longctx serve -m tokenizer.gguf --random-weights smollm2-135m --device cuda   (GPU benchmarks:
//       random weights of a named geometry, the tokenizer of -m's file)
#include "cli/commands.h"
#include "cli/geometry_option.h"
#include "cli/options.h"
#include "server/server.h"

namespace longctx::cli {

namespace {

// The default KV budget in contexts: room for a few full-context requests, or many short ones.
constexpr int64_t kDefaultKvContexts = 4;

struct ServeArgs {
  std::string model, host = "127.0.0.1", attn = "dense", device = "cpu", name, random_weights;
  std::string cpu_weights = kCliCpuWeights;  // as generate: greedy output through the server = generate's
  bool no_batching = false;
  KvOffloadArgs offload;  // GPU: --kv-offload (HiP: one sequence at a time, as without it)
  int port = 8000, threads = 0, max_sequences = 32, max_queue = 128, http_threads = 0;
  int64_t kv_tokens = 0, chunk = LoadOptions{}.prefill_chunk, max_body = 16 << 20;
  double drain_timeout = 30;
  ContextArgs ctx;
};

void run(const ServeArgs& a) {
  if (!a.random_weights.empty() && a.model.empty())
    fail("--random-weights {} needs -m FILE: the server tokenizes with that file's tokenizer", a.random_weights);
  if (a.random_weights.empty()) check_max_context(a.ctx, a.model);
  server::ServerOptions o;
  o.load.model_path = a.model;
  o.load.random_weights = a.random_weights;
  o.load.n_threads = a.threads;
  o.load.max_context = a.ctx.max_context;
  o.load.attn = a.attn;
  o.load.prefill_chunk = a.chunk;
  o.load.device = a.device;
  o.load.cpu_weights = a.cpu_weights;
  o.load.kv_offload = a.offload.on;
  o.load.kv_host_layers = a.offload.host_layers;
  o.load.kv_page_table = a.offload.page_table;
  o.load.kv_offload_residual = a.offload.residual;
  o.host = a.host;
  o.port = a.port;
  o.model_id = a.name;
  o.scheduler.batch.max_sequences = a.max_sequences;
  o.scheduler.batch.kv_tokens = a.kv_tokens;  // 0: set from the context below
  o.scheduler.batch.batched = !a.no_batching;
  o.scheduler.max_queue = a.max_queue;
  o.max_body_bytes = a.max_body;
  o.http_threads = a.http_threads;
  o.drain_timeout_s = a.drain_timeout;
  o.kv_contexts = kDefaultKvContexts;
  server::run_server(o);
}

}  // namespace

void register_serve(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  auto* c = app.add_subcommand("serve", "OpenAI-compatible HTTP server (continuous batching)");
  c->add_option("-m,--model", args->model, "GGUF file or HF safetensors directory (default: SmolLM2-135M-Instruct)");
  c->add_option("--host", args->host, "Address to listen on");
  c->add_option("--port", args->port, "TCP port")->check(CLI::Range(1, 65535));
  c->add_option("--served-model-name", args->name, "The model name clients pass (default: the model file's name)");
  c->add_option("--attn", args->attn,
                "Default attention method (a request may name another in an \"attn\" body field)");
  add_device(c, args->device);
  add_kv_offload(c, args->offload);
  add_cpu_weights(c, args->cpu_weights);
  add_threads(c, args->threads);
  add_max_context(c, args->ctx);
  add_prefill_chunk(c, args->chunk);
  c->add_option("--kv-tokens", args->kv_tokens,
                "KV cache budget over all running requests, in tokens (0 = 4 contexts); a request reserves its prompt + max_tokens")
      ->check(integer_at_least(0));
  c->add_option("--max-seqs", args->max_sequences, "Requests running at once (rows of one decode step)")
      ->check(integer_at_least(1));
  c->add_flag("--no-batching", args->no_batching,
              "Run one request at a time (whole generate per request): the baseline of batched serving");
  c->add_option("--random-weights", args->random_weights,
                "Random weights of a named geometry (llama3-8b, smollm2-135m, ...; NAME:N keeps N layers) with the "
                "tokenizer of -m's file; GPU benchmarks only")
      ->check(known_geometry());
  c->add_option("--max-queue", args->max_queue, "Requests waiting for admission at most (more get HTTP 503)")
      ->check(integer_at_least(0));
  c->add_option("--max-body", args->max_body, "Largest request body in bytes (larger: HTTP 413)")->check(integer_at_least(1));
  c->add_option("--http-threads", args->http_threads, "HTTP worker threads (0 = max-seqs + max-queue + 8)")
      ->check(integer_at_least(0));
  c->add_option("--drain-timeout", args->drain_timeout, "Seconds running requests may take to finish after SIGTERM")
      ->check(finite_non_negative());
  c->callback([args] { run(*args); });
}

}  // namespace longctx::cli

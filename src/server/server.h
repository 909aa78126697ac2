// server.h: `longctx serve`: an OpenAI-compatible HTTP server over one Engine.
//
//   longctx serve -m MODEL --host 127.0.0.1 --port 8000
//   curl http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' -d '{"model": "SmolLM2-135M-Instruct.Q4_1", "prompt": "The capital of France is", "max_tokens": 8}'
//
// Endpoints: POST /v1/completions, /v1/chat/completions (SSE streaming or not), GET /v1/models,
// /health, /metrics (Prometheus text), POST /tokenize, /detokenize. Requests join and leave the
// running batch at every engine step (server/scheduler.h); SIGTERM/SIGINT stop admitting, let
// running requests finish (--drain-timeout), then exit 0.
#pragma once
#include <cstdint>
#include <string>

#include "longctx/engine.h"
#include "server/scheduler.h"

namespace longctx::server {

struct ServerOptions {
  LoadOptions load;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model_id;            // the name clients pass as "model"; empty = the model file's stem
  SchedulerOptions scheduler;       // batch.kv_tokens 0: kv_contexts x the context
  int64_t kv_contexts = 4;
  int64_t max_body_bytes = 16 << 20;  // larger bodies get 413
  int http_threads = 0;               // 0 = max_sequences + max_queue + a few (one per streaming client)
  double drain_timeout_s = 30;        // on SIGTERM: how long running requests may take to finish
};

// Loads the model, serves until SIGTERM/SIGINT, drains; returns the exit code (0). Throws Error
// when the model cannot load or the address cannot be bound.
int run_server(const ServerOptions& o);

}  // namespace longctx::server

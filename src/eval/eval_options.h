// eval_options.h: what one `longctx eval` run was asked to do, and the runners for each kind of
// task (retrieval, perplexity, attention fidelity). The CLI (eval_cli.cpp) fills EvalOptions;
// tests call the runners directly with a fake engine through EngineFactory.
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "longctx/engine.h"

namespace longctx::eval {

struct EvalOptions {
  std::string task;                            // passkey, niah, ruler, a RULER task, ppl, attention
  std::string model_path;                      // empty = the default model
  std::vector<std::string> methods{"dense"};   // --attn, already split
  std::vector<int64_t> lengths{2048};
  int samples = 5;                             // per (length, depth) cell; ppl: windows per length
  uint64_t seed = 42;
  std::vector<double> depths;                  // empty = the task's default grid
  int max_new_tokens = 0;                      // 0 = the task's default
  int threads = 0;                             // 0 = all cores
  int64_t prefill_chunk = 0;                   // 0 = the engine's default
  std::string device;                          // cpu, cuda or auto; empty = the engine's default
  std::string kv_cache = "bf16";               // GPU KV cache: bf16 or fp8 (LoadOptions::kv_cache)
  std::string attn_tiles = "bf16";             // GPU sparse prefill K/V tiles: bf16 or fp8 (LoadOptions::attn_tiles)
  int64_t gpu_chunk = 0;                       // GPU prefill chunk; 0 = the engine's default
  int64_t max_context = 0;                     // 0 = the model's trained context (more: extrapolation)
  std::string text_path;                       // ppl text / haystack book; empty = default (ppl only)
  std::string out_dir;                         // PNG pictures (heatmaps, attention maps); needs cairo (image.h)
  bool json = false;                           // write JSON ...
  std::string json_path;                       // ... to this file, or stdout when empty
  bool chat_template = true;
  bool quiet = false;                          // no progress lines
  bool save_prompts = false;                   // put each prompt's text in the JSON
  // attention
  int attn_layer = -1, attn_head = -1;         // also draw this head (-1: only the worst head)
  int64_t max_queries = 1024;
  int map_size = 512;
};

using EngineFactory = std::function<std::unique_ptr<Engine>(const LoadOptions&)>;

// Each runner loads one engine per method through `factory`, prints progress to stderr, the
// table to `table_out`, and returns the JSON document (also written where the options say).
// They throw Error for bad requests (a length above the model's context, a missing text, ...).
nlohmann::json run_retrieval(const EvalOptions& o, const EngineFactory& factory, std::ostream& table_out);
nlohmann::json run_perplexity(const EvalOptions& o, const EngineFactory& factory, std::ostream& table_out);
nlohmann::json run_attention(const EvalOptions& o, const EngineFactory& factory, std::ostream& table_out);

// Dispatches on o.task, writes JSON (file or stdout) and pictures. Tables go to stdout, or to
// stderr when the JSON goes to stdout.
nlohmann::json run_eval(const EvalOptions& o, const EngineFactory& factory);

// Shared by the runners.
LoadOptions load_options_for(const EvalOptions& o, const std::string& method);
// Throws Error if a length is above the engine's context (naming the length and the model).
void check_lengths(const EvalOptions& o, const Engine& engine);
// "a_shape=64,1024" -> "a_shape-64-1024" (safe in file names).
std::string file_safe(const std::string& s);

}  // namespace longctx::eval

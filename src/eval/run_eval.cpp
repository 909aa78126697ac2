// run_eval.cpp: dispatch of one `longctx eval` run to its runner, shared checks, JSON output.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "eval/eval_options.h"
#include "eval/lengths.h"
#include "eval/task.h"
#include "util/error.h"

namespace longctx::eval {

LoadOptions load_options_for(const EvalOptions& o, const std::string& method) {
  LoadOptions lo;
  lo.model_path = o.model_path;
  lo.n_threads = o.threads;
  lo.attn = method;
  if (o.prefill_chunk > 0) lo.prefill_chunk = o.prefill_chunk;
  if (!o.device.empty()) lo.device = o.device;
  lo.kv_cache = o.kv_cache;
  lo.attn_tiles = o.attn_tiles;
  lo.gpu_chunk = o.gpu_chunk;
  lo.max_context = o.max_context;
  return lo;
}

void check_lengths(const EvalOptions& o, const Engine& engine) {
  if (o.lengths.empty()) fail("--lengths names no length");
  const int64_t ctx = engine.max_context();
  for (int64_t L : o.lengths)
    if (L > ctx)
      fail("length {} ({} tokens) is above the context of model {} ({} tokens): lower --lengths, or use a "
           "longer-context model (or -c N --extrapolate to test extrapolation)", format_length(L), L, engine.config().name.empty() ? o.model_path : engine.config().name,
           ctx);
}

std::string file_safe(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.') ? c : '-';
  return out;
}

// With several methods, every one is loaded (and dropped) before any prompt runs, so a method the
// engine refuses on this model or device (e.g. one the GPU cannot run, a length past the context)
// stops the run before the earlier methods spend their time; one method's load is already first.
void check_methods_load(const EvalOptions& o, const EngineFactory& factory) {
  if (o.methods.size() < 2) return;
  for (const auto& method : o.methods) {
    std::unique_ptr<Engine> engine;
    try {
      engine = factory(load_options_for(o, method));
    } catch (const Error& e) {
      fail("method '{}': {}", method, e.what());
    }
    if (!engine) fail("could not load the model for method '{}'", method);
    check_lengths(o, *engine);
  }
}

nlohmann::json run_eval(const EvalOptions& o, const EngineFactory& factory) {
  const bool json_to_stdout = o.json && o.json_path.empty();
  std::ostream& table_out = json_to_stdout ? std::cerr : std::cout;
  const std::vector<std::string> tasks = expand_task(o.task);  // validates the name
  if (o.task != "attention") check_methods_load(o, factory);     // `attention` loads dense only
  nlohmann::json doc;
  if (o.task == "ppl") doc = run_perplexity(o, factory, table_out);
  else if (o.task == "attention") doc = run_attention(o, factory, table_out);
  else doc = run_retrieval(o, factory, table_out);
  doc["task"] = o.task;
  doc["tasks"] = tasks;
  doc["model"] = o.model_path.empty() ? default_model_path() : o.model_path;
  doc["methods"] = o.methods;
  doc["lengths"] = o.lengths;
  doc["samples_per_cell"] = o.samples;
  doc["seed"] = o.seed;
  if (!o.depths.empty()) doc["depths"] = o.depths;
  if (!o.text_path.empty()) doc["text"] = o.text_path;
  if (o.json) {
    if (json_to_stdout) {
      std::cout << doc.dump(2) << "\n";
    } else {
      const auto parent = std::filesystem::path(o.json_path).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent);
      std::ofstream f(o.json_path);
      if (!f) fail("cannot write JSON results to {}", o.json_path);
      f << doc.dump(2) << "\n";
      if (!f) fail("cannot write JSON results to {}", o.json_path);
    }
  }
  return doc;
}

}  // namespace longctx::eval

// minference_config.h: MInference per-(layer, head) pattern configs, in the published format.
//
// What: the JSON file of the reference implementation, loaded as it is: a list with one object
// per layer; each object maps a head id ("0", "1", ...) to
//   [pattern, vertical_size, slash_size, score]
// pattern one of "vertical_and_slash" (k_v = vertical_size, k_s = slash_size),
// "stream_llm" (A-shape: sink = vertical_size, window = slash_size; "a_shape" is accepted as an
// alias) and "block_sparse" (k_b = vertical_size key blocks; slash_size unused). score is the
// search's number (its meaning differs between files: recall, counts, our relative error), kept
// only for information; it may be an integer or a float, and may be missing.
// Divergence: the reference's forward path ignores block_sparse's sizes and always keeps 100
// blocks; here vertical_size is k_b (our search writes the k_b it evaluated).
// Why: configs made for public models (shared/data/minference-configs) load unchanged, and
// configs written by `longctx search-patterns` load in the reference too.
// Layers with a sliding window (Gemma 3's local layers): the engine routes them dense within
// their window whatever their entries say (docs/architecture.md, "Sliding windows"), so only the
// global layers' entries matter. The format has no per-layer flag (the reference loads a list of
// head maps), so the search (pattern_search.h) writes a local layer's heads as
// local_window_pattern(window): the pattern such a layer computes, up to block granularity.
// How: nlohmann::json parse, then per-entry checks whose errors name the file, layer and head.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace longctx {

enum class PatternKind { VerticalSlash, BlockSparse, AShape };

// The published names ("vertical_and_slash", "block_sparse", "stream_llm").
const char* pattern_name(PatternKind k);

struct HeadPattern {
  PatternKind kind = PatternKind::VerticalSlash;
  int64_t vertical = 0;  // VS: k_v; A-shape: sink; BS: k_b
  int64_t slash = 0;     // VS: k_s; A-shape: window; BS: unused (0)
  double score = 0;      // informational
};

// A sliding-window layer's entry: stream_llm with no sinks and the layer's window, i.e. what the
// layer attends (the A-shape window is applied per 64-query block, so it may see up to 63 keys
// more; the engine never runs it: window layers route dense). score 0.
HeadPattern local_window_pattern(int64_t window);

struct MInferenceConfig {
  std::vector<std::vector<HeadPattern>> layers;  // [n_layer][n_head]

  // source names the file in messages. Throws Error naming layer/head and the problem.
  static MInferenceConfig from_json(const nlohmann::json& j, const std::string& source);
  static MInferenceConfig load(const std::string& path);
  nlohmann::json to_json() const;
  void save(const std::string& path) const;

  // Throws Error naming the mismatch when the config does not fit a model with n_layer layers
  // and n_head query heads per layer.
  void validate(int n_layer, int n_head, const std::string& model_name, const std::string& source) const;
};

}  // namespace longctx

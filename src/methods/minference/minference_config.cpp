// minference_config.cpp: see minference_config.h.
#include "methods/minference/minference_config.h"

#include <fstream>
#include <map>

#include "util/error.h"

namespace longctx {

const char* pattern_name(PatternKind k) {
  switch (k) {
    case PatternKind::VerticalSlash: return "vertical_and_slash";
    case PatternKind::BlockSparse: return "block_sparse";
    case PatternKind::AShape: return "stream_llm";
  }
  return "?";
}

HeadPattern local_window_pattern(int64_t window) {
  if (window <= 0) fail("internal: local_window_pattern of a layer without a window ({})", window);
  return HeadPattern{PatternKind::AShape, 0, window, 0.0};
}

namespace {

int64_t budget(const nlohmann::json& v, const char* what, const std::string& where) {
  if (!v.is_number_integer())
    fail("{}: {} must be an integer, got {}", where, what, v.dump());
  const int64_t x = v.get<int64_t>();
  if (x < 0) fail("{}: {} must be >= 0, got {}", where, what, x);
  return x;
}

HeadPattern parse_head(const nlohmann::json& e, const std::string& where) {
  if (!e.is_array() || e.size() < 3 || e.size() > 4 || !e[0].is_string())
    fail("{}: expected [pattern, vertical_size, slash_size, score], got {}", where, e.dump());
  HeadPattern hp;
  const std::string name = e[0].get<std::string>();
  if (name == "vertical_and_slash") hp.kind = PatternKind::VerticalSlash;
  else if (name == "block_sparse") hp.kind = PatternKind::BlockSparse;
  else if (name == "stream_llm" || name == "a_shape") hp.kind = PatternKind::AShape;
  else fail("{}: unknown pattern '{}' (known: vertical_and_slash, block_sparse, stream_llm, a_shape)", where, name);
  hp.vertical = budget(e[1], "vertical_size", where);
  hp.slash = budget(e[2], "slash_size", where);
  if (e.size() == 4) {
    if (!e[3].is_number()) fail("{}: score must be a number, got {}", where, e[3].dump());
    hp.score = e[3].get<double>();
  }
  if (hp.kind == PatternKind::BlockSparse && hp.vertical == 0)
    fail("{}: block_sparse needs vertical_size (key blocks kept) > 0", where);
  return hp;
}

}  // namespace

MInferenceConfig MInferenceConfig::from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_array() || j.empty())
    fail("MInference config {}: expected a non-empty JSON list with one object per layer", source);
  MInferenceConfig cfg;
  for (size_t l = 0; l < j.size(); ++l) {
    const auto& layer = j[l];
    if (!layer.is_object())
      fail("MInference config {}: layer {} must be an object mapping head ids to patterns", source, l);
    std::map<long, HeadPattern> by_id;
    for (auto it = layer.begin(); it != layer.end(); ++it) {
      const std::string& key = it.key();
      size_t pos = 0;
      long h = -1;
      try {
        h = std::stol(key, &pos);
      } catch (...) {
        pos = 0;
      }
      if (pos != key.size() || key.empty() || h < 0)
        fail("MInference config {}: layer {} has a bad head id '{}' (expected 0, 1, ...)", source, l, key);
      if (by_id.count(h)) fail("MInference config {}: layer {} lists head {} twice", source, l, h);
      by_id[h] = parse_head(it.value(), fmt::format("MInference config {}: layer {} head {}", source, l, h));
    }
    std::vector<HeadPattern> heads;
    for (const auto& [h, hp] : by_id) {
      if (h != long(heads.size()))
        fail("MInference config {}: layer {} is missing head {} (it lists heads up to {})", source, l,
             heads.size(), by_id.rbegin()->first);
      heads.push_back(hp);
    }
    cfg.layers.push_back(std::move(heads));
  }
  return cfg;
}

MInferenceConfig MInferenceConfig::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot open MInference config '{}'", path);
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    fail("MInference config {} is not valid JSON: {}", path, e.what());
  }
  return from_json(j, path);
}

nlohmann::json MInferenceConfig::to_json() const {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& layer : layers) {
    nlohmann::json o = nlohmann::json::object();
    for (size_t h = 0; h < layer.size(); ++h) {
      const auto& hp = layer[h];
      o[std::to_string(h)] = nlohmann::json::array({pattern_name(hp.kind), hp.vertical, hp.slash, hp.score});
    }
    j.push_back(std::move(o));
  }
  return j;
}

void MInferenceConfig::save(const std::string& path) const {
  std::ofstream out(path);
  if (!out) fail("cannot write MInference config '{}'", path);
  out << to_json().dump() << "\n";
  if (!out) fail("error writing MInference config '{}'", path);
}

void MInferenceConfig::validate(int n_layer, int n_head, const std::string& model_name,
                                const std::string& source) const {
  if (int64_t(layers.size()) != n_layer)
    fail("MInference config {} has {} layers but model '{}' has {}: it was made for another model", source,
         layers.size(), model_name, n_layer);
  for (size_t l = 0; l < layers.size(); ++l)
    if (int64_t(layers[l].size()) != n_head)
      fail("MInference config {}: layer {} has {} heads but model '{}' has {} query heads per layer", source, l,
           layers[l].size(), model_name, n_head);
}

}  // namespace longctx

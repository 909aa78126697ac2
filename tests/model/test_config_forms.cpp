// test_config_forms.cpp: config.json as older transformers and published checkpoints write it
// ("rope_theta", "rope_scaling", Gemma's "rope_local_base_freq" and "sliding_window_pattern")
// means the same model as the transformers >= 5 form ("rope_parameters" nested by layer type,
// "layer_types") the golden tool writes; bad per-layer and RoPE fields fail naming the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "model_test_util.h"
#include "methods/registry.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string arch_dir(const std::string& name) { return std::string(LONGCTX_TEST_DATA) + "/arch/" + name; }

json read_config(const std::string& name) {
  std::ifstream f(arch_dir(name) + "/config.json");
  return json::parse(f);
}

// A model directory with `cfg` as config.json and the weights of tests/data/arch/<name>.
fs::path with_config(const std::string& name, const json& cfg, const std::string& tag) {
  const fs::path dir = test::temp_dir("config-" + tag);
  fs::copy_file(arch_dir(name) + "/model.safetensors", dir / "model.safetensors");
  std::ofstream(dir / "config.json") << cfg.dump(1);
  return dir;
}

std::vector<float> logits_of(const fs::path& dir, ThreadPool& pool) {
  auto mf = open_model_file(dir.string());
  const ModelConfig cfg = ModelConfig::from_model_file(*mf);
  Transformer t(cfg, ModelWeights::load(*mf, cfg), make_dense_method(), pool);
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(int32_t(3 + (i * 37) % 120));
  t.reset(int64_t(ids.size()));
  std::vector<float> lg;
  t.forward(ids, int64_t(ids.size()), &lg);
  return lg;
}

// The tiny Gemma 3 (layers s, s, global, s; window 16; local base 100; linear x2 on global).
json gemma3_legacy() {
  json c = read_config("gemma3");
  c.erase("rope_parameters");
  c.erase("layer_types");
  c["rope_theta"] = 10000.0;
  c["rope_local_base_freq"] = 100.0;
  c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  c["sliding_window_pattern"] = 3;
  return c;
}

TEST(ConfigForms, GemmaLegacyKeysGiveTheSameModel) {
  ThreadPool pool(2);
  const fs::path dir = with_config("gemma3", gemma3_legacy(), "gemma-legacy");
  auto mf = open_model_file(dir.string());
  const ModelConfig c = ModelConfig::from_model_file(*mf);
  ASSERT_EQ(c.n_layer, 4);
  for (int l = 0; l < 4; ++l) {
    EXPECT_EQ(c.layer(l).window, l == 2 ? 0 : 16) << l;
    EXPECT_EQ(c.layer(l).rope_theta, l == 2 ? 10000.f : 100.f) << l;
    EXPECT_EQ(c.layer(l).rope_scaled, l == 2) << l;
  }
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_FLOAT_EQ(c.attn_scale, float(1 / std::sqrt(24.0)));
  EXPECT_NE(c.summary().find("3/4 layers sliding window 16"), std::string::npos) << c.summary();
  EXPECT_EQ(logits_of(dir, pool), logits_of(arch_dir("gemma3"), pool));
  fs::remove_all(dir);
}

TEST(ConfigForms, YarnAndLongRopeLegacyKeysGiveTheSameModel) {
  ThreadPool pool(2);
  json y = read_config("qwen3_yarn");
  y["rope_theta"] = y["rope_parameters"]["rope_theta"];
  y["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32}};
  y.erase("rope_parameters");
  const fs::path yd = with_config("qwen3_yarn", y, "yarn-legacy");
  EXPECT_EQ(logits_of(yd, pool), logits_of(arch_dir("qwen3_yarn"), pool));
  json p = read_config("phi3_longrope");
  p["rope_theta"] = 10000.0;
  p["rope_scaling"] = {{"type", "su"},  // Phi-3's first name for longrope
                       {"short_factor", p["rope_parameters"]["short_factor"]},
                       {"long_factor", p["rope_parameters"]["long_factor"]}};
  p.erase("rope_parameters");
  const fs::path pd = with_config("phi3_longrope", p, "longrope-legacy");
  EXPECT_EQ(logits_of(pd, pool), logits_of(arch_dir("phi3_longrope"), pool));
  fs::remove_all(yd);
  fs::remove_all(pd);
}

TEST(ConfigForms, BadFieldsFailNamingThem) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* base;
  };
  const Case cases[] = {
      {"layer_types", [](json& c) { c["layer_types"] = {"sliding_attention"}; }, "gemma3"},
      {"layer_types[1]", [](json& c) { c["layer_types"][1] = "chunked_attention"; }, "gemma3"},
      {"sliding_window is not set", [](json& c) { c["sliding_window"] = nullptr; }, "gemma3"},
      {"final_logit_softcapping", [](json& c) { c["final_logit_softcapping"] = 30.0; }, "gemma3"},
      {"unsupported activation", [](json& c) { c["hidden_activation"] = "relu"; }, "gemma3"},
      {"unsupported rope scaling type 'dynamic'",
       [](json& c) { c["rope_parameters"] = {{"rope_type", "dynamic"}, {"factor", 2.0}, {"rope_theta", 1e4}}; },
       "qwen3"},
      {"yarn rope scaling needs a 'factor'",
       [](json& c) { c["rope_parameters"].erase("factor"); }, "qwen3_yarn"},
      {"expected head_dim/2 = 8", [](json& c) { c["rope_parameters"]["long_factor"] = {1.0, 2.0}; },
       "phi3_longrope"},
      {"partial_rotary_factor", [](json& c) { c["partial_rotary_factor"] = 0.5; }, "qwen3"},
  };
  for (const Case& k : cases) {
    json c = read_config(k.base);
    k.edit(c);
    const fs::path dir = with_config(k.base, c, "bad");
    try {
      auto mf = open_model_file(dir.string());
      ModelConfig::from_model_file(*mf);
      ADD_FAILURE() << k.what << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(k.what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    }
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace longctx

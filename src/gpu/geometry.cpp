// geometry.cpp: see geometry.h. Values from each model's published config.json.
#include "gpu/geometry.h"

#include <charconv>
#include <cmath>

#include "util/error.h"

namespace longctx::gpu {

namespace {

struct Geometry {
  const char* name;
  ModelConfig cfg;
};

ModelConfig llama3_8b() {
  ModelConfig c;
  c.arch = "llama";
  c.name = "random llama3-8b";
  c.n_layer = 32;
  c.n_embd = 4096;
  c.n_head = 32;
  c.n_kv_head = 8;
  c.head_dim = 128;
  c.n_ff = 14336;
  c.vocab_size = 128256;
  c.context_length = 8192;
  c.rms_eps = 1e-5f;
  c.rope_theta = 500000.f;
  return c;
}

ModelConfig llama31_8b() {
  ModelConfig c = llama3_8b();
  c.name = "random llama3.1-8b";
  c.context_length = 131072;
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = 8.f;
  c.rope_scaling.low_freq_factor = 1.f;
  c.rope_scaling.high_freq_factor = 4.f;
  c.rope_scaling.original_context = 8192;
  return c;
}

ModelConfig qwen25_7b() {
  ModelConfig c;
  c.arch = "qwen2";
  c.name = "random qwen2.5-7b";
  c.n_layer = 28;
  c.n_embd = 3584;
  c.n_head = 28;
  c.n_kv_head = 4;
  c.head_dim = 128;
  c.n_ff = 18944;
  c.vocab_size = 152064;
  c.context_length = 32768;
  c.rms_eps = 1e-6f;
  c.rope_theta = 1000000.f;
  c.qkv_bias = true;
  return c;
}

ModelConfig smollm2_135m() {
  ModelConfig c;
  c.arch = "llama";
  c.name = "random smollm2-135m";
  c.n_layer = 30;
  c.n_embd = 576;
  c.n_head = 9;
  c.n_kv_head = 3;
  c.head_dim = 64;
  c.n_ff = 1536;
  c.vocab_size = 49152;
  c.context_length = 8192;
  c.rms_eps = 1e-5f;
  c.rope_theta = 100000.f;
  c.tied_embeddings = true;
  return c;
}

// google/gemma-3-270m as its GGUF reads (model/config.cpp gemma3_from_gguf): head_dim 256, one KV
// head, every 6th layer global (RoPE base 1e6), the others sliding (window 512, base 1e4), norms
// already (1 + w) (norm_offset 0).
ModelConfig gemma3_270m() {
  constexpr int kLayers = 18, kGlobalEvery = 6;
  constexpr int64_t kWindow = 512;
  ModelConfig c;
  c.arch = "gemma3";
  c.name = "random gemma3-270m";
  c.n_layer = kLayers;
  c.n_embd = 640;
  c.n_head = 4;
  c.n_kv_head = 1;
  c.head_dim = 256;
  c.n_ff = 2048;
  c.vocab_size = 262144;
  c.context_length = 32768;
  c.rms_eps = 1e-6f;
  c.rope_theta = 1e6f;
  c.tied_embeddings = true;
  c.qk_norm = true;
  c.post_norms = true;
  c.activation = "gelu_tanh";
  c.embed_scale = std::sqrt(float(c.n_embd));
  c.attn_scale = 1.f / std::sqrt(float(c.head_dim));
  for (int l = 0; l < kLayers; ++l) {
    const bool global = (l + 1) % kGlobalEvery == 0;
    c.layers.push_back(global ? LayerAttention{0, 1e6f, true} : LayerAttention{kWindow, 1e4f, false});
  }
  return c;
}

const std::vector<Geometry>& table() {
  static const std::vector<Geometry> t = {{"llama3-8b", llama3_8b()},
                                          {"llama3.1-8b", llama31_8b()},
                                          {"qwen2.5-7b", qwen25_7b()},
                                          {"smollm2-135m", smollm2_135m()},
                                          {"gemma3-270m", gemma3_270m()}};
  return t;
}

}  // namespace

std::vector<std::string> geometry_names() {
  std::vector<std::string> v;
  for (const auto& g : table()) v.emplace_back(g.name);
  return v;
}

ModelConfig geometry_config(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  for (const auto& g : table()) {
    if (name != g.name) continue;
    ModelConfig c = g.cfg;
    if (colon != std::string::npos) {
      const std::string n = spec.substr(colon + 1);
      int layers = 0;
      const auto r = std::from_chars(n.data(), n.data() + n.size(), layers);
      if (r.ec != std::errc() || r.ptr != n.data() + n.size() || layers < 1 || layers > c.n_layer)
        fail("--random-weights '{}': the layer count after ':' must be 1..{}", spec, c.n_layer);
      c.n_layer = layers;
      if (!c.layers.empty()) c.layers.resize(size_t(layers));
      c.name += fmt::format(" ({} of {} layers)", layers, g.cfg.n_layer);
    }
    return c;
  }
  std::string known;
  for (const auto& g : table()) known += std::string(known.empty() ? "" : ", ") + g.name;
  fail("unknown --random-weights geometry '{}' (known: {}; append :N to keep N layers)", name, known);
}

}  // namespace longctx::gpu

// config.cpp: ModelConfig from GGUF metadata ("<arch>.block_count", ...) or HF config.json.
#include "model/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace longctx {

namespace {

using nlohmann::json;

// Architectures the forward pass implements, by the names each format uses.
// GGUF general.architecture -> ours; HF model_type -> ours.
struct ArchName {
  const char* external;
  const char* internal;
  bool qkv_bias;
};
constexpr ArchName kGgufArchs[] = {{"llama", "llama", false}, {"mistral", "llama", false}, {"qwen2", "qwen2", true},
                                   {"qwen3", "qwen3", false},  {"gemma3", "gemma3", false}, {"phi3", "phi3", false}};
constexpr ArchName kHfArchs[] = {{"llama", "llama", false}, {"mistral", "llama", false}, {"qwen2", "qwen2", true},
                                 {"qwen3", "qwen3", false},  {"gemma3_text", "gemma3", false}, {"phi3", "phi3", false}};

// Gemma 3's defaults where a file leaves them out (transformers' Gemma3TextConfig, llama.cpp).
constexpr float kGemmaGlobalTheta = 1e6f;
constexpr float kGemmaLocalTheta = 1e4f;
constexpr int kGemmaSlidingPattern = 6;  // every 6th layer global, the others sliding

// Layer i is global in a "pattern" of n: (i + 1) % n == 0 (Gemma 3's sliding_window_pattern).
bool global_in_pattern(int i, int n) { return n <= 0 || (i + 1) % n == 0; }

template <size_t N>
const ArchName* find_arch(const ArchName (&table)[N], const std::string& name) {
  for (const auto& a : table)
    if (name == a.external) return &a;
  return nullptr;
}
template <size_t N>
std::string arch_list(const ArchName (&table)[N]) {
  std::string s;
  for (const auto& a : table) s += std::string(s.empty() ? "" : ", ") + a.external;
  return s;
}

// Reads a required numeric field; error names the key and the file.
template <class T>
T need(const json& j, const std::string& key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) fail("{}: missing required field '{}'", where, key);
  if (!it->is_number()) fail("{}: field '{}' must be a number, got {}", where, key, it->type_name());
  return it->get<T>();
}
template <class T>
T opt(const json& j, const std::string& key, T dflt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null() || !(it->is_number() || it->is_boolean())) return dflt;
  return it->get<T>();
}

void validate(const ModelConfig& c, const std::string& where) {
  auto pos = [&](const char* what, int64_t v) {
    if (v <= 0) fail("{}: {} must be positive, got {}", where, what, v);
  };
  pos("block count (layers)", c.n_layer);
  pos("hidden size", c.n_embd);
  pos("attention head count", c.n_head);
  pos("KV head count", c.n_kv_head);
  pos("head dim", c.head_dim);
  pos("feed-forward size", c.n_ff);
  pos("vocab size", c.vocab_size);
  pos("context length", c.context_length);
  if (c.n_head % c.n_kv_head != 0)
    fail("{}: {} attention heads is not a multiple of {} KV heads", where, c.n_head, c.n_kv_head);
  if (c.head_dim % 2 != 0) fail("{}: head dim {} must be even for RoPE", where, c.head_dim);
  if (!(c.rms_eps > 0)) fail("{}: RMSNorm epsilon must be positive", where);
  if (!(c.rope_theta > 0)) fail("{}: rope theta must be positive", where);
  if (c.rope_scaling.type != "none" && !(c.rope_scaling.factor > 0))
    fail("{}: rope scaling factor must be positive", where);
  const RopeScaling& rs = c.rope_scaling;
  if ((rs.type == "yarn" || rs.type == "longrope") && rs.original_context <= 0)
    fail("{}: rope scaling original context must be positive, got {}", where, rs.original_context);
  if (rs.type == "longrope") {
    const size_t half = size_t(c.head_dim / 2);
    if (rs.short_factor.size() != half || rs.long_factor.size() != half)
      fail("{}: longrope short_factor/long_factor have {}/{} entries, expected head_dim/2 = {}", where,
           rs.short_factor.size(), rs.long_factor.size(), half);
    for (float f : rs.short_factor)
      if (!(f > 0)) fail("{}: longrope short_factor entries must be positive", where);
    for (float f : rs.long_factor)
      if (!(f > 0)) fail("{}: longrope long_factor entries must be positive", where);
  }
  if (!c.layers.empty() && int(c.layers.size()) != c.n_layer)
    fail("{}: {} per-layer attention types for {} layers", where, c.layers.size(), c.n_layer);
  for (size_t l = 0; l < c.layers.size(); ++l) {
    if (c.layers[l].window < 0) fail("{}: layer {} sliding window {} must be >= 0", where, l, c.layers[l].window);
    if (!(c.layers[l].rope_theta > 0)) fail("{}: layer {} rope theta must be positive", where, l);
  }
  if (c.activation != "silu" && c.activation != "gelu_tanh")
    fail("{}: unsupported activation '{}' (supported: silu, gelu_pytorch_tanh)", where, c.activation);
  if (!(c.attn_scale >= 0)) fail("{}: attention scale must be positive", where);
}

// Every layer global with one RoPE base (the Llama family).
std::vector<LayerAttention> uniform_layers(int n, float theta, int64_t window = 0) {
  return std::vector<LayerAttention>(size_t(std::max(n, 0)), LayerAttention{window, theta, true});
}

// Gemma 3 as llama.cpp reads it: "<arch>.attention.sliding_window", the local RoPE base
// "<arch>.rope.freq_base_swa" (10000 when absent), the pattern "<arch>.attention.sliding_window_pattern"
// (an int n: every n-th layer global; or one bool per layer, true = sliding; 6 when absent).
// Norm weights in Gemma GGUFs already hold (1 + w), so norm_offset stays 0.
void gemma3_from_gguf(const json& m, const std::string& p, ModelConfig& c) {
  c.post_norms = true;
  c.activation = "gelu_tanh";
  c.embed_scale = std::sqrt(float(c.n_embd));
  // query_pre_attn_scalar is not in llama.cpp's files: it uses head_dim, except for the 27B model
  // (62 layers) whose scalar is hidden / heads. "<arch>.attention.scale" (gguf-py's key for a
  // score scale) overrides that where a file has it.
  constexpr int kGemma27bLayers = 62;
  c.attn_scale = 1.f / std::sqrt(float(c.n_layer == kGemma27bLayers ? c.n_embd / c.n_head : c.head_dim));
  c.attn_scale = opt<float>(m, p + "attention.scale", c.attn_scale);
  const int64_t window = opt<int64_t>(m, p + "attention.sliding_window", 0);
  const float local_theta = opt<float>(m, p + "rope.freq_base_swa", kGemmaLocalTheta);
  const json* pattern = m.contains(p + "attention.sliding_window_pattern") ? &m[p + "attention.sliding_window_pattern"] : nullptr;
  for (int l = 0; l < c.n_layer; ++l) {
    bool sliding = !global_in_pattern(l, kGemmaSlidingPattern);
    if (pattern && pattern->is_number_integer()) sliding = !global_in_pattern(l, pattern->get<int>());
    if (pattern && pattern->is_array() && size_t(l) < pattern->size() && (*pattern)[size_t(l)].is_boolean())
      sliding = (*pattern)[size_t(l)].get<bool>();
    if (sliding && window > 0) c.layers[size_t(l)] = {window, local_theta, false};
  }
}

// LongRoPE as llama.cpp stores it: rope_factors_short/long.weight, the original context in
// "<arch>.rope.scaling.original_context_length", the attention factor in
// "<arch>.rope.scaling.attn_factor" (transformers' attention_factor; derived when absent).
void longrope_from_gguf(const ModelFile& mf, const std::string& p, ModelConfig& c) {
  const json& m = mf.metadata();
  RopeScaling& r = c.rope_scaling;
  r.type = "longrope";
  r.original_context = opt<int64_t>(m, p + "rope.scaling.original_context_length", c.context_length);
  if (r.original_context <= 0) fail("{}: rope scaling original context must be positive", mf.path());
  r.factor = float(double(c.context_length) / double(r.original_context));
  r.attention_factor = opt<float>(m, p + "rope.scaling.attn_factor", 0.f);
  auto factors = [&](const char* name) {
    const TensorView& t = mf.get(name);
    if (t.shape.size() != 1) fail("{}: tensor '{}' has shape {}, expected one dimension", mf.path(), name, t.shape_str());
    std::vector<float> v(size_t(t.numel()));
    dequantize(t.dtype, t.data, v.data(), t.numel());
    return v;
  };
  r.short_factor = factors("rope_factors_short.weight");
  r.long_factor = factors("rope_factors_long.weight");
}

ModelConfig from_gguf(const ModelFile& mf) {
  const json& m = mf.metadata();
  const std::string where = mf.path();
  if (!m.contains("general.architecture") || !m["general.architecture"].is_string())
    fail("{}: GGUF metadata has no general.architecture", where);
  const std::string ext = m["general.architecture"].get<std::string>();
  const ArchName* a = find_arch(kGgufArchs, ext);
  if (!a) fail("{}: unsupported architecture '{}' (supported: {})", where, ext, arch_list(kGgufArchs));
  ModelConfig c;
  c.arch = a->internal;
  c.qkv_bias = mf.find("blk.0.attn_q.bias") != nullptr;
  c.name = m.value("general.name", ext);
  const std::string p = ext + ".";
  c.n_layer = need<int>(m, p + "block_count", where);
  c.n_embd = need<int>(m, p + "embedding_length", where);
  c.n_ff = need<int>(m, p + "feed_forward_length", where);
  c.n_head = need<int>(m, p + "attention.head_count", where);
  c.n_kv_head = opt<int>(m, p + "attention.head_count_kv", c.n_head);
  c.head_dim = opt<int>(m, p + "attention.key_length", c.n_head > 0 ? c.n_embd / c.n_head : 0);
  c.context_length = need<int64_t>(m, p + "context_length", where);
  c.rms_eps = opt<float>(m, p + "attention.layer_norm_rms_epsilon", 1e-5f);
  c.rope_theta = opt<float>(m, p + "rope.freq_base", 10000.f);
  if (m.contains(p + "vocab_size")) {
    c.vocab_size = need<int>(m, p + "vocab_size", where);
  } else if (m.contains("tokenizer.ggml.tokens") && m["tokenizer.ggml.tokens"].is_array()) {
    c.vocab_size = int(m["tokenizer.ggml.tokens"].size());
  } else if (const auto* t = mf.find("token_embd.weight"); t && t->shape.size() == 2) {
    c.vocab_size = int(t->shape[0]);
  }
  const std::string st = m.value(p + "rope.scaling.type", std::string("none"));
  if (st == "linear") {
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = opt<float>(m, p + "rope.scaling.factor", 1.f);
  } else if (st == "yarn") {
    // llama.cpp's yarn_* keys, in HF's terms; the attention factor is derived from the factor.
    c.rope_scaling.type = "yarn";
    c.rope_scaling.factor = opt<float>(m, p + "rope.scaling.factor", 1.f);
    c.rope_scaling.original_context = opt<int64_t>(m, p + "rope.scaling.original_context_length", c.context_length);
    c.rope_scaling.beta_fast = opt<float>(m, p + "rope.scaling.yarn_beta_fast", 32.f);
    c.rope_scaling.beta_slow = opt<float>(m, p + "rope.scaling.yarn_beta_slow", 1.f);
  } else if (st != "none" && !st.empty()) {
    fail("{}: unsupported rope scaling type '{}' (supported: none, linear, yarn; llama3 via rope_freqs)", where, st);
  }
  // Llama-3.1 GGUFs carry the llama3 scaling as a rope_freqs.weight tensor of per-frequency
  // divisors (applied by the model on top of plain frequencies); shown as "llama3".
  if (mf.find("rope_freqs.weight")) c.rope_scaling.type = "llama3";
  // Phi-3 GGUFs carry LongRoPE as two tensors of per-frequency divisors (llama.cpp's names).
  if (mf.find("rope_factors_long.weight")) longrope_from_gguf(mf, p, c);
  c.tied_embeddings = mf.find("output.weight") == nullptr;
  c.qk_norm = mf.find("blk.0.attn_q_norm.weight") != nullptr;
  c.layers = uniform_layers(c.n_layer, c.rope_theta);
  if (ext == "gemma3") gemma3_from_gguf(m, p, c);
  return c;
}

// One HF RoPE dict (old "rope_scaling", or a "rope_parameters" entry) into c.rope_scaling.
// `j` is the whole config (Phi-3 keeps original_max_position_embeddings at its top level).
void read_rope_dict(const json& rs, const json& j, ModelConfig& c, const std::string& where) {
  std::string type = rs.value("rope_type", rs.value("type", std::string("default")));
  if (type == "default") type = "none";
  if (type == "su") type = "longrope";  // Phi-3's first name for it
  if (type != "none" && type != "linear" && type != "llama3" && type != "yarn" && type != "longrope")
    fail("{}: unsupported rope scaling type '{}' (supported: linear, llama3, yarn, longrope)", where, type);
  RopeScaling& r = c.rope_scaling;
  r.type = type;
  if (type == "none") return;
  r.factor = opt<float>(rs, "factor", 1.f);
  r.low_freq_factor = opt<float>(rs, "low_freq_factor", 1.f);
  r.high_freq_factor = opt<float>(rs, "high_freq_factor", 4.f);
  if (type == "llama3") {
    r.original_context = opt<int64_t>(rs, "original_max_position_embeddings", 8192);
  } else {  // yarn, longrope: as transformers' standardize_rope_params
    r.original_context = opt<int64_t>(j, "original_max_position_embeddings",
                                      opt<int64_t>(rs, "original_max_position_embeddings", c.context_length));
  }
  if (type == "yarn") {
    if (!rs.contains("factor") || !rs["factor"].is_number()) fail("{}: yarn rope scaling needs a 'factor'", where);
    r.beta_fast = opt<float>(rs, "beta_fast", 32.f);
    r.beta_slow = opt<float>(rs, "beta_slow", 1.f);
    r.mscale = opt<float>(rs, "mscale", 0.f);
    r.mscale_all_dim = opt<float>(rs, "mscale_all_dim", 0.f);
    r.truncate = opt<bool>(rs, "truncate", true);
  }
  if (type == "longrope") {
    // transformers: without a factor, the ratio of the extended to the original context.
    if (!rs.contains("factor") || rs["factor"].is_null())
      r.factor = float(double(c.context_length) / double(r.original_context));
    auto floats = [&](const char* key) {
      if (!rs.contains(key) || !rs[key].is_array()) fail("{}: longrope rope scaling needs a '{}' array", where, key);
      std::vector<float> v;
      for (const auto& x : rs[key]) {
        if (!x.is_number()) fail("{}: longrope '{}' holds a non-number", where, key);
        v.push_back(x.get<float>());
      }
      return v;
    };
    r.short_factor = floats("short_factor");
    r.long_factor = floats("long_factor");
  }
  if (type == "yarn" || type == "longrope") r.attention_factor = opt<float>(rs, "attention_factor", 0.f);
}

// The RoPE bases and scaling, from either config.json form: transformers < 5 ("rope_theta",
// "rope_scaling", Gemma's "rope_local_base_freq") or >= 5 ("rope_parameters", for Gemma 3 nested
// by layer type). Sets c.rope_theta (global layers) and c.rope_scaling; returns the local base.
float read_hf_rope(const json& j, ModelConfig& c, const std::string& where) {
  const bool gemma = c.arch == "gemma3";
  c.rope_theta = opt<float>(j, "rope_theta", gemma ? kGemmaGlobalTheta : 10000.f);
  float local = opt<float>(j, "rope_local_base_freq", gemma ? kGemmaLocalTheta : c.rope_theta);
  const json none = json::object();
  const json& rp = j.contains("rope_parameters") && j["rope_parameters"].is_object() ? j["rope_parameters"] : none;
  if (rp.contains("full_attention") || rp.contains("sliding_attention")) {
    const json& full = rp.contains("full_attention") && rp["full_attention"].is_object() ? rp["full_attention"] : none;
    const json& slide =
        rp.contains("sliding_attention") && rp["sliding_attention"].is_object() ? rp["sliding_attention"] : none;
    c.rope_theta = opt<float>(full, "rope_theta", c.rope_theta);
    local = opt<float>(slide, "rope_theta", local);
    const std::string st = slide.value("rope_type", std::string("default"));
    if (st != "default")
      fail("{}: rope scaling '{}' on sliding-window layers is not supported", where, st);
    read_rope_dict(full, j, c, where);
  } else if (!rp.empty()) {
    c.rope_theta = opt<float>(rp, "rope_theta", c.rope_theta);
    if (!gemma) local = c.rope_theta;
    read_rope_dict(rp, j, c, where);
  } else if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    read_rope_dict(j["rope_scaling"], j, c, where);
  }
  return local;
}

// Per-layer attention types: "layer_types" when given (transformers >= 4.54 writes it), else
// Gemma 3's sliding_window_pattern, Qwen's use_sliding_window + max_window_layers, or
// Mistral's / Phi-3's sliding_window on every layer. Sliding layers use the local RoPE base and
// no rope scaling on Gemma 3; elsewhere they share the global RoPE.
std::vector<LayerAttention> hf_layers(const json& j, const ModelConfig& c, float local_theta,
                                      const std::string& where) {
  const bool gemma = c.arch == "gemma3";
  std::vector<bool> sliding(size_t(std::max(c.n_layer, 0)), false);
  const bool has_window = j.contains("sliding_window") && j["sliding_window"].is_number();
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    const json& lt = j["layer_types"];
    if (int(lt.size()) != c.n_layer) fail("{}: layer_types has {} entries for {} layers", where, lt.size(), c.n_layer);
    for (size_t l = 0; l < lt.size(); ++l) {
      const std::string t = lt[l].is_string() ? lt[l].get<std::string>() : "";
      if (t != "full_attention" && t != "sliding_attention")
        fail("{}: layer_types[{}] is '{}' (supported: full_attention, sliding_attention)", where, l, lt[l].dump());
      sliding[l] = t == "sliding_attention";
    }
  } else if (gemma) {
    const int n = opt<int>(j, "sliding_window_pattern", kGemmaSlidingPattern);
    for (int l = 0; l < c.n_layer; ++l) sliding[size_t(l)] = !global_in_pattern(l, n);
  } else if (c.arch == "qwen2" || c.arch == "qwen3") {
    if (opt<bool>(j, "use_sliding_window", false) && has_window) {
      const int first = opt<int>(j, "max_window_layers", 0);
      for (int l = first; l < c.n_layer; ++l) sliding[size_t(l)] = true;
    }
  } else if (has_window) {  // Mistral v0.1, Phi-3: every layer
    sliding.assign(sliding.size(), true);
  }
  const int64_t window = has_window ? j["sliding_window"].get<int64_t>() : 0;
  std::vector<LayerAttention> layers = uniform_layers(c.n_layer, c.rope_theta);
  for (size_t l = 0; l < sliding.size(); ++l) {
    if (!sliding[l]) continue;
    if (window <= 0) fail("{}: layer {} is a sliding-window layer but sliding_window is not set", where, l);
    layers[l].window = window;
    if (gemma) layers[l] = {window, local_theta, false};
  }
  return layers;
}

ModelConfig from_hf(const ModelFile& mf) {
  const json& meta = mf.metadata();
  const std::string where = mf.path() + "/config.json";
  if (!meta.contains("config")) fail("{}: missing", where);
  const json& j = meta["config"];
  const std::string ext = j.value("model_type", std::string(""));
  const ArchName* a = find_arch(kHfArchs, ext);
  if (!a) fail("{}: unsupported model_type '{}' (supported: {})", where, ext, arch_list(kHfArchs));
  ModelConfig c;
  c.arch = a->internal;
  c.name = j.value("_name_or_path", ext);
  c.n_layer = need<int>(j, "num_hidden_layers", where);
  c.n_embd = need<int>(j, "hidden_size", where);
  c.n_ff = need<int>(j, "intermediate_size", where);
  c.n_head = need<int>(j, "num_attention_heads", where);
  c.n_kv_head = opt<int>(j, "num_key_value_heads", c.n_head);
  c.head_dim = opt<int>(j, "head_dim", c.n_head > 0 ? c.n_embd / c.n_head : 0);
  c.vocab_size = need<int>(j, "vocab_size", where);
  c.context_length = need<int64_t>(j, "max_position_embeddings", where);
  c.rms_eps = opt<float>(j, "rms_norm_eps", 1e-6f);
  c.tied_embeddings = opt<bool>(j, "tie_word_embeddings", c.arch == "gemma3");
  c.qkv_bias = a->qkv_bias || opt<bool>(j, "attention_bias", false);
  c.qk_norm = c.arch == "qwen3" || c.arch == "gemma3";
  const std::string act = j.value(c.arch == "gemma3" ? "hidden_activation" : "hidden_act",
                                  std::string(c.arch == "gemma3" ? "gelu_pytorch_tanh" : "silu"));
  c.activation = act == "gelu_pytorch_tanh" ? "gelu_tanh" : act;
  if (opt<float>(j, "partial_rotary_factor", 1.f) != 1.f)
    fail("{}: partial_rotary_factor {} is not supported (RoPE over the whole head only)", where,
         opt<float>(j, "partial_rotary_factor", 1.f));
  const float local_theta = read_hf_rope(j, c, where);
  c.layers = hf_layers(j, c, local_theta, where);
  if (c.arch == "gemma3") {
    for (const char* k : {"final_logit_softcapping", "attn_logit_softcapping"})
      if (j.contains(k) && !j[k].is_null()) fail("{}: {} is not supported (Gemma 2 style soft-capping)", where, k);
    c.post_norms = true;
    c.norm_offset = 1.f;
    // transformers: hidden_size**0.5 and query_pre_attn_scalar**-0.5, used as fp32 scalars.
    c.embed_scale = float(std::sqrt(double(c.n_embd)));
    c.attn_scale = float(1.0 / std::sqrt(opt<double>(j, "query_pre_attn_scalar", double(c.head_dim))));
  }
  return c;
}

}  // namespace

ModelConfig ModelConfig::from_model_file(const ModelFile& mf) {
  const bool gguf = mf.format() == "gguf";
  ModelConfig c = gguf ? from_gguf(mf) : from_hf(mf);
  validate(c, gguf ? mf.path() : mf.path() + "/config.json");
  return c;
}

std::string ModelConfig::sliding_summary() const {
  int n = 0;
  int64_t w = 0;
  float theta = 0;
  for (const auto& a : layers)
    if (a.window > 0) ++n, w = a.window, theta = a.rope_theta;
  if (n == 0) return "";
  return fmt::format(", {}/{} layers sliding window {} (rope theta {})", n, n_layer, w, theta);
}

LayerAttention ModelConfig::layer(int l) const {
  if (layers.empty()) return {0, rope_theta, true};
  return layers.at(size_t(l));
}

float ModelConfig::score_scale() const {
  return attn_scale > 0 ? attn_scale : float(1.0 / std::sqrt(double(head_dim)));
}

std::string ModelConfig::summary() const {
  return fmt::format(
      "{} ({}): {} layers, hidden {}, heads {}/{} (kv), head dim {}, ffn {}, vocab {}, context {}, "
      "rope theta {} scaling {}{}{}{}{}",
      name, arch, n_layer, n_embd, n_head, n_kv_head, head_dim, n_ff, vocab_size, context_length, rope_theta,
      rope_scaling.type, tied_embeddings ? ", tied embeddings" : "", qkv_bias ? ", qkv bias" : "",
      qk_norm ? ", qk norm" : "", sliding_summary());
}

}  // namespace longctx

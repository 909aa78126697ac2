// config.cpp: ModelConfig from GGUF metadata ("<arch>.block_count", ...) or HF config.json.
#include "model/config.h"

#include <fmt/format.h>

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
constexpr ArchName kGgufArchs[] = {{"llama", "llama", false}, {"mistral", "llama", false}, {"qwen2", "qwen2", true}};
constexpr ArchName kHfArchs[] = {{"llama", "llama", false}, {"mistral", "llama", false}, {"qwen2", "qwen2", true}};

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
  } else if (st != "none" && !st.empty()) {
    fail("{}: unsupported rope scaling type '{}' (supported: none, linear; llama3 via rope_freqs)", where, st);
  }
  // Llama-3.1 GGUFs carry the llama3 scaling as a rope_freqs.weight tensor of per-frequency
  // divisors (applied by the model on top of plain frequencies); shown as "llama3".
  if (mf.find("rope_freqs.weight")) c.rope_scaling.type = "llama3";
  c.tied_embeddings = mf.find("output.weight") == nullptr;
  return c;
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
  c.rope_theta = opt<float>(j, "rope_theta", 10000.f);
  c.tied_embeddings = opt<bool>(j, "tie_word_embeddings", false);
  c.qkv_bias = a->qkv_bias || opt<bool>(j, "attention_bias", false);
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    const json& rs = j["rope_scaling"];
    std::string type = rs.value("rope_type", rs.value("type", std::string("none")));
    if (type == "default") type = "none";
    if (type != "none" && type != "linear" && type != "llama3")
      fail("{}: unsupported rope_scaling type '{}' (supported: linear, llama3)", where, type);
    c.rope_scaling.type = type;
    c.rope_scaling.factor = opt<float>(rs, "factor", 1.f);
    c.rope_scaling.low_freq_factor = opt<float>(rs, "low_freq_factor", 1.f);
    c.rope_scaling.high_freq_factor = opt<float>(rs, "high_freq_factor", 4.f);
    c.rope_scaling.original_context = opt<int64_t>(rs, "original_max_position_embeddings", 8192);
  }
  return c;
}

}  // namespace

ModelConfig ModelConfig::from_model_file(const ModelFile& mf) {
  ModelConfig c = mf.format() == "gguf" ? from_gguf(mf) : from_hf(mf);
  validate(c, mf.path());
  return c;
}

std::string ModelConfig::summary() const {
  return fmt::format(
      "{} ({}): {} layers, hidden {}, heads {}/{} (kv), head dim {}, ffn {}, vocab {}, context {}, "
      "rope theta {} scaling {}{}{}",
      name, arch, n_layer, n_embd, n_head, n_kv_head, head_dim, n_ff, vocab_size, context_length, rope_theta,
      rope_scaling.type, tied_embeddings ? ", tied embeddings" : "", qkv_bias ? ", qkv bias" : "");
}

}  // namespace longctx

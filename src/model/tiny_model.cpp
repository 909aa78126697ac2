// tiny_model.cpp: see tiny_model.h.
#include "model/tiny_model.h"

#include "model/qk_permute.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "kernels/ref/ops.h"
#include "loader/gguf_reader.h"
#include "loader/gguf_writer.h"
#include "loader/safetensors_writer.h"
#include "tokenizer/byte_unicode.h"
#include "util/error.h"

namespace longctx {

namespace {

using nlohmann::json;

// Merged tokens after the 256 bytes; text the tests use tokenizes into a few of them.
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {" ", "t"}, {" t", "h"}, {" th", "e"}, {"i", "n"}, {"e", "r"}, {" ", "a"}};
const std::vector<std::string> kSpecials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
constexpr const char* kChatTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

struct Vocab {
  std::vector<std::string> tokens;  // mapped (byte-level) text
  std::vector<std::string> merges;  // "a b" in mapped text
  int eos = 0;
};

Vocab make_vocab() {
  Vocab v;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(tok::bytes_to_mapped(std::string(1, char(b))));
  for (const auto& [a, b] : kMerges) {
    const std::string ma = tok::bytes_to_mapped(a), mb = tok::bytes_to_mapped(b);
    v.merges.push_back(ma + " " + mb);
    v.tokens.push_back(ma + mb);
  }
  for (const auto& s : kSpecials) v.tokens.push_back(s);
  v.eos = int(v.tokens.size()) - 1;  // <|im_end|>
  return v;
}

}  // namespace

void write_tiny_model(const std::string& dir, const TinyModelSpec& s) {
  if (s.arch != "llama" && s.arch != "qwen2") fail("tiny model: unknown arch '{}'", s.arch);
  namespace fs = std::filesystem;
  fs::create_directories(fs::path(dir) / "hf");
  const Vocab voc = make_vocab();
  const int V = int(voc.tokens.size()), E = s.n_embd, D = s.n_embd / s.n_head;
  const int Q = s.n_head * D, KV = s.n_kv_head * D;
  const bool bias = s.arch == "qwen2";
  std::mt19937_64 rng(s.seed);
  std::normal_distribution<float> nd(0.f, 1.f);

  GgufWriter g;
  std::vector<SafetensorsTensor> hf;
  // Each tensor goes to GGUF (quantized if 2-D and asked) and to HF as the values GGUF decodes to,
  // so that both files hold exactly the same numbers.
  auto add = [&](const std::string& gguf_name, const std::string& hf_name, std::vector<int64_t> shape, float scale,
                 float offset = 0.f, int permute_heads = 0) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> w(static_cast<size_t>(n));
    for (auto& x : w) x = offset + scale * nd(rng);
    const DType dt = shape.size() == 2 ? s.gguf_dtype : DType::F32;
    const int64_t cols = shape.size() == 2 ? shape[1] : 1;
    std::vector<float> gw = permute_heads ? permute_qk_rows(w, permute_heads, D, cols, false) : w;
    g.add_tensor(gguf_name, shape, dt, gw);
    if (dt != DType::F32) {  // HF gets what the GGUF reader will decode: quantize, dequantize
      GgufWriter tmp;
      tmp.add_tensor("t", shape, dt, gw);
      const auto bytes = tmp.bytes();
      auto mf = open_gguf_bytes(bytes, "tiny");
      dequantize(dt, mf->get("t").data, gw.data(), n);
      w = permute_heads ? permute_qk_rows(gw, permute_heads, D, cols, true) : gw;
    }
    hf.push_back({hf_name, DType::F32, shape, w, {}});
  };

  const int perm_q = s.arch == "llama" ? s.n_head : 0, perm_k = s.arch == "llama" ? s.n_kv_head : 0;
  add("token_embd.weight", "model.embed_tokens.weight", {V, E}, 1.f);
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string gp = "blk." + std::to_string(l) + ".", hp = "model.layers." + std::to_string(l) + ".";
    const float ws = 1.f / std::sqrt(float(E)), fs_ = 1.f / std::sqrt(float(s.n_ff));
    add(gp + "attn_norm.weight", hp + "input_layernorm.weight", {E}, 0.1f, 1.f);
    add(gp + "attn_q.weight", hp + "self_attn.q_proj.weight", {Q, E}, ws, 0.f, perm_q);
    add(gp + "attn_k.weight", hp + "self_attn.k_proj.weight", {KV, E}, ws, 0.f, perm_k);
    add(gp + "attn_v.weight", hp + "self_attn.v_proj.weight", {KV, E}, ws);
    if (bias) {
      add(gp + "attn_q.bias", hp + "self_attn.q_proj.bias", {Q}, 0.1f);
      add(gp + "attn_k.bias", hp + "self_attn.k_proj.bias", {KV}, 0.1f);
      add(gp + "attn_v.bias", hp + "self_attn.v_proj.bias", {KV}, 0.1f);
    }
    add(gp + "attn_output.weight", hp + "self_attn.o_proj.weight", {E, Q}, ws);
    add(gp + "ffn_norm.weight", hp + "post_attention_layernorm.weight", {E}, 0.1f, 1.f);
    add(gp + "ffn_gate.weight", hp + "mlp.gate_proj.weight", {s.n_ff, E}, ws);
    add(gp + "ffn_up.weight", hp + "mlp.up_proj.weight", {s.n_ff, E}, ws);
    add(gp + "ffn_down.weight", hp + "mlp.down_proj.weight", {E, s.n_ff}, fs_);
  }
  add("output_norm.weight", "model.norm.weight", {E}, 0.1f, 1.f);
  if (!s.tied_embeddings) add("output.weight", "lm_head.weight", {V, E}, 1.f / std::sqrt(float(E)));

  const float theta = 10000.f;
  const float factor = 4.f, low = 1.f, high = 4.f;
  const int64_t orig_ctx = s.context_length / 4;
  // GGUF metadata, as llama.cpp's converter writes it.
  const std::string a = s.arch;
  g.add_string("general.architecture", a);
  g.add_string("general.name", "longctx tiny " + a);
  g.add_u32(a + ".block_count", uint32_t(s.n_layer));
  g.add_u32(a + ".embedding_length", uint32_t(E));
  g.add_u32(a + ".feed_forward_length", uint32_t(s.n_ff));
  g.add_u32(a + ".attention.head_count", uint32_t(s.n_head));
  g.add_u32(a + ".attention.head_count_kv", uint32_t(s.n_kv_head));
  g.add_u32(a + ".context_length", uint32_t(s.context_length));
  g.add_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  g.add_f32(a + ".rope.freq_base", theta);
  if (s.rope_scaling == "linear") {
    g.add_string(a + ".rope.scaling.type", "linear");
    g.add_f32(a + ".rope.scaling.factor", factor);
  } else if (s.rope_scaling == "llama3") {
    // llama.cpp stores llama3 scaling as per-frequency divisors.
    RopeParams rp;
    rp.head_dim = D;
    rp.theta = theta;
    std::vector<float> plain(size_t(D / 2)), scaled(size_t(D / 2)), divisors(size_t(D / 2));
    rope_inv_freq_ref(rp, nullptr, plain.data());
    rp.scaling = "llama3";
    rp.factor = factor;
    rp.low_freq_factor = low;
    rp.high_freq_factor = high;
    rp.original_context = orig_ctx;
    rope_inv_freq_ref(rp, nullptr, scaled.data());
    for (int i = 0; i < D / 2; ++i) divisors[size_t(i)] = plain[size_t(i)] / scaled[size_t(i)];
    g.add_tensor("rope_freqs.weight", {D / 2}, DType::F32, divisors);
  }
  g.add_string("tokenizer.ggml.model", "gpt2");
  g.add_string("tokenizer.ggml.pre", a == "qwen2" ? "qwen2" : "gpt2");
  g.add_string_array("tokenizer.ggml.tokens", voc.tokens);
  g.add_string_array("tokenizer.ggml.merges", voc.merges);
  std::vector<int32_t> types(voc.tokens.size(), 1);
  for (size_t i = voc.tokens.size() - kSpecials.size(); i < voc.tokens.size(); ++i) types[i] = 3;  // CONTROL
  g.add("tokenizer.ggml.token_type", GgufValue::i32s(types));
  g.add_u32("tokenizer.ggml.bos_token_id", uint32_t(V - 3));
  g.add_u32("tokenizer.ggml.eos_token_id", uint32_t(voc.eos));
  g.add_bool("tokenizer.ggml.add_bos_token", false);
  g.add_string("tokenizer.chat_template", kChatTemplate);
  g.write((fs::path(dir) / "tiny.gguf").string());

  // HF directory.
  json cfg = {{"model_type", a},
              {"architectures", {a == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
              {"hidden_size", E},
              {"intermediate_size", s.n_ff},
              {"num_hidden_layers", s.n_layer},
              {"num_attention_heads", s.n_head},
              {"num_key_value_heads", s.n_kv_head},
              {"vocab_size", V},
              {"max_position_embeddings", s.context_length},
              {"rms_norm_eps", 1e-5},
              {"rope_theta", theta},
              {"tie_word_embeddings", s.tied_embeddings},
              {"bos_token_id", V - 3},
              {"eos_token_id", voc.eos},
              {"torch_dtype", "float32"}};
  if (s.rope_scaling == "linear") cfg["rope_scaling"] = {{"rope_type", "linear"}, {"factor", factor}};
  if (s.rope_scaling == "llama3")
    cfg["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", factor}, {"low_freq_factor", low},
                           {"high_freq_factor", high}, {"original_max_position_embeddings", orig_ctx}};
  write_safetensors_dir((fs::path(dir) / "hf").string(), cfg, hf, 2);

  json vocab = json::object();
  for (size_t i = 0; i < voc.tokens.size() - kSpecials.size(); ++i) vocab[voc.tokens[i]] = int(i);
  json added = json::array();
  for (size_t i = 0; i < kSpecials.size(); ++i) {
    const int id = V - int(kSpecials.size()) + int(i);
    vocab[kSpecials[i]] = id;
    added.push_back({{"id", id}, {"content", kSpecials[i]}, {"special", true}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false}});
  }
  json tj = {{"version", "1.0"},
             {"added_tokens", added},
             {"normalizer", nullptr},
             {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
             {"post_processor", nullptr},
             {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
             {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"fuse_unk", false},
                        {"byte_fallback", false}, {"vocab", vocab}, {"merges", voc.merges}}}};
  json tc = {{"bos_token", kSpecials[1]}, {"eos_token", kSpecials[2]}, {"add_bos_token", false},
             {"chat_template", kChatTemplate}};
  auto write_json = [&](const std::string& name, const json& j) {
    std::ofstream f(fs::path(dir) / "hf" / name);
    if (!f) fail("cannot write '{}'", (fs::path(dir) / "hf" / name).string());
    f << j.dump(1);
  };
  write_json("tokenizer.json", tj);
  write_json("tokenizer_config.json", tc);
}

}  // namespace longctx

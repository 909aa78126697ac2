// config.h: model hyperparameters, read from GGUF metadata or HF config.json.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "loader/model_file.h"

namespace longctx {

// RoPE frequency scaling (HF "rope_scaling" / "rope_parameters"; GGUF "<arch>.rope.scaling.*").
struct RopeScaling {
  std::string type = "none";  // "none", "linear", "llama3", "yarn", "longrope"
  float factor = 1.f;
  float low_freq_factor = 1.f;   // llama3
  float high_freq_factor = 4.f;  // llama3
  int64_t original_context = 8192;  // llama3, yarn, longrope: original_max_position_embeddings
  float beta_fast = 32.f, beta_slow = 1.f;  // yarn: the ramp's ends, in rotations
  float mscale = 0.f, mscale_all_dim = 0.f;  // yarn: optional terms of the attention factor
  bool truncate = true;                      // yarn: round the ramp's ends to whole dims
  float attention_factor = 0.f;  // yarn, longrope: cos/sin multiplier; 0 = derived from factor
  std::vector<float> short_factor, long_factor;  // longrope: [head_dim/2] frequency divisors
};

// How one layer attends and rotates. Every architecture has one entry per layer.
struct LayerAttention {
  int64_t window = 0;        // 0: global (every earlier key); > 0: query at p sees keys (p - window, p]
  float rope_theta = 10000.f;
  bool rope_scaled = true;   // whether ModelConfig::rope_scaling applies (Gemma 3: global layers only)
};

struct ModelConfig {
  // "llama" (Llama 2/3/3.1, Mistral, SmolLM2), "qwen2", "qwen3", "gemma3" (text) or "phi3"
  std::string arch;
  std::string name;        // general.name / model id, for display
  int n_layer = 0;
  int n_embd = 0;          // hidden size
  int n_head = 0;
  int n_kv_head = 0;
  int head_dim = 0;
  int n_ff = 0;            // MLP intermediate size
  int vocab_size = 0;
  int64_t context_length = 0;  // trained context
  float rms_eps = 1e-5f;
  float rope_theta = 10000.f;
  RopeScaling rope_scaling;
  bool tied_embeddings = false;  // LM head shares the token embedding
  bool qkv_bias = false;         // Qwen2
  bool qk_norm = false;          // Qwen3, Gemma 3: RMSNorm over head_dim on Q and K before RoPE
  bool post_norms = false;       // Gemma 3: RMSNorm on the attention and MLP outputs before each residual add
  float norm_offset = 0.f;       // RMSNorm scales by (norm_offset + w): 1 for Gemma's HF weights (GGUF folds it in)
  std::string activation = "silu";  // gated MLP: "silu" or "gelu_tanh"
  float embed_scale = 1.f;       // token embeddings are multiplied by this (Gemma: sqrt(hidden))
  float attn_scale = 0.f;        // attention score scale (Gemma: 1/sqrt(query_pre_attn_scalar)); 0 = 1/sqrt(head_dim)
  std::vector<LayerAttention> layers;  // [n_layer]; empty = every layer global with rope_theta

  // Layer l's attention type (from `layers`, or global with rope_theta when it is empty).
  LayerAttention layer(int l) const;
  float score_scale() const;  // attn_scale or 1/sqrt(head_dim)

  // Parses and validates (positive sizes, n_head % n_kv_head == 0, ...); throws Error naming
  // the missing or bad field, and for an unsupported architecture lists the supported ones.
  static ModelConfig from_model_file(const ModelFile& mf);
  std::string summary() const;  // one line for `inspect` and logs
  std::string sliding_summary() const;  // ", 15/18 layers sliding window 512 (rope theta 10000)" or ""
};

}  // namespace longctx

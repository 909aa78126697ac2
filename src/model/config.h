// config.h: model hyperparameters, read from GGUF metadata or HF config.json.
#pragma once
#include <cstdint>
#include <string>

#include "loader/model_file.h"

namespace longctx {

// RoPE frequency scaling (HF "rope_scaling"; GGUF "<arch>.rope.scaling.*").
struct RopeScaling {
  std::string type = "none";  // "none", "linear", "llama3"
  float factor = 1.f;
  float low_freq_factor = 1.f;   // llama3
  float high_freq_factor = 4.f;  // llama3
  int64_t original_context = 8192;  // llama3: original_max_position_embeddings
};

struct ModelConfig {
  std::string arch;        // "llama" (Llama 2/3/3.1, Mistral, SmolLM2) or "qwen2"
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

  // Parses and validates (positive sizes, n_head % n_kv_head == 0, ...); throws Error naming
  // the missing or bad field, and for an unsupported architecture lists the supported ones.
  static ModelConfig from_model_file(const ModelFile& mf);
  std::string summary() const;  // one line for `inspect` and logs
};

}  // namespace longctx

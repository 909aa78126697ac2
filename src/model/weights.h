// weights.h: the model's weights in fp32, under canonical names, from GGUF or safetensors.
//
// Every tensor is found by its format's name, its shape checked against the config (a missing
// or mis-shaped tensor is an Error naming it), dequantized to fp32 and stored contiguously.
// GGUF files of the "llama" architecture store Q/K rows permuted for interleaved RoPE; they are
// un-permuted at load so that one rotate-half RoPE serves both formats (same logits from both).
// Phi-3's fused projections (qkv_proj, gate_up_proj) are split into the separate matrices.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "loader/model_file.h"
#include "model/config.h"
#include "model/quant_weights.h"

namespace longctx {

struct LayerWeights {
  std::vector<float> attn_norm;       // [n_embd]
  std::vector<float> wq;              // [n_head*head_dim, n_embd]
  std::vector<float> wk, wv;          // [n_kv_head*head_dim, n_embd]
  std::vector<float> wo;              // [n_embd, n_head*head_dim]
  std::vector<float> bq, bk, bv;      // [n_head*head_dim], [n_kv_head*head_dim] (qkv_bias only)
  std::vector<float> q_norm, k_norm;  // [head_dim] (qk_norm only)
  std::vector<float> attn_post_norm;  // [n_embd] on the attention output (post_norms only)
  std::vector<float> ffn_norm;        // [n_embd] before the MLP
  std::vector<float> ffn_post_norm;   // [n_embd] on the MLP output (post_norms only)
  std::vector<float> w_gate, w_up;    // [n_ff, n_embd]
  std::vector<float> w_down;          // [n_embd, n_ff]
};

// How the CPU path holds its matrices: "fp32" dequantizes them at load (exact, the reference the
// golden tests use); "quantized" keeps the file's blocks where it can (quant_weights.h) and
// drops their fp32 copies (the embedding stays fp32 for the token lookup).
enum class CpuWeights { fp32, quantized };
// "fp32" or "quantized"; throws Error naming the known values for anything else.
CpuWeights parse_cpu_weights(const std::string& name);

struct ModelWeights {
  std::vector<float> tok_embd;        // [vocab, n_embd]
  std::vector<float> out_norm;        // [n_embd]
  std::vector<float> lm_head;         // [vocab, n_embd]; empty when tied (use tok_embd)
  std::vector<float> rope_freqs;      // [head_dim/2] divisors (GGUF llama3) or empty
  std::vector<LayerWeights> layers;
  // CpuWeights::quantized: the matrices kept quantized; a matrix here has no fp32 copy above.
  std::shared_ptr<const QuantModelWeights> quant;

  const std::vector<float>& output() const { return lm_head.empty() ? tok_embd : lm_head; }
  static ModelWeights load(const ModelFile& mf, const ModelConfig& cfg, CpuWeights mode = CpuWeights::fp32);
};

}  // namespace longctx

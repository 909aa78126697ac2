// tensor_names.h: each canonical weight tensor's name in GGUF and in HF safetensors ({} = layer
// index), shared by the fp32 loader (weights.cpp) and the quantized one (quant_weights.cpp).
#pragma once

namespace longctx::tensor_names {

// Canonical tensor -> name in each format ({} = layer index).
struct TensorName {
  const char* gguf;
  const char* hf;
};
constexpr TensorName kEmbd{"token_embd.weight", "model.embed_tokens.weight"};
constexpr TensorName kOutNorm{"output_norm.weight", "model.norm.weight"};
constexpr TensorName kOutput{"output.weight", "lm_head.weight"};
constexpr TensorName kAttnNorm{"blk.{}.attn_norm.weight", "model.layers.{}.input_layernorm.weight"};
constexpr TensorName kWq{"blk.{}.attn_q.weight", "model.layers.{}.self_attn.q_proj.weight"};
constexpr TensorName kWk{"blk.{}.attn_k.weight", "model.layers.{}.self_attn.k_proj.weight"};
constexpr TensorName kWv{"blk.{}.attn_v.weight", "model.layers.{}.self_attn.v_proj.weight"};
constexpr TensorName kWo{"blk.{}.attn_output.weight", "model.layers.{}.self_attn.o_proj.weight"};
constexpr TensorName kBq{"blk.{}.attn_q.bias", "model.layers.{}.self_attn.q_proj.bias"};
constexpr TensorName kBk{"blk.{}.attn_k.bias", "model.layers.{}.self_attn.k_proj.bias"};
constexpr TensorName kBv{"blk.{}.attn_v.bias", "model.layers.{}.self_attn.v_proj.bias"};
constexpr TensorName kFfnNorm{"blk.{}.ffn_norm.weight", "model.layers.{}.post_attention_layernorm.weight"};
constexpr TensorName kQNorm{"blk.{}.attn_q_norm.weight", "model.layers.{}.self_attn.q_norm.weight"};
constexpr TensorName kKNorm{"blk.{}.attn_k_norm.weight", "model.layers.{}.self_attn.k_norm.weight"};
// Gemma 3's sandwich norms: HF's post_attention_layernorm is on the attention output there, and
// its pre-MLP norm is pre_feedforward_layernorm (GGUF keeps ffn_norm for the pre-MLP norm).
constexpr TensorName kAttnPostNorm{"blk.{}.post_attention_norm.weight", "model.layers.{}.post_attention_layernorm.weight"};
constexpr TensorName kFfnPreNorm{"blk.{}.ffn_norm.weight", "model.layers.{}.pre_feedforward_layernorm.weight"};
constexpr TensorName kFfnPostNorm{"blk.{}.post_ffw_norm.weight", "model.layers.{}.post_feedforward_layernorm.weight"};
// Phi-3's fused projections: rows [Q | K | V] and [gate | up].
constexpr TensorName kWqkv{"blk.{}.attn_qkv.weight", "model.layers.{}.self_attn.qkv_proj.weight"};
constexpr TensorName kGateUp{"blk.{}.ffn_up.weight", "model.layers.{}.mlp.gate_up_proj.weight"};
constexpr TensorName kGate{"blk.{}.ffn_gate.weight", "model.layers.{}.mlp.gate_proj.weight"};
constexpr TensorName kUp{"blk.{}.ffn_up.weight", "model.layers.{}.mlp.up_proj.weight"};
constexpr TensorName kDown{"blk.{}.ffn_down.weight", "model.layers.{}.mlp.down_proj.weight"};

}  // namespace longctx::tensor_names

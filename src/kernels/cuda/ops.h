// ops.h (cuda): the non-attention ops of the transformer forward on the GPU, as plain C++.
//
// bf16 tensors in and out, fp32 math inside, one rounding at the end (the CPU twins in
// kernels/ref/ops.h compute in fp32; the GPU tests compare with fp64 on the same bf16 inputs).
// Row-major; every pointer comes with its shape. Vectorised paths need 16-byte aligned
// pointers and row lengths that are multiples of 8 elements; the wrappers check and say so.
#pragma once
#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace longctx::cuda {

// out[t, :] = table[ids[t], :] * scale. ids (device, int32) out of [0, vocab) give a zero row.
struct EmbeddingParams {
  const void* table = nullptr;  // bf16 [vocab, dim]
  const int32_t* ids = nullptr; // int32 [n_tokens] (device)
  void* out = nullptr;          // bf16 [n_tokens, dim]
  int64_t n_tokens = 0, vocab = 0, dim = 0;
  float scale = 1.f;            // Gemma: sqrt(hidden) (ModelConfig::embed_scale)
};
void embedding(const EmbeddingParams& p, Stream s = nullptr);

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w. y may alias x.
// With residual != nullptr, first x[t] = x[t] + residual[t] is formed, written back to
// residual_out (if non-null; may alias residual) and normalised: the fused pre-norm add.
// With add_to_y, y[t] += (not =) the normalised row: Gemma's post-norm residual add
// x += rmsnorm(h) (y must not alias x then). Rows of any length that is a multiple of 8: QK-norm
// runs it over [tokens * heads, head_dim].
struct RmsNormParams {
  const void* x = nullptr;       // bf16 [n_rows, dim]
  const void* w = nullptr;       // bf16 [dim]
  void* y = nullptr;             // bf16 [n_rows, dim]
  const void* residual = nullptr;  // bf16 [n_rows, dim], optional
  void* residual_out = nullptr;    // bf16 [n_rows, dim], optional
  int64_t n_rows = 0, dim = 0;
  float eps = 1e-5f;
  bool add_to_y = false;
};
void rmsnorm(const RmsNormParams& p, Stream s = nullptr);

// Rotate-half (NeoX / HF) RoPE in place on q and (optionally) k: pairs (i, i + head_dim/2),
// angle = pos * inv_freq[i] in fp32 (as HF and the CPU twin compute it), token t at position
// pos0 + t, or positions[t] when positions (device int32) is given.
// inv_freq: device fp32 [head_dim/2] if given (e.g. with GGUF rope_freqs folded in);
// otherwise computed in-kernel from theta and the scaling below (same formula as
// kernels/ref rope_inv_freq_ref).
enum class RopeScalingType : int { none = 0, linear = 1, llama3 = 2 };
struct RopeParams {
  void* q = nullptr;  // bf16, token t head h at q + t*q_token_stride + h*head_dim
  void* k = nullptr;  // bf16, optional, same with k_token_stride
  int64_t q_token_stride = 0, k_token_stride = 0;  // elements; 0 = n_heads * head_dim (contiguous)
  int n_q_heads = 0, n_k_heads = 0, head_dim = 0;
  int64_t n_tokens = 0;
  int64_t pos0 = 0;
  const int32_t* positions = nullptr;  // device int32 [n_tokens], optional
  const float* inv_freq = nullptr;     // device fp32 [head_dim/2], optional
  float theta = 10000.f;
  RopeScalingType scaling = RopeScalingType::none;
  float factor = 1.f, low_freq_factor = 1.f, high_freq_factor = 4.f;
  int64_t original_context = 8192;
  float attn_factor = 1.f;  // cos and sin are multiplied by it (YaRN / LongRoPE: kernels/ref rope_attention_factor)
};
void rope(const RopeParams& p, Stream s = nullptr);

// out[t, j] = silu(gate[t, j]) * up[t, j] (gelu_tanh: gelu_tanh(gate) * up, Gemma's MLP, as
// kernels/ref gelu_tanh_mul_ref); row strides in elements (0 = dim), so a fused
// [gate | up] projection output works with gate = buf, up = buf + dim, strides 2*dim.
struct SwiGluParams {
  const void* gate = nullptr;  // bf16 [n_rows, dim] with gate_stride
  const void* up = nullptr;    // bf16 [n_rows, dim] with up_stride
  void* out = nullptr;         // bf16 [n_rows, dim] with out_stride (may alias gate)
  int64_t n_rows = 0, dim = 0;
  int64_t gate_stride = 0, up_stride = 0, out_stride = 0;
  bool gelu_tanh = false;
};
void swiglu(const SwiGluParams& p, Stream s = nullptr);

// y[i] = a[i] + b[i] for n bf16 elements (y may alias a or b).
void add(void* y, const void* a, const void* b, int64_t n, Stream s = nullptr);

// Fills n bf16 values with a deterministic uniform [-scale, scale) from (seed, index): random
// benchmark inputs without a host round trip.
void fill_random_bf16(void* x, int64_t n, uint64_t seed, float scale, Stream s = nullptr);

}  // namespace longctx::cuda

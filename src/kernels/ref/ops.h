// ops.h (ref): the CPU ops of the transformer forward, fp32, threaded over rows or columns.
//
// Shapes are row-major; T = tokens in the chunk. Each op has a CUDA twin in kernels/cuda.
#pragma once
#include <cstdint>

namespace longctx {

class ThreadPool;

// y[T, n_out] = x[T, n_in] * W[n_out, n_in]^T (+ bias[n_out] if non-null).
// Output columns are split across the pool; each thread runs a single-threaded BLAS GEMM.
struct MatmulParams {
  const float* x = nullptr;
  const float* w = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
  int64_t T = 0, n_in = 0, n_out = 0;
};
void matmul_ref(const MatmulParams& p, ThreadPool& pool);

// y[T, n] = x[T, n] / rms(x) * (w_offset + w[n]); rms = sqrt(mean(x^2) + eps). y may alias x.
// w_offset is 1 for Gemma's RMSNorm, whose weights are stored as (scale - 1); 0 otherwise.
void rmsnorm_ref(const float* x, const float* w, float* y, int64_t T, int64_t n, float eps, ThreadPool& pool,
                 float w_offset = 0.f);

// RoPE frequencies: inv_freq[head_dim/2], with linear, llama3, YaRN or LongRoPE scaling applied,
// and an optional per-frequency divisor (GGUF rope_freqs.weight) when `freq_factors` is non-null.
// Each scaling follows transformers' modeling_rope_utils, in its fp32 evaluation order:
//   yarn:     blend of 1/theta^(2i/d) (extrapolation) and that / factor (interpolation) by a
//             linear ramp over the dims between the correction dims of beta_fast and beta_slow
//             rotations in original_context positions;
//   longrope: 1 / (ext[i] * theta^(2i/d)), ext = the short or long factors the caller picked.
struct RopeParams {
  int head_dim = 0;
  float theta = 10000.f;
  const char* scaling = "none";  // "none", "linear", "llama3", "yarn", "longrope"
  float factor = 1.f;
  float low_freq_factor = 1.f, high_freq_factor = 4.f;  // llama3
  int64_t original_context = 8192;                      // llama3, yarn, longrope
  float beta_fast = 32.f, beta_slow = 1.f;              // yarn
  bool truncate = true;                                 // yarn: floor/ceil the ramp's ends
  float mscale = 0.f, mscale_all_dim = 0.f;             // yarn attention factor terms (0 = unset)
  float attention_factor = 0.f;                         // yarn, longrope: given (> 0) or derived
  const float* longrope_ext = nullptr;                  // longrope: [head_dim/2] short or long factors
};
void rope_inv_freq_ref(const RopeParams& p, const float* freq_factors, float* inv_freq);
// The factor cos and sin are multiplied by: attention_factor if given; yarn: 0.1 ln(factor) + 1
// (or the mscale / mscale_all_dim ratio); longrope: sqrt(1 + ln(factor) / ln(original_context));
// 1 for the other scalings and for factor <= 1.
float rope_attention_factor(const RopeParams& p);

// Rotate-half (NeoX / HF) RoPE in place: x[T, n_heads, head_dim], token t at position pos0 + t.
// Pairs are (i, i + head_dim/2) with angle pos * inv_freq[i]; cos and sin are scaled by attn_factor.
void rope_apply_ref(float* x, int64_t T, int n_heads, int head_dim, int64_t pos0, const float* inv_freq,
                    ThreadPool& pool, float attn_factor = 1.f);

// g[i] = silu(g[i]) * u[i] for n elements.
void silu_mul_ref(float* g, const float* u, int64_t n, ThreadPool& pool);

// g[i] = gelu_tanh(g[i]) * u[i] for n elements (Gemma's gated MLP; PyTorch's approximate="tanh"):
// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_tanh_mul_ref(float* g, const float* u, int64_t n, ThreadPool& pool);

// y[i] += x[i] for n elements.
void add_ref(float* y, const float* x, int64_t n);

}  // namespace longctx

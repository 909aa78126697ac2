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

// y[T, n] = x[T, n] / rms(x) * w[n]; rms = sqrt(mean(x^2) + eps). y may alias x.
void rmsnorm_ref(const float* x, const float* w, float* y, int64_t T, int64_t n, float eps, ThreadPool& pool);

// RoPE frequencies: inv_freq[head_dim/2], with linear or llama3 scaling applied, and an
// optional per-frequency divisor (GGUF rope_freqs.weight) when `freq_factors` is non-null.
struct RopeParams {
  int head_dim = 0;
  float theta = 10000.f;
  const char* scaling = "none";  // "none", "linear", "llama3"
  float factor = 1.f;
  float low_freq_factor = 1.f, high_freq_factor = 4.f;
  int64_t original_context = 8192;
};
void rope_inv_freq_ref(const RopeParams& p, const float* freq_factors, float* inv_freq);

// Rotate-half (NeoX / HF) RoPE in place: x[T, n_heads, head_dim], token t at position pos0 + t.
// Pairs are (i, i + head_dim/2) with angle pos * inv_freq[i].
void rope_apply_ref(float* x, int64_t T, int n_heads, int head_dim, int64_t pos0, const float* inv_freq,
                    ThreadPool& pool);

// g[i] = silu(g[i]) * u[i] for n elements.
void silu_mul_ref(float* g, const float* u, int64_t n, ThreadPool& pool);

// y[i] += x[i] for n elements.
void add_ref(float* y, const float* x, int64_t n);

}  // namespace longctx

// ops.cpp (ref): see ops.h.
#include "kernels/ref/ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <string_view>

#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {

namespace {
// Output columns per task: a multiple of 16 keeps BLAS panels aligned; 64 balances 2-16 threads
// for the 576..14336-wide projections without tiny GEMMs.
constexpr int64_t kMatmulColGrain = 64;
}  // namespace

void matmul_ref(const MatmulParams& p, ThreadPool& pool) {
  if (p.T <= 0 || p.n_out <= 0) return;
  // Each GEMM call packs all of x again, so for T > 1 use one column block per thread (x packed
  // `threads` times, not 4x that); GEMV (decode) has no packing and keeps the finer split.
  int64_t grain = kMatmulColGrain;
  if (p.T > 1) {
    const int64_t per_thread = (p.n_out + pool.size() - 1) / pool.size();
    grain = std::max(grain, (per_thread + 15) / 16 * 16);
  }
  pool.parallel_for(
      p.n_out,
      [&](int64_t c0, int64_t c1) {
        const int64_t nc = c1 - c0;
        if (p.T == 1) {
          cblas_sgemv(CblasRowMajor, CblasNoTrans, int(nc), int(p.n_in), 1.f, p.w + c0 * p.n_in, int(p.n_in),
                      p.x, 1, 0.f, p.y + c0, 1);
        } else {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(p.T), int(nc), int(p.n_in), 1.f, p.x,
                      int(p.n_in), p.w + c0 * p.n_in, int(p.n_in), 0.f, p.y + c0, int(p.n_out));
        }
        if (p.bias) {
          for (int64_t t = 0; t < p.T; ++t)
            for (int64_t c = c0; c < c1; ++c) p.y[t * p.n_out + c] += p.bias[c];
        }
      },
      grain);
}

void rmsnorm_ref(const float* x, const float* w, float* y, int64_t T, int64_t n, float eps, ThreadPool& pool,
                 float w_offset) {
  pool.parallel_for(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* xr = x + t * n;
      float* yr = y + t * n;
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += double(xr[i]) * xr[i];
      const float inv = float(1.0 / std::sqrt(ss / double(n) + eps));
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * (w_offset + w[i]);
    }
  });
}

namespace {

// YaRN's ramp ends: the dim whose frequency turns `rotations` times in `context` positions.
double yarn_correction_dim(double rotations, int dim, double base, double context) {
  return dim * std::log(context / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
}

// YaRN (transformers _compute_yarn_parameters, fp32 like its torch ops).
void yarn_inv_freq(const RopeParams& p, float* inv_freq) {
  const int dim = p.head_dim, half = dim / 2;
  double low = yarn_correction_dim(p.beta_fast, dim, p.theta, double(p.original_context));
  double high = yarn_correction_dim(p.beta_slow, dim, p.theta, double(p.original_context));
  if (p.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // transformers: prevents a zero-width ramp
  for (int i = 0; i < half; ++i) {
    const float pos_freq = std::pow(p.theta, float(2 * i) / float(dim));
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (p.factor * pos_freq);
    const float ramp = std::clamp((float(i) - float(low)) / float(high - low), 0.f, 1.f);
    const float extrapolation_weight = 1.f - ramp;
    inv_freq[i] = interpolation * (1.f - extrapolation_weight) + extrapolation * extrapolation_weight;
  }
}

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

}  // namespace

float rope_attention_factor(const RopeParams& p) {
  if (p.attention_factor > 0) return p.attention_factor;
  const std::string_view scaling = p.scaling;
  if (scaling == "yarn") {
    if (p.mscale != 0 && p.mscale_all_dim != 0)
      return float(yarn_mscale(p.factor, p.mscale) / yarn_mscale(p.factor, p.mscale_all_dim));
    return float(yarn_mscale(p.factor, 1.0));
  }
  if (scaling == "longrope") {
    if (p.factor <= 1.f) return 1.f;
    return float(std::sqrt(1 + std::log(double(p.factor)) / std::log(double(p.original_context))));
  }
  return 1.f;
}

void rope_inv_freq_ref(const RopeParams& p, const float* freq_factors, float* inv_freq) {
  const int half = p.head_dim / 2;
  const std::string_view scaling = p.scaling;
  if (scaling == "yarn") {
    yarn_inv_freq(p, inv_freq);
    if (freq_factors)
      for (int i = 0; i < half; ++i) inv_freq[i] /= freq_factors[i];
    return;
  }
  if (scaling == "longrope" && !p.longrope_ext) fail("longrope RoPE scaling needs its short or long factors");
  for (int i = 0; i < half; ++i) {
    // Same float32 evaluation order as HF: 1 / theta^(2i/d).
    float f = 1.0f / std::pow(p.theta, float(2 * i) / float(p.head_dim));
    if (scaling == "linear") {
      f /= p.factor;
    } else if (scaling == "llama3") {
      const double low_wavelen = double(p.original_context) / p.low_freq_factor;
      const double high_wavelen = double(p.original_context) / p.high_freq_factor;
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f = f / p.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (double(p.original_context) / wavelen - p.low_freq_factor) /
                              (p.high_freq_factor - p.low_freq_factor);
        f = float((1 - smooth) * f / p.factor + smooth * f);
      }
    } else if (scaling == "longrope") {
      f = 1.0f / (p.longrope_ext[i] * std::pow(p.theta, float(2 * i) / float(p.head_dim)));
    } else if (scaling != "none") {
      fail("unsupported RoPE scaling type '{}' (supported: none, linear, llama3, yarn, longrope)", p.scaling);
    }
    if (freq_factors) f /= freq_factors[i];
    inv_freq[i] = f;
  }
}

void rope_apply_ref(float* x, int64_t T, int n_heads, int head_dim, int64_t pos0, const float* inv_freq,
                    ThreadPool& pool, float attn_factor) {
  const int half = head_dim / 2;
  pool.parallel_for(T, [&](int64_t t0, int64_t t1) {
    std::vector<float> c(half), s(half);
    for (int64_t t = t0; t < t1; ++t) {
      const float pos = float(pos0 + t);
      for (int i = 0; i < half; ++i) {
        const float a = pos * inv_freq[i];  // fp32 product, as HF computes it
        c[i] = std::cos(a) * attn_factor;
        s[i] = std::sin(a) * attn_factor;
      }
      for (int h = 0; h < n_heads; ++h) {
        float* v = x + (t * n_heads + h) * head_dim;
        for (int i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = a * c[i] - b * s[i];
          v[i + half] = b * c[i] + a * s[i];
        }
      }
    }
  });
}

void silu_mul_ref(float* g, const float* u, int64_t n, ThreadPool& pool) {
  pool.parallel_for(
      n,
      [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) g[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
      },
      4096);
}

void gelu_tanh_mul_ref(float* g, const float* u, int64_t n, ThreadPool& pool) {
  // sqrt(2/pi) and the cubic coefficient of PyTorch's tanh approximation.
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCubic = 0.044715f;
  pool.parallel_for(
      n,
      [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          const float x = g[i];
          g[i] = 0.5f * x * (1.f + std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x))) * u[i];
        }
      },
      4096);
}

void add_ref(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace longctx

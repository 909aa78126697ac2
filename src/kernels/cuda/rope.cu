// rope.cu (cuda): rotate-half (NeoX / HF) rotary position embedding, in place, q and k at once.
// What/layout: ops.h (RopeParams); llama3 frequency scaling as in kernels/ref/ops.cpp.
// Tested in tests/cuda/test_ops.cpp.
// How: one CTA per token; thread i < head_dim/2 computes its frequency and (cos, sin) once
// and rotates pair (i, i + head_dim/2) of every q and k head of the token. The angle is the
// fp32 product pos * inv_freq (HF's and the CPU twin's choice, so GPU and CPU agree), then
// accurate sincosf (not the fast intrinsic: angles reach 1e6 rad at 1M tokens).
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"

namespace longctx::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kMaxHalf = 256;  // head_dim up to 512

__device__ float rope_inv_freq(const RopeParams& p, int i) {
  // Same evaluation order as rope_inv_freq_ref: fp32 1/theta^(2i/d), llama3 blend in double.
  float f = 1.0f / powf(p.theta, float(2 * i) / float(p.head_dim));
  if (p.scaling == RopeScalingType::linear) {
    f /= p.factor;
  } else if (p.scaling == RopeScalingType::llama3) {
    const double low_wavelen = double(p.original_context) / p.low_freq_factor;
    const double high_wavelen = double(p.original_context) / p.high_freq_factor;
    const double wavelen = 2 * 3.14159265358979323846 / f;
    if (wavelen > low_wavelen) {
      f = f / p.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth =
          (double(p.original_context) / wavelen - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
      f = float((1 - smooth) * f / p.factor + smooth * f);
    }
  }
  return f;
}

__global__ void rope_kernel(const RopeParams p) {
  const int half = p.head_dim / 2;
  const int64_t t = blockIdx.x;
  const float pos = float(p.positions ? int64_t(p.positions[t]) : p.pos0 + t);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float f = p.inv_freq ? p.inv_freq[i] : rope_inv_freq(p, i);
    float sn, cs;
    sincosf(pos * f, &sn, &cs);
    bf16* q = static_cast<bf16*>(p.q) + t * p.q_token_stride;
    for (int h = 0; h < p.n_q_heads; ++h) {
      bf16* v = q + int64_t(h) * p.head_dim;
      const float a = __bfloat162float(v[i]), b = __bfloat162float(v[i + half]);
      v[i] = __float2bfloat16_rn(a * cs - b * sn);
      v[i + half] = __float2bfloat16_rn(b * cs + a * sn);
    }
    if (p.k) {
      bf16* k = static_cast<bf16*>(p.k) + t * p.k_token_stride;
      for (int h = 0; h < p.n_k_heads; ++h) {
        bf16* v = k + int64_t(h) * p.head_dim;
        const float a = __bfloat162float(v[i]), b = __bfloat162float(v[i + half]);
        v[i] = __float2bfloat16_rn(a * cs - b * sn);
        v[i + half] = __float2bfloat16_rn(b * cs + a * sn);
      }
    }
  }
}

}  // namespace

void rope(const RopeParams& p_in, Stream s) {
  RopeParams p = p_in;
  LC_REQUIRE(p.q, "rope: null q");
  LC_REQUIRE(p.head_dim > 0 && p.head_dim % 2 == 0 && p.head_dim / 2 <= kMaxHalf,
             "rope: head_dim %d must be even and <= %d", p.head_dim, 2 * kMaxHalf);
  LC_REQUIRE(p.n_q_heads > 0 && (!p.k || p.n_k_heads > 0), "rope: head counts %d/%d", p.n_q_heads, p.n_k_heads);
  LC_REQUIRE(p.scaling != RopeScalingType::llama3 || p.high_freq_factor != p.low_freq_factor,
             "rope: llama3 scaling needs high_freq_factor != low_freq_factor");
  if (p.q_token_stride == 0) p.q_token_stride = int64_t(p.n_q_heads) * p.head_dim;
  if (p.k_token_stride == 0) p.k_token_stride = int64_t(p.n_k_heads) * p.head_dim;
  if (p.n_tokens == 0) return;
  LC_REQUIRE(p.n_tokens <= 0x7fffffff, "rope: too many tokens");
  const int threads = ((p.head_dim / 2 + 31) / 32) * 32;
  rope_kernel<<<unsigned(p.n_tokens), threads, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("rope_kernel n_tokens=%lld heads=%d/%d head_dim=%d", (long long)p.n_tokens, p.n_q_heads,
                  p.n_k_heads, p.head_dim);
}

}  // namespace longctx::cuda

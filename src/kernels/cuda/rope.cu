// rope.cu (cuda): rotate-half (NeoX / HF) rotary position embedding, in place, q and k at once.
// What/layout: ops.h (RopeParams); llama3 frequency scaling as in kernels/ref/ops.cpp.
// Tested in tests/cuda/test_ops.cpp.
// How: one CTA per token; (cos, sin) of each frequency computed once into shared memory, then
// 8-byte vector rotations of 4 pairs per thread over every q and k head of the token; the
// arithmetic (fp32 angle pos * inv_freq, accurate sincosf) is rope_rotate.cuh's, shared with
// Self-Extend's decode prep.
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rope_rotate.cuh"

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

// One CTA per token: the first head_dim/2 threads put (cos, sin) of every frequency in shared
// memory, then all threads rotate 4 consecutive pairs at a time (8-byte loads/stores) across
// the token's q and k heads.
constexpr int kRopeThreads = 128;
using rope_rotate::kPairsPerThread;

__global__ void __launch_bounds__(kRopeThreads) rope_kernel(const RopeParams p) {
  __shared__ float cs[kMaxHalf], sn[kMaxHalf];
  const int half = p.head_dim / 2;
  const int64_t t = blockIdx.x;
  const float pos = float(p.positions ? int64_t(p.positions[t]) : p.pos0 + t);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float f = p.inv_freq ? p.inv_freq[i] : rope_inv_freq(p, i);
    rope_rotate::cos_sin(pos, f, p.attn_factor, &cs[i], &sn[i]);
  }
  __syncthreads();
  const int groups = half / kPairsPerThread;  // 4-pair groups per head
  bf16* q = static_cast<bf16*>(p.q) + t * p.q_token_stride;
  bf16* k = p.k ? static_cast<bf16*>(p.k) + t * p.k_token_stride : nullptr;
  const int total = (p.n_q_heads + (k ? p.n_k_heads : 0)) * groups;
  for (int w = threadIdx.x; w < total; w += blockDim.x) {
    const int h = w / groups, i = (w % groups) * kPairsPerThread;
    bf16* v = h < p.n_q_heads ? q + int64_t(h) * p.head_dim : k + int64_t(h - p.n_q_heads) * p.head_dim;
    rope_rotate::rotate4(v, v, i, half, cs, sn);
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
  LC_REQUIRE(p.head_dim % (2 * kPairsPerThread) == 0, "rope: head_dim %d must be a multiple of %d", p.head_dim,
             2 * kPairsPerThread);
  LC_REQUIRE((reinterpret_cast<uintptr_t>(p.q) & 7) == 0 && (reinterpret_cast<uintptr_t>(p.k) & 7) == 0 &&
                 p.q_token_stride % 4 == 0 && p.k_token_stride % 4 == 0,
             "rope: q/k must be 8-byte aligned with token strides a multiple of 4 elements");
  rope_kernel<<<unsigned(p.n_tokens), kRopeThreads, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("rope_kernel n_tokens=%lld heads=%d/%d head_dim=%d", (long long)p.n_tokens, p.n_q_heads,
                  p.n_k_heads, p.head_dim);
}

}  // namespace longctx::cuda

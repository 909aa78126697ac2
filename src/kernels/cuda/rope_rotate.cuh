// rope_rotate.cuh (cuda, internal): the rotate-half RoPE arithmetic of one token, shared by
// cuda::rope (rope.cu) and Self-Extend's decode prep (self_extend.cu), so that a row rotated by
// either kernel at the same position is bit-identical (the decode step's rows then equal what
// the prefill path's cuda::rope makes of them).
// How: (cos, sin) of each frequency at the fp32 angle pos * inv_freq (HF's and the CPU twin's
// choice), accurate sincosf (angles reach 1e6 rad at 1M tokens), times the attention factor;
// then 4 consecutive pairs per call rotated with 8-byte bf16 loads and stores.
#pragma once
#include <cuda_bf16.h>

namespace longctx::cuda::rope_rotate {

constexpr int kPairsPerThread = 4;  // pairs of one rotate4 call (head_dim a multiple of 8)

// cs[i], sn[i] for the frequency f of pair i at position pos.
__device__ __forceinline__ void cos_sin(float pos, float f, float attn_factor, float* cs, float* sn) {
  float sv, cv;
  sincosf(pos * f, &sv, &cv);
  *sn = sv * attn_factor;
  *cs = cv * attn_factor;
}

// Pairs (i .. i+3, i+half .. i+half+3) of one head: src rotated into dst (dst may be src).
__device__ __forceinline__ void rotate4(const __nv_bfloat16* src, __nv_bfloat16* dst, int i, int half,
                                       const float* cs, const float* sn) {
  uint2 a_raw = *reinterpret_cast<const uint2*>(src + i);
  uint2 b_raw = *reinterpret_cast<const uint2*>(src + i + half);
  __nv_bfloat162* a2 = reinterpret_cast<__nv_bfloat162*>(&a_raw);
  __nv_bfloat162* b2 = reinterpret_cast<__nv_bfloat162*>(&b_raw);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const float2 a = __bfloat1622float2(a2[j]), b = __bfloat1622float2(b2[j]);
    const float c0 = cs[i + 2 * j], c1 = cs[i + 2 * j + 1], s0 = sn[i + 2 * j], s1 = sn[i + 2 * j + 1];
    a2[j] = __floats2bfloat162_rn(a.x * c0 - b.x * s0, a.y * c1 - b.y * s1);
    b2[j] = __floats2bfloat162_rn(b.x * c0 + a.x * s0, b.y * c1 + a.y * s1);
  }
  *reinterpret_cast<uint2*>(dst + i) = a_raw;
  *reinterpret_cast<uint2*>(dst + i + half) = b_raw;
}

}  // namespace longctx::cuda::rope_rotate

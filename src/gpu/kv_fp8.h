// kv_fp8.h: the conversions of the fp8 (e4m3) KV cache on the GPU.
//
// What: K and V of each layer stored as e4m3 with one scale each (real = stored * scale), the
// format kernels/cuda attention_decode reads (attention.h KvDtype::fp8_e4m3).
// Why: half the bytes of bf16, so Llama-3-8B's cache for 1M tokens is 64 GiB instead of 128 GiB
// and a million-token prompt fits one H200 next to the weights.
// How (gpu_transformer.h, layer-major prefill): a layer's K/V are computed in bf16 into a
// staging buffer; on the first prefill after reset() kv_amax measures max |K| and max |V| of the
// new rows and the scale is amax / kFp8Max (the largest finite e4m3), so the prompt's values use
// e4m3's whole range; kv_quantize stores the new rows (round to nearest even, saturating: a later
// value beyond the first prefill's amax is clamped to +-kFp8Max * scale, never inf/NaN);
// kv_dequantize widens cached rows back into the staging buffer when a later prefill extends
// the cache (with --attn-tiles fp8 the layer's rows are quantized before its chunks attend, so
// the sparse prefill reads them: gpu_transformer.h); kv_append_fp8 quantizes one decode step's
// K and V rows at a position read from device memory (CUDA-graph friendly, as gpu_ops.h
// kv_append).
// Tested in tests/gpu/test_gpu_kv_fp8.cpp against the host conversions of cuda_fp8.h.
#pragma once
#include <cstdint>

#include "gpu/gpu_ops.h"
#include "kernels/cuda/runtime.h"

namespace longctx::gpu {

inline constexpr float kFp8Max = 448.f;  // largest finite e4m3 value

// Scale for values whose largest magnitude is amax (1 when amax is 0 or not finite-positive).
inline float fp8_scale_for(float amax) { return amax > 0.f && amax < 3.0e38f ? amax / kFp8Max : 1.f; }

// out[0] = max(out[0], max_i |x[i]|) for bf16 x [n]; out is a device float the caller zeroes
// (the max of non-negative floats is taken on their bit patterns, so atomicMax on int works).
struct KvAmaxParams {
  const void* x = nullptr;  // bf16 [n]
  int64_t n = 0;            // a multiple of 8
  float* out = nullptr;     // device float [1]
};
void kv_amax(const KvAmaxParams& p, cuda::Stream s);

// dst = e4m3(src / scale) (quantize) or dst = bf16(src * scale) (dequantize), n elements.
struct KvConvertParams {
  const void* src = nullptr;  // quantize: bf16 [n]; dequantize: e4m3 [n]
  void* dst = nullptr;        // quantize: e4m3 [n]; dequantize: bf16 [n]
  int64_t n = 0;              // a multiple of 8
  float scale = 1.f;          // > 0
};
void kv_quantize(const KvConvertParams& p, cuda::Stream s);
void kv_dequantize(const KvConvertParams& p, cuda::Stream s);

// kv_append into e4m3 caches: k_cache/v_cache are e4m3 [capacity, row_elems]; the rows are bf16.
void kv_append_fp8(const KvAppendParams& p, float k_scale, float v_scale, cuda::Stream s);

}  // namespace longctx::gpu

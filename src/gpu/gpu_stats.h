// gpu_stats.h: what the most recent GpuTransformer used and measured, for benchmarks and logs
// (the bench API: `longctx bench model` reads these without reaching into the GPU model).
// Process-wide by design (one benchmark process, one model); written under a mutex.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace longctx::gpu {

// Memory in use by the most recent GpuTransformer (for benchmarks and logs).
struct GpuMemoryStats {
  std::string device;
  size_t weights = 0, kv = 0, arena = 0, decode_ws = 0;
  size_t stage = 0;   // fp8 cache: the layer-major prefill's bf16 K/V of one layer + residual stream
  size_t sparse = 0;  // sparse prefill: MInference index builder, or A-shape index + workspace
  size_t device_total = 0;
  size_t device_used_peak = 0;  // total - free (cudaMemGetInfo), highest seen: includes the
                                // CUDA context, cuBLASLt and anything else in this process
};
GpuMemoryStats last_gpu_memory_stats();

// Prefill attention of the most recent GpuTransformer since its last reset() (for benchmarks):
// GPU times from CUDA events around each layer's attention (read once per chunk).
struct GpuPrefillStats {
  std::string attn = "dense";  // the --attn spec
  int64_t dense_calls = 0;     // (layer, chunk) prefill attentions run dense
  int64_t sparse_calls = 0;    // ... run sparse
  double attention_s = 0;      // all prefill attention: dense kernel, or index build + sparse plan + kernel
  double index_s = 0;          // of which: MInference index builds (A-shape: 0, its index is uploaded per chunk)
  int64_t prompt_estimates = 0;  // MInference, layer-major: prompt-wide VS estimates (one per sparse layer)
  int64_t index_ranges = 0;    // ranges and columns of all sparse indices built (work indicator)
  int64_t index_cols = 0;
  size_t sparse_bytes = 0;     // device bytes of the sparse prefill (builder, or A-shape index)
};
GpuPrefillStats last_gpu_prefill_stats();

}  // namespace longctx::gpu

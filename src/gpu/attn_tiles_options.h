// attn_tiles_options.h: the option-level rules of --attn-tiles fp8 (GpuOptions::attn_tiles), host
// only and header only, so that the engine can refuse a bad combination before anything loads,
// in a CPU-only build too; the GPU model checks the same rules again when it is built
// (gpu::attn_tiles_problem, gpu_transformer.h, adds the method's side).
// Why: fp8 tiles are the fp8 cache's e4m3 rows read in place by the sparse prefill kernels, so
// they need that cache, and all of it on the GPU (KV offload keeps host layers' rows off it).
#pragma once
#include <string>

namespace longctx::gpu {

// "" when fp8 tiles can apply with this cache and offload setting; else the refusal, naming the way out.
inline std::string attn_tiles_cache_problem(bool fp8_cache, bool kv_offload) {
  if (!fp8_cache) return "--attn-tiles fp8 reads the e4m3 rows of the fp8 KV cache: add --kv-cache fp8";
  if (kv_offload) return "--attn-tiles fp8 does not run with --kv-offload (host layers' rows are not on the GPU): drop one";
  return "";
}

}  // namespace longctx::gpu

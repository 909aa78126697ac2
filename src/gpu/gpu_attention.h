// gpu_attention.h: the --attn method on the GPU: which prefill (layer, chunk) runs dense
// attention and which runs sparse attention, with which index.
//
// What: the --attn spec parsed for the GPU model. Dense everywhere ("dense"); MInference
// ("minference=CONFIG.json[:dense_below=N][:dense_layers=N][:ratio=R]"): per (layer, query head)
// patterns from a published-format config, dense for the first dense_layers layers and for
// chunks whose key count n_kv = q_pos0 + n_q is below dense_below, else the GPU index builder
// (kernels/cuda/minference_index.h) + cuda::sparse_attention; A-shape ("a_shape[=SINK,WINDOW]"):
// one static index shared by all heads, made on the host per chunk by the CPU builder
// (sparse/a_shape_index.h) and uploaded. Decode (one query) is always dense, as on the CPU.
// Why: the same spec means the same attention on both devices, so GPU logits can be checked
// against the CPU methods (src/sparse); the spec is parsed and the config loaded and validated
// by the CPU code (parse_minference_options, MInferenceConfig), never re-implemented here.
// Sparse kernels: head_dim 128 runs the Hopper kernel (kernels/cuda/sparse_attention.h), head_dim
// 64 the generic mma.sync kernel (sparse_attention_generic.h), same index format and semantics.
// Budgets: VS (k_v, k_s) scaled by ratio, exactly as sparse/minference_index.cpp does; block-sparse
// and A-shape budgets as configured.
//   GpuAttention a = parse_gpu_attention("minference=cfg.json:dense_below=4096", model_cfg);
//   if (a.sparse_at(layer, n_kv)) ...
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/minference_index.h"
#include "model/config.h"

namespace longctx::gpu {

enum class GpuAttnKind { Dense, MInference, AShape };

struct GpuAttention {
  GpuAttnKind kind = GpuAttnKind::Dense;
  std::string spec = "dense";  // as given (for messages and logs)
  int64_t dense_below = 0;     // MInference: dense while n_kv < dense_below
  int dense_layers = 0;        // MInference: the first dense_layers layers stay dense
  int64_t sink = 0, window = 0;  // A-shape
  std::vector<std::vector<cuda::GpuHeadPattern>> layers;  // MInference: [n_layer][n_head]

  bool dense() const { return kind == GpuAttnKind::Dense; }
  // Whether a prefill chunk of layer `layer` with n_kv keys (n_q > 1 queries) runs sparse.
  bool sparse_at(int layer, int64_t n_kv) const;
  // Whether any prefill chunk of a model with n_layer layers and a cache of `capacity` tokens
  // runs sparse (if not, no sparse buffers are allocated).
  bool ever_sparse(int n_layer, int64_t capacity) const;
  // Whether a sparse layer has a vertical-slash head: MInference then estimates those heads' lines
  // once per prompt (the prefill runs layer-major, gpu_transformer.h).
  bool prompt_wide_vs(int n_layer) const;
};

// Parses spec for model c. Errors are the CPU method's (unknown method, bad options, missing or
// malformed config, config made for another model), thrown as Error.
GpuAttention parse_gpu_attention(const std::string& spec, const ModelConfig& c);

// "" when the GPU model can run `a` on model c; else why not (e.g. the sparse kernel's head_dim).
std::string attention_problem(const GpuAttention& a, const ModelConfig& c);

// The MInference index builder's shape for chunks of `chunk` queries and a cache of `capacity`.
cuda::MinferenceBuilderShape builder_shape(const ModelConfig& c, int64_t chunk, int64_t capacity);

// A-shape: the shared index's device buffers for chunks of up to `chunk` queries, and the sparse
// kernel's workspace for it (offsets into one block of `total` bytes).
struct AShapeLayout {
  int64_t max_blocks = 0;   // query blocks of a full chunk
  size_t range_ptr = 0;     // int64 [max_blocks + 1]
  size_t ranges = 0;        // int32 pairs [2 * max_blocks]
  size_t col_ptr = 0;       // int64 [max_blocks + 1] (all 0: A-shape has no columns)
  size_t workspace = 0;     // sparse_attention workspace
  size_t workspace_bytes = 0;
  size_t total = 0;
};
AShapeLayout a_shape_layout(int64_t chunk);

// MInference: an upper bound of the builder's memory that depends on budgets and data (selected
// lines, the index's ranges and columns, the sparse kernel's workspace: allocated on demand by
// build(), growing by 1.5x steps), from the config's budgets with no range merging.
size_t minference_index_bound(const GpuAttention& a, const ModelConfig& c, int64_t chunk, int64_t capacity);

// Device bytes the method needs beyond dense attention for chunks of `chunk` queries against a
// cache of `capacity` tokens (MInference: the builder's fixed buffers, device_bytes(), plus
// minference_index_bound(); A-shape: its index and workspace; 0 for dense). Part of the memory
// plan (memory_plan.h kv_fit_problem): checked before the KV cache is allocated.
size_t sparse_prefill_bytes(const GpuAttention& a, const ModelConfig& c, int64_t chunk, int64_t capacity);

}  // namespace longctx::gpu

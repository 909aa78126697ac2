// minference_index.h (cuda): MInference's online index builders on the GPU (the twin of
// methods/minference/minference_index.h), writing the DeviceSparseIndex that sparse_attention() consumes.
//
// What: for one layer and one prefill chunk (n_q queries at positions q_pos0.., against the
// n_kv = q_pos0 + n_q cached keys), every query head's index by its pattern:
//   vertical-slash (k_v, k_s): the chunk's last 64 queries against all visible keys (causal
//     within the trailing 64x64 square), row softmax in fp32, column sums (vertical scores) and
//     diagonal sums (slash scores, offset o = q - k); the first 30 columns and the nearest 100
//     diagonals forced; budgets max(k_v,30)/max(k_s,50) clamped to the keys; top-k of each;
//     then Algorithm 4: per 64-query block, slash ranges merged + vertical columns outside them.
//   block-sparse (k_b): 64-row mean-pooled Q and 64-key mean-pooled K (absolute key blocks),
//     pooled scores, top-k_b causal key blocks per query block, diagonal block(s) forced.
//   A-shape (sink, window): static ranges.
// Semantics, tie-breaks and clamping are exactly those of the CPU builders in src/sparse
// (vs_estimate.h, vs_convert.h, block_sparse_index.h, a_shape_index.h); tests compare the GPU
// index with the CPU one on the same (bf16-rounded) inputs.
// Why: at 128K+ keys the index must cost <= 10% of the sparse attention it feeds, so it is
// built where the Q/K already are, with no host round trip of scores.
// How: minference_index.cu drives the stages (minference_kernels.cuh lists them: VS estimate,
// radix top-k, BS pooling + tensor-core scores, CSR count/scan/fill). A builder object owns all
// device memory. Everything whose size follows from the shape (scores, pooled Q/K, scratch, CSR
// pointers) is allocated once by the constructor for the largest chunk; what depends on the
// budgets and the data (selected lines/blocks, the index's ranges and columns, the sparse
// kernel's workspace) is sized exactly by each build() and grown geometrically when a build needs
// more than any build before (so a prefill reallocates at most a few times, as n_kv grows, and
// never once the largest chunk has been seen). build() synchronises its stream once (to read the
// index's total sizes for n_ranges/n_cols).
//   MinferenceIndexBuilder b({.n_head=32, .n_kv_head=8, .max_q=chunk, .max_kv=capacity});
//   DeviceSparseIndex idx = b.build(params, stream);   // valid until the next build()
//   sparse.index = idx; sparse.workspace = b.attention_workspace(); ... sparse_attention(sparse, s);
// head_dim 64, 128 and 256 (Gemma 3's global layers) are supported by the builders and by
// sparse_attention().
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda/runtime.h"
#include "kernels/cuda/sparse_attention.h"

namespace longctx::cuda {

enum class GpuPatternKind : int32_t { VerticalSlash = 0, BlockSparse = 1, AShape = 2 };

// One query head's pattern, budgets already scaled by the method's ratio.
struct GpuHeadPattern {
  GpuPatternKind kind = GpuPatternKind::VerticalSlash;
  int64_t vertical = 0;  // VS: k_v; BS: k_b; A-shape: sink
  int64_t slash = 0;     // VS: k_s; A-shape: window; BS: unused
};

struct MinferenceBuilderShape {
  int n_head = 0;
  int n_kv_head = 0;
  int head_dim = 128;
  int64_t max_q = 0;   // largest chunk (queries) a build() will see
  int64_t max_kv = 0;  // largest n_kv a build() will see
  // Optional: bytes of the block-sparse score scratch (one "wave" of rows); 0 = 256 MiB (fewer,
  // larger waves are faster; minference_index.cu has the measured trade). Tests shrink it to
  // force several waves.
  int64_t bs_wave_bytes = 0;
  // Test hook: block-sparse rows are selected straight from the scratch (global memory) instead
  // of being staged in shared memory (the path rows longer than 16K candidates, n_kv > 1M, take).
  bool bs_rows_in_global = false;
};

// What build() selected for one query head (tests and diagnostics; copied from the device).
struct GpuHeadSelection {
  GpuPatternKind kind = GpuPatternKind::VerticalSlash;
  std::vector<int32_t> vertical;   // VS: selected key columns, ascending (forced sinks included)
  std::vector<int32_t> slash;      // VS: selected diagonal offsets q - k, ascending
  std::vector<int64_t> block_ptr;  // BS: [n_qblk + 1] offsets into blocks
  std::vector<int32_t> blocks;     // BS: selected key blocks of each query block, ascending
  // VS, with selection(h, true) after a build without block-sparse heads (they reuse the
  // memory): the estimate's scores (column / diagonal sums, forced lines +inf), [n_keys] each.
  std::vector<float> vertical_score, slash_score;
};

// Device time of the stages of the last build() (when profiling is on), in milliseconds.
struct GpuIndexProfile {
  float vs_ms = 0.f;    // vertical-slash estimate + line selection
  float bs_ms = 0.f;    // block-sparse pooling, scores, selection
  float csr_ms = 0.f;   // counting, scan, host read of the totals, fill
  float total_ms = 0.f;
  // Inside bs_ms: pooling, and the score and select kernels summed over the scratch waves.
  float bs_pool_ms = 0.f, bs_score_ms = 0.f, bs_select_ms = 0.f;
  int bs_waves = 0;
};

struct MinferenceIndexParams {
  const void* q = nullptr;  // bf16 [n_q, n_head, head_dim] (after RoPE)
  const void* k = nullptr;  // bf16 [n_kv, n_kv_head, head_dim] (after RoPE)
  int64_t n_q = 0;
  int64_t n_kv = 0;         // keys visible to the chunk = q_pos0 + n_q
  int64_t q_pos0 = 0;
  float scale = 0.f;        // 0 = 1/sqrt(head_dim)
  std::vector<GpuHeadPattern> heads;  // [n_head]
  // Vertical-slash heads keep the lines of the last estimate_vs() (or full build()) instead of
  // estimating from this chunk's last queries; only Algorithm 4 runs for this chunk's blocks.
  // The heads must be those of that estimate, and n_kv at most its key count.
  bool reuse_vs_lines = false;
};

class MinferenceIndexBuilder {
 public:
  // Allocates the shape-determined buffers (see "How" above; the index itself and the sparse
  // kernel's workspace are grown by build()). Throws Error naming the bytes needed vs free when
  // they do not fit, or when the GPU is not Hopper or head_dim is not 64/128/256.
  explicit MinferenceIndexBuilder(const MinferenceBuilderShape& shape);
  ~MinferenceIndexBuilder();
  MinferenceIndexBuilder(const MinferenceIndexBuilder&) = delete;
  MinferenceIndexBuilder& operator=(const MinferenceIndexBuilder&) = delete;

  // Device bytes the constructor allocates for this shape (for memory plans, before constructing
  // one): 738 MB for 32/8 heads, d=128, 1M keys (371 MB at 128K; VS scores and the BS data share
  // one region). NOT included: the budget/data-dependent part grown by build(), i.e. the index
  // (8 bytes per range + 4 per column) twice (ranges/columns + the sparse kernel's workspace
  // copy) plus the selected lines (4 bytes x (k_v + 3 k_s) per VS head) and blocks (4 bytes x
  // n_qblk x min(nkb, max(k_b, 2)) per BS head). Measured at 1M keys: BS k_b=100 index 0.2-0.4
  // GB, VS (Llama-3 mix) 2.1 GB (bench/results/minference-index-*.json).
  static size_t device_bytes(const MinferenceBuilderShape& shape);

  // Builds the index of all n_head heads on stream s. The returned index (device pointers into
  // the builder, host-side n_ranges/n_cols filled) stays valid until the next build(). Throws
  // Error naming the problem on shapes outside the builder's shape or bad patterns.
  DeviceSparseIndex build(const MinferenceIndexParams& p, Stream s = nullptr);

  // The vertical-slash estimate and line selection alone (no index), for build()s of later chunks
  // with reuse_vs_lines. MInference's reference estimates once per prompt, from its last 64
  // queries against all its keys, and applies those lines to every query block: a layer-major
  // prefill that has every key of the layer before its first chunk's attention does the same by
  // calling estimate_vs({q = the prompt's last 64 query rows, n_q = 64, q_pos0 = n_kv - 64,
  // n_kv = all keys}) and then build(chunk, reuse_vs_lines = true) per chunk. Block-sparse and
  // A-shape heads are skipped here (they depend on the chunk's own queries anyway).
  void estimate_vs(const MinferenceIndexParams& p, Stream s = nullptr);

  // Workspace for sparse_attention() with the index of the last build().
  void* attention_workspace() const;
  size_t attention_workspace_bytes() const;

  // Copies what the last build() selected for query head h (synchronises the build's stream);
  // with_scores also copies a VS head's scores (throws if the build had block-sparse heads).
  GpuHeadSelection selection(int h, bool with_scores = false) const;
  // With profiling on, build() records CUDA events around its stages; last_profile() reads them.
  void set_profiling(bool on);
  GpuIndexProfile last_profile() const;

 private:
  enum class Mode { Full, EstimateVs, ReuseVs };
  DeviceSparseIndex run(const MinferenceIndexParams& p, Stream s, Mode mode);
  struct Impl;
  Impl* impl_ = nullptr;
};

}  // namespace longctx::cuda

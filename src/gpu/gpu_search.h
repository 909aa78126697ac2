// gpu_search.h: step 4 of the MInference pattern search (methods/minference/pattern_search.h) on the GPU.
//
// What: GpuScorer, a CandidateScorer that computes a layer's dense output and every candidate's
// sparse output with the engine's GPU kernels and returns each head's relative L2 error.
// Why: the dense and sparse reference attention over the whole sample are O(S^2) per layer and
// candidate; on the CPU they make the search impractical beyond a few K tokens for large models.
// How, per layer: begin_layer uploads Q, K, V (host fp32 -> bf16 [S, heads, head_dim]) and runs
// cuda::attention_prefill (dense, causal) into y; per candidate, errors() flattens the CPU
// SparseIndex (built by the same build_head_index the CPU search uses, so candidates are
// identical) to the CSR cuda::DeviceSparseIndex (one index head per query head), runs
// cuda::sparse_attention into y_c and cuda::head_error_sums(y_c, y), and turns the sums into
// errors with rel_l2_error (kernels/ref/head_error.h, as the CPU scorer). Inputs and outputs are
// bf16 (fp32 accumulation), so errors differ from the CPU's fp32 ones by bf16 rounding:
// tests/gpu/test_gpu_search.cpp states the tolerance. head_dim 64, 128 or 256 (sparse_attention
// picks the Hopper kernel for 128, the generic one for 64 and 256: Gemma 3's global layers;
// attention_prefill and head_error_sums take all three).
// Memory: device buffers grow to the largest layer / index seen and are kept (no allocation per
// candidate once warm); before growing, the bytes needed are checked against the free memory
// and a clear Error says both (use a shorter sample or the CPU).
//   gpu::GpuScorer scorer(global_pool());
//   SearchOptions opt; opt.scorer = &scorer;  search_patterns(model, sample, opt, progress);
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "kernels/cuda/runtime.h"
#include "methods/minference/pattern_search.h"

namespace longctx::gpu {

class GpuScorer final : public CandidateScorer {
 public:
  // pool: host threads for the fp32 -> bf16 conversion of each layer's Q/K/V. Throws Error
  // (the reason) when there is no usable GPU.
  explicit GpuScorer(ThreadPool& pool);
  ~GpuScorer() override;
  GpuScorer(const GpuScorer&) = delete;
  GpuScorer& operator=(const GpuScorer&) = delete;

  const char* device() const override { return "cuda"; }
  void begin_layer(const AttnParams& p) override;
  std::vector<double> errors(const SparseIndex& idx) override;
  size_t device_bytes() const;  // held now (logs, tests)

 private:
  struct Buffer {
    void* p = nullptr;
    size_t bytes = 0;
  };
  // Grows each buffer to its size in `need` (same order as bufs): checks the total growth
  // against the free memory first (Error: what for, bytes needed vs free).
  void grow(std::initializer_list<std::pair<Buffer*, size_t>> need, const char* what);
  void upload_bf16(Buffer& dst, const float* src, size_t n);

  ThreadPool& pool_;
  cuda::Stream stream_ = nullptr;
  AttnParams p_;  // the layer's shape (S = n_q = n_kv, heads, head_dim, scale)
  bool layer_ready_ = false;
  // bf16 q [S, n_head, d], k and v [S, n_kv_head, d], y and yc [S, n_head, d] (dense, candidate).
  Buffer q_, k_, v_, y_, yc_;
  Buffer sums_, sums_ws_;                         // fp64 [n_head, 2] and head_error_sums' workspace
  Buffer range_ptr_, ranges_, col_ptr_, cols_;    // the candidate's CSR index (cuda::DeviceSparseIndex)
  Buffer attn_ws_;                                // sparse_attention's workspace
  std::vector<uint16_t> staging_;                 // host bf16 of one upload
  std::vector<int64_t> h_range_ptr_, h_col_ptr_;  // host CSR (kept until the copies are done)
  std::vector<int32_t> h_ranges_, h_cols_;
};

}  // namespace longctx::gpu

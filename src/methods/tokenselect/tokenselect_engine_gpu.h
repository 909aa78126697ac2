// tokenselect_engine_gpu.h: TokenSelect in the GPU model (`--device cuda --attn tokenselect`): its
// GpuMethod (methods/gpu_method.h), a pre-RoPE method that runs every attention step of the model
// through TokenSelectGpuStep (tokenselect_gpu.h). The GPU twin of TokenSelectMethod::plan +
// attend_compacted_ref on the CPU; tested against it by tests/gpu/test_gpu_tokenselect.cpp.
//
// What, per attention step of a layer (GpuAttendStep: un-rotated q, the layer's un-rotated keys):
//   prefill: sub-chunks of t.chunk rows, each one TokenSelectGpuStep::step: a selection with the
//            sub-chunk's mean query when its context exceeds the budget, then dense attention
//            over the budget's keys re-numbered 0..L-1 (every key at its position when it fits);
//   decode:  the selection cache (paper Alg. 1) per layer: the step's selection query, its cosine
//            to the query of the layer's last selection (cuda::cosine); >= theta reuses that
//            selection's k positions (with the initial keys and the new local window), else the
//            step selects again and keeps its query and positions. theta > 1 never reuses (no
//            cosine is computed), the CPU's "cache disabled".
// The cache runs on the device: the cosine kernel writes the hit flag (cuda::cosine with .hit),
// paged_dot, soft_vote and top_k_select return at once when it is set, and cuda::cache_update
// then restores the cached positions (hit) or stores the new selection (miss) and counts it; no
// host sync, no host branch. The step's counts (paged_dot's n_slot, soft_vote's and
// top_k_select's M, budget_key_ranges' n_kv) are read from GpuAttendStep::n_kv_dev and launched
// for n_kv_bound, the rest of a selecting step has fixed sizes (the budget's keys), so decode
// is graph-replayable (decode_graph_safe()) for lengths past the budget; a graph tile that
// reaches down to the budget decodes eagerly (decode_graph_min_kv()). Eager and replayed steps
// launch the same grids (both use the bound), so their results are bit-identical.
// Memory (device_bytes): TokenSelectGpuStep's buffers for capacity keys and min(chunk, t.chunk)
// rows, the identity slot table int32 [capacity] (the model's sequence is contiguous from row 0
// of the layer's view), and per layer the cache: int32 [k] positions + fp32 [n_head * head_dim].
// Not on the GPU (make_tokenselect_gpu gives nullptr: the registry says "not implemented on the
// GPU; use --device cpu"): keys=rotated, vote=hard|naive. The model refuses --synthetic-qk with
// it (gpu_transformer.cpp). Sliding-window layers (Gemma 3's local layers) never reach it: the
// model keeps their keys post-RoPE and runs its dense window kernels (GpuTransformer::method_layer),
// so the per-layer cache of those layers stays empty.
// The fp8 KV cache (--kv-cache fp8): a prefill attends the model's staged bf16 rows; a decode
// step gets the e4m3 cache (GpuAttendStep::kv_fp8): paged_dot scores the e4m3 keys, compact_kv
// widens the budget's rows to bf16 (stored * scale), the attention runs on them as with bf16.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "methods/gpu_method.h"
#include "methods/tokenselect/tokenselect_gpu.h"
#include "methods/tokenselect/tokenselect_method.h"

namespace longctx {

class TokenSelectGpu final : public GpuMethod {
 public:
  TokenSelectGpu(const TokenSelectParams& t, const MethodContext& ctx) : t_(t), ctx_(ctx) {}

  size_t device_bytes(const GpuShape& shape) const override;
  void allocate(const GpuShape& shape, cuda::Stream s) override;
  void release() override;
  GpuIndex build_prefill(const GpuPrefillStep& step, cuda::Stream s) override;  // internal error: attend() runs
  bool decodes() const override { return true; }
  bool attends() const override { return true; }
  void attend(const GpuAttendStep& step, cuda::Stream s) override;
  bool decode_graph_safe() const override { return true; }  // past the budget: see the header comment
  int64_t decode_graph_min_kv() const override { return t_.budget(); }
  // The selection cache is per sequence: the model decodes one sequence at a time and calls
  // start_sequence, which forgets every layer's selection.
  bool keeps_sequence_state() const override { return true; }
  void start_sequence(cuda::Stream s) override;

  // Decode selections reused / made since start_sequence (device counters; tests, statistics).
  int64_t hits(cuda::Stream s) const { return count(0, s); }
  int64_t misses(cuda::Stream s) const { return count(1, s); }
  // The k positions of layer l's last decode selection (host copy; empty before one): tests.
  std::vector<int32_t> selection(int l, cuda::Stream s) const;
  // The soft vote [M] of the last selection made (any layer, prefill or decode; host copy): tests.
  std::vector<float> last_vote(int64_t M, cuda::Stream s) const;

 private:
  TokenSelectGpuShape step_shape(const GpuShape& shape) const;
  void decode_select(const GpuAttendStep& step, const TokenSelectGpuInput& in, cuda::Stream s);
  int64_t count(int which, cuda::Stream s) const;

  TokenSelectParams t_;
  MethodContext ctx_;
  std::unique_ptr<TokenSelectGpuStep> step_;
  std::unique_ptr<cuda::DeviceArena> arena_;  // the slot table, the per-layer cache, the cosine
  int32_t* slots_ = nullptr;                  // [capacity]: position p -> row p
  int32_t* cache_keys_ = nullptr;             // [n_layer, k] selected positions of the last selection
  float* cache_q_ = nullptr;                  // [n_layer, n_head * head_dim] its selection query
  float* cos_ = nullptr;                      // [1]
  int32_t* hit_ = nullptr;                    // [1] this step's cache decision (the selection's skip flag)
  int32_t* has_ = nullptr;                    // [n_layer] a decode selection made since start_sequence
  int64_t* counts_ = nullptr;                 // [2] hits, misses since start_sequence
  int64_t capacity_ = 0;
};

// The GPU side of m, or nullptr for the variants that run on the CPU only (see above).
std::unique_ptr<GpuMethod> make_tokenselect_gpu(const TokenSelectMethod& m, const MethodContext& ctx);

}  // namespace longctx

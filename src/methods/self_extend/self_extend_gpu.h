// self_extend_gpu.h: Self-Extend in the GPU model (`--device cuda --attn dense=self_extend=G:W`):
// the GPU twin of attend_self_extend_ref (self_extend_attention.h; positions (SE1)-(SE4):
// self_extend.h). Tested by tests/gpu/test_gpu_self_extend.cpp (fp64 oracle from the definition,
// and the GPU model against the CPU engine's Self-Extend).
//
// What: a pre-RoPE GpuMethod (gpu_method.h: attends()): the model caches K un-rotated and leaves
// Q un-rotated, and every attention step of every layer comes here. Per step (n_q rows at
// q_pos0 = n_kv - n_q against keys 0..n_kv-1):
//   near  q and keys rotated at their own positions, the dense kernel with sliding window W
//         (row q sees keys (q - W, q]: (SE1));
//   far   q rotated at floor(q / G) + W - floor(W / G), keys at floor(k / G) (SE2), the dense
//         kernel causal over keys [0, n_kv - W) with the rows' mask positions moved back by W
//         (row q sees keys <= q - W); only rows q >= W have far keys;
//   merge cuda::self_extend_merge joins the two (o, lse) per row: one softmax (SE3).
// Decode (n_q = 1) is the same with cuda::attention_decode (window W; far: n_kv - W keys), with
// every length-dependent part read on the device from GpuAttendStep::n_kv_dev, so the model
// replays the step from a CUDA graph (decode_graph_safe()): cuda::self_extend_decode_prep
// rotates the new key row into both copies and the query at both positions and writes the near
// and far lengths, which the two attention_decode calls take as kv_lens (their split plans sized
// by n_kv_bound); the far part with no keys yet (pos < W) gives LSE = -inf and the merge keeps
// the near part, no host branch. Eager and replayed decode steps launch the same kernels with the
// same plans, so their outputs are bit-identical.
// Why this layout: the keys are rotated once per regime from their exact pre-RoPE values (one
// bf16 rounding, as plain RoPE), the model's pre-RoPE path needs no change, and both parts are
// the dense kernels (FA2 / Hopper prefill, flash-decoding), so the step costs dense attention
// plus rotating the step's new keys.
// Rotated keys per layer: both regimes' rotations of the layer's keys are kept (own and grouped,
// [capacity, n_kv_head, head_dim] each) and a step rotates only the rows its chunk wrote: rows
// below q_pos0 were rotated by an earlier step of the same sequence (the model writes a chunk's
// rows, then attends them; start_sequence forgets everything, and a step on other key memory or
// at a position below what was rotated re-rotates from there).
// What the host tracks under graph replay: a replayed decode step never reaches the host, so
// rotated_ (a lower bound: rows below it are rotated) lags behind; decode_chain_ says the layer's
// last step seen was a decode step on the same key memory, and then every row below the current
// pos was rotated by the decode steps since (each, eager or replayed, rotates its own row pos on
// the device: the model decodes one row at a time). Otherwise a decode step first rotates the
// rows it has not seen with host lengths (re-rotating a row is idempotent: same input, same bits).
// Memory (device_bytes): 2 x n_layer x capacity x n_kv_head x head_dim bf16 (the rotated keys,
// twice the model's K cache), the chunk's two rotated queries and far output (bf16
// [chunk, n_head, head_dim]), two LSEs fp32 [n_head, chunk], the grouped positions int32
// [capacity] x 2, a decode step's two lengths int32 [2], and one decode workspace for capacity keys.
// Sliding-window layers (Gemma 3's local layers) never come here: the model keeps their keys
// post-RoPE and runs its dense window kernels (GpuTransformer::method_layer), the CPU's rule.
// Shared with HiP + Self-Extend (hip_self_extend_gpu.h, the same rotations and merge around two
// sparse attentions): rotate_step, keys_own/keys_grouped, rotated_queries, the far part's
// buffers, merge and attend_dense are public for it.
// Not on the GPU (the registry refuses, "use --device cpu"): Self-Extend with a sparse method
// other than HiP; --synthetic-qk (the model's pre-RoPE check); the fp8 KV cache's decode
// (decode_reads_fp8 false: the kernels read bf16 keys).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "methods/gpu_method.h"
#include "methods/self_extend/self_extend.h"

namespace longctx {

class SelfExtendGpu final : public GpuMethod {
 public:
  SelfExtendGpu(const SelfExtendParams& se, const MethodContext& ctx) : se_(se), ctx_(ctx) {}

  size_t device_bytes(const GpuShape& shape) const override;
  void allocate(const GpuShape& shape, cuda::Stream s) override;
  void release() override;
  GpuIndex build_prefill(const GpuPrefillStep& step, cuda::Stream s) override;  // internal error: attend() runs
  bool decodes() const override { return true; }
  bool decode_reads_fp8() const override { return false; }
  bool attends() const override { return true; }
  void attend(const GpuAttendStep& step, cuda::Stream s) override;
  bool decode_graph_safe() const override { return true; }  // device lengths: see the header comment
  bool keeps_sequence_state() const override { return true; }  // the rotated keys belong to one sequence
  void start_sequence(cuda::Stream s) override;

  const SelfExtendParams& params() const { return se_; }

  // The pieces of a step (attend() = rotate_step + attend_dense). rotate_step checks the step and
  // rotates the keys it added into both copies; every step of a layer starts with it. A decode
  // step (n_q = 1) also rotates its query (decode_queries) and writes its near / far lengths on
  // the device (cuda::self_extend_decode_prep), from step.n_kv_dev when given (else step.n_kv).
  void rotate_step(const GpuAttendStep& step, cuda::Stream s);
  // Dense Self-Extend of a step rotate_step prepared (prefill, or decode with n_q = 1).
  void attend_dense(const GpuAttendStep& step, cuda::Stream s);
  // Layer l's rotated keys, bf16 [capacity, n_kv_head, head_dim]: own positions (SE1) / grouped (SE2).
  const void* keys_own(int layer) const;
  const void* keys_grouped(int layer) const;
  // The step's queries (rows at n_kv - n_q ..) rotated at their own or grouped positions, bf16
  // [n_q, n_head, head_dim] in this object's buffers (valid until the next call of the same kind).
  const void* rotated_queries(const GpuAttendStep& step, bool grouped, cuda::Stream s);
  // A decode step's query rotated by rotate_step at its own / grouped position, bf16 [n_head, head_dim].
  const void* decode_queries(bool grouped) const { return grouped ? q_grp_ : q_own_; }
  // The far part's output bf16 [chunk, n_head, head_dim] and the two parts' LSEs fp32 [n_head, chunk].
  void* far_out() const { return o_far_; }
  float* lse_near() const { return lse_near_; }
  float* lse_far() const { return lse_far_; }
  // (SE3): step.o (the near part, LSE lse_near) merged with the far part (far_out / lse_far, rows
  // far_row0.. of the step, packed from row 0) into one softmax.
  void merge(const GpuAttendStep& step, int64_t far_row0, cuda::Stream s);

 private:
  struct Sizes;
  // The split plans' key bound of a decode step: n_kv_bound (>= every length a replay sees), else n_kv.
  int64_t decode_bound(const GpuAttendStep& step) const;
  Sizes sizes(const GpuShape& shape) const;
  // Rotates rows [from, to) of layer l's keys into its own and grouped copies.
  void rotate_keys(const GpuAttendStep& step, int64_t from, int64_t to, cuda::Stream s);
  // q [n_q, n_head, head_dim] copied into dst and rotated: own positions q_pos0.., or grouped.
  void rotate_queries(const GpuAttendStep& step, int64_t q_pos0, bool grouped, void* dst, cuda::Stream s);
  void prefill(const GpuAttendStep& step, cuda::Stream s);
  void decode(const GpuAttendStep& step, cuda::Stream s);

  SelfExtendParams se_;
  MethodContext ctx_;
  std::unique_ptr<cuda::DeviceArena> arena_;
  void* k_own_ = nullptr;            // bf16 [n_layer, capacity, n_kv_head, head_dim]
  void* k_grp_ = nullptr;            // bf16 [n_layer, capacity, n_kv_head, head_dim]
  void* q_own_ = nullptr;            // bf16 [chunk, n_head, head_dim]
  void* q_grp_ = nullptr;            // bf16 [chunk, n_head, head_dim]
  void* o_far_ = nullptr;            // bf16 [chunk, n_head, head_dim]
  float* lse_near_ = nullptr;        // fp32 [n_head, chunk]
  float* lse_far_ = nullptr;         // fp32 [n_head, chunk]
  int32_t* key_pos_ = nullptr;       // int32 [capacity]: floor(p / G)
  int32_t* query_pos_ = nullptr;     // int32 [capacity]: floor(p / G) + W - floor(W / G)
  int32_t* lens_ = nullptr;          // int32 [2]: a decode step's near and far key counts (device)
  void* decode_ws_ = nullptr;
  size_t decode_ws_bytes_ = 0;
  int64_t capacity_ = 0, chunk_ = 0;
  std::vector<int64_t> rotated_;     // [n_layer]: rows 0..rotated_[l]-1 of layer l are rotated
  std::vector<const void*> rotated_of_;  // [n_layer]: the key memory they were rotated from
  std::vector<char> decode_chain_;       // [n_layer]: the last step seen was a decode step (header)
};

// The GPU side of a method whose steps are all dense with Self-Extend se (dense=self_extend=G:W).
// Throws Error when the model's head_dim has no dense kernel.
std::unique_ptr<GpuMethod> make_self_extend_gpu(const SelfExtendParams& se, const MethodContext& ctx);

}  // namespace longctx

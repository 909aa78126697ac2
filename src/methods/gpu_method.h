// gpu_method.h: a method's GPU side: the device index builder of its sparse steps, with the
// device memory it needs bounded up front.
//
// What: one GpuMethod per (AttentionMethod, GPU model), made by make_gpu_method (registry_gpu.cpp,
// one line per method; the implementation sits in the method's folder as <method>_gpu.cpp). The
// GPU model (gpu/gpu_transformer.cpp) asks the AttentionMethod for the route of every step, as the
// CPU model does, and for a sparse prefill step asks its GpuMethod for the index, then runs the
// shared kernel (cuda::sparse_attention) on it. Every builder is tested equal to the method's
// CPU builder (AttentionMethod::build_index).
// Decode: build_decode gives a sparse decode step's index (cuda::sparse_decode runs it), made on
// the device from device data so the step stays graph-replayable. Methods without a GPU decode
// builder are refused for sparse decode by make_gpu_method, before any work.
// Memory: device_bytes(shape) is the most the builder will hold for chunks of shape.chunk queries
// against shape.capacity keys (fixed buffers + a bound of what depends on the data); the model adds
// it to the KV cache's fit check (memory_plan.h) before allocate(shape) runs, so a prompt that
// cannot fit fails before any work.
// Tensors (bf16, device, after RoPE): q [n_q, n_head, head_dim], k/v [n_kv, n_kv_head, head_dim]
// (the layer's keys 0..n_kv-1, contiguous).
// Pre-RoPE methods (MethodNeeds::keys = pre_rope: TokenSelect, InfiniteHiP with rope=on)
// re-number key positions per step, which the shared kernels (rotated keys at absolute positions)
// cannot run: such a builder says attends(); the model then caches K un-rotated, leaves Q
// un-rotated, and hands every attention step of every global layer (dense ones too) to attend();
// sliding-window layers keep post-RoPE keys and the model's dense window kernels
// (GpuTransformer::method_layer).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cuda/runtime.h"
#include "kernels/cuda/sparse_attention.h"
#include "kernels/params/decode_index.h"
#include "kernels/params/kv_offload.h"
#include "kernels/params/kv_view.h"
#include "methods/method.h"

namespace longctx {

struct GpuShape {
  MethodContext model;
  int64_t chunk = 0;     // most queries of one prefill step
  int64_t capacity = 0;  // most keys of one step (the KV cache's tokens)
  int n_seq = 1;         // sequences of one decode step
};

// One decode step of a layer: kv is the layer's device view (kv.n_seq sequences, their lengths
// in device memory: kv.seq_lens, which a replayed CUDA graph sees change).
struct GpuDecodeStep {
  int layer = 0;
  KvView kv;
  const void* q = nullptr;  // bf16 [kv.n_seq, n_head, head_dim], after RoPE: the step's queries
                            // (methods that estimate from them, e.g. HiP; others ignore it)
  // KV offload (gpu/gpu_offload.h): kv's pools are in mapped host memory and a method that reads
  // keys itself reads them through this cache (disabled: not offloaded). HiP's estimator.
  KvOffloadCache offload_keys{};
};

// A sparse decode step's index on the device, built from device data only (graph-safe), with the
// sparse decode kernel's bound and workspace (cuda::sparse_decode; pointers into the builder's
// buffers).
struct GpuDecodeIndex {
  DecodeIndex index;
  int64_t max_keys_per_row = 0;  // most keys any row attends (sizes the kernel's split plan)
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

struct GpuPrefillStep {
  int layer = 0;
  const void* q = nullptr;  // bf16 [n_q, n_head, head_dim]
  const void* k = nullptr;  // bf16 [n_kv, n_kv_head, head_dim]
  int64_t n_q = 0;
  int64_t q_pos0 = 0;
  int64_t n_kv = 0;
  float scale = 0.f;        // the model's score scale (ModelConfig::score_scale); 0 = 1/sqrt(head_dim)
  // e4m3 codes of the same keys, k_fp8 [n_kv, n_kv_head, head_dim] (any positive scale), or null:
  // with --attn-tiles fp8 the layer's rows of the fp8 cache, which the sparse kernel then reads
  // too. A builder that scores keys (HiP's estimate) scores these instead of k, so the index is
  // chosen over the values the attention reads; the others ignore it.
  const void* k_fp8 = nullptr;
};

// One attention step of a pre-RoPE method (GpuMethod::attends): the method selects, rotates and
// attends; the model only projects and caches. Prefill lengths are host values; a decode step
// also gets its length on the device (n_kv_dev, the step's kv length that a replayed CUDA graph
// sees change) and a bound for it (n_kv_bound), so a decode_graph_safe() method can be replayed.
struct GpuAttendStep {
  int layer = 0;
  Phase phase = Phase::prefill;  // decode: one row of a generated token (Phase::decode, n_q = 1)
  const void* q = nullptr;       // bf16 [n_q, n_head, head_dim], un-rotated
  const void* k = nullptr;       // bf16 [>= n_kv, n_kv_head, head_dim], un-rotated, position = row
  const void* v = nullptr;       // bf16 [>= n_kv, n_kv_head, head_dim]
  void* o = nullptr;             // bf16 [n_q, n_head, head_dim]
  int64_t n_q = 0;
  int64_t n_kv = 0;              // keys 0..n_kv-1; the rows' own keys are the last n_q
  const float* inv_freq = nullptr;  // fp32 [head_dim / 2], the layer's RoPE frequencies
  float rope_factor = 1.f;          // cos/sin multiplier (YaRN, LongRoPE)
  float scale = 0.f;                // softmax scale (0: 1/sqrt(head_dim))
  const int32_t* n_kv_dev = nullptr;  // decode: device int32 [1] = n_kv (nullptr for prefill)
  int64_t n_kv_bound = 0;             // decode: >= every n_kv a replay of the captured step sees
  // The fp8 cache's decode step: k and v are e4m3 (real = stored * k_scale / v_scale) instead of
  // bf16; only a method whose decode_reads_fp8() gets one (a prefill's rows are bf16, staged).
  bool kv_fp8 = false;
  float k_scale = 1.f, v_scale = 1.f;
};

// A sparse step's index on the device and the sparse kernel's workspace for it (pointers into the
// builder's buffers, valid until its next build).
struct GpuIndex {
  cuda::DeviceSparseIndex index;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

class GpuMethod {
 public:
  virtual ~GpuMethod() = default;
  // Bytes allocate(shape) and the builds after it may hold at most (0: nothing, e.g. a method
  // whose steps are all dense at this capacity).
  virtual size_t device_bytes(const GpuShape& shape) const = 0;
  // Allocates for shape (after the fit check; initialisation runs on stream s); frees what an
  // earlier allocate() held.
  virtual void allocate(const GpuShape& shape, cuda::Stream s) = 0;
  virtual void release() = 0;
  // The index of a prefill step whose route is sparse, built on stream s.
  virtual GpuIndex build_prefill(const GpuPrefillStep& step, cuda::Stream s) = 0;
  // Prompt-wide estimation (AttentionMethod::estimates_per_prompt): step holds the prompt's last
  // queries against all its keys; the layer's chunks that follow use it until end_prompt().
  virtual void prepare_prompt(const GpuPrefillStep& /*step*/, cuda::Stream /*s*/) {}
  virtual void end_prompt() {}
  // The index of a decode step whose route is sparse, built on stream s with no host sync, so the
  // step can be captured in a CUDA graph and replayed (the index follows step.kv.seq_lens).
  virtual GpuDecodeIndex build_decode(const GpuDecodeStep& step, cuda::Stream s);
  virtual bool decodes() const { return false; }  // whether sparse decode is (build_decode or attend)
  // Whether build_decode reads keys from an fp8 e4m3 cache (--kv-cache fp8); false: bf16 only, and
  // the model refuses the pair when it is made.
  virtual bool decode_reads_fp8() const { return true; }
  // Pre-RoPE methods (see the header comment): attend() runs every attention step on stream s.
  virtual bool attends() const { return false; }
  virtual void attend(const GpuAttendStep& step, cuda::Stream s);
  // Whether the method's decode step could be captured and replayed (no host item counts, no
  // host branches); false: the model decodes eagerly (as it does for any attends() method today).
  virtual bool decode_graph_safe() const { return true; }
  // The model replays a decode step from a graph only when every kv length of the graph's tile
  // exceeds this (a method whose step changes shape at a length: TokenSelect's budget).
  virtual int64_t decode_graph_min_kv() const { return 0; }
  // KV offload: the cache line (tokens of one KV head) this method's decode reads keys in, when its
  // build_decode reads through GpuDecodeStep::offload_keys (HiP: b_k); 0: it does not (no offload).
  virtual int offload_line_tokens() const { return 0; }
  // Per-sequence state on the device (HiP's mask cache, kept per decode row): the GPU model then
  // decodes one sequence at a time (no batched decode) and calls start_sequence whenever the
  // sequence it decodes starts, so no state carries over from another sequence.
  virtual bool keeps_sequence_state() const { return false; }
  virtual void start_sequence(cuda::Stream /*s*/) {}
};

// The GPU side of method m for the model in shape (nullptr when m never routes a step sparse).
// Throws Error when m (or one phase of it) has no GPU builder or cannot run this model's shape
// ("... use --device cpu").
std::unique_ptr<GpuMethod> make_gpu_method(const AttentionMethod& m, const MethodContext& model);

// "" when make_gpu_method would succeed for m on model; else why not (for --device auto).
std::string gpu_method_problem(const AttentionMethod& m, const MethodContext& model);

}  // namespace longctx

// method.h: what an attention method is, on every device: a policy that routes each attention
// step (dense or sparse) and builds the sparse index of the sparse ones.
//
// What: every method of the four papers ends in "exact softmax attention over a chosen subset of
// keys" (sparse/sparse_index.h). A method therefore only decides
//   1. route(step): dense or sparse, per (layer, phase, chunk shape);
//   2. the index of a sparse step: build_index() here (the CPU builder, kernels/ref-based), and a
//      GPU builder in the method's folder (<method>_gpu.cpp, methods/gpu_method.h), tested equal;
//   3. its per-request state (start_sequence): e.g. MInference's prompt-wide vertical-slash
//      lines, HiP's mask cache, TokenSelect's selection cache. One AttentionMethod object is
//      immutable after parsing and shared by every sequence (and device); everything that
//      changes while a request runs lives in its MethodState.
// The model runs the same three steps for prefill and decode on both devices: route, build the
// index (sparse steps only), call the shared kernel (dense, or sparse over the index); the model,
// not the method, owns dense attention (run_cpu.h on the CPU, gpu/gpu_transformer.cpp on the GPU).
// Methods compose per phase (spec.h: "prefill:minference=CFG;decode:a_shape=128,4096").
// Adding a method: its folder under src/methods/ with a class implementing this interface, one
// line in registry.cpp, and for the GPU one line in registry_gpu.cpp (docs/architecture.md walks
// through A-shape as the example).
// Thread-safety: const methods of AttentionMethod are safe to call concurrently; a MethodState
// belongs to one sequence and is used by one thread at a time.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/params/attention.h"
#include "methods/self_extend/self_extend.h"
#include "sparse/sparse_index.h"

namespace longctx {

class ThreadPool;

// The model a method runs on (for validation and messages).
struct MethodContext {
  int n_layer = 0;
  int n_head = 0;
  int n_kv_head = 0;
  int head_dim = 0;
  std::string model_name;  // for messages ("no MInference config for <model>")
};

enum class Phase { prefill, decode };
enum class Route { dense, sparse };

// One attention call of a layer: n_q queries at positions q_pos0.. against keys 0..n_kv-1.
// Decode steps have n_q == 1 (per sequence).
struct AttnStep {
  int layer = 0;
  Phase phase = Phase::prefill;
  int64_t n_q = 0;
  int64_t q_pos0 = 0;
  int64_t n_kv = 0;
};

inline AttnStep step_of(const AttnParams& p, Phase phase) {
  return {.layer = p.layer, .phase = phase, .n_q = p.n_q, .q_pos0 = p.q_pos0, .n_kv = p.n_kv};
}

// How keys sit in the KV cache. rotated: after RoPE at their absolute position (what every
// kernel reads); pre_rope: un-rotated, and the attention step rotates the keys it reads at the
// positions the method assigns (select_keys; TokenSelect re-numbers positions). pre_rope is built
// on the CPU model (methods/run_cpu.h: gather + rotate + dense attention), not on the GPU.
enum class KeyLayout { rotated, pre_rope };

// One layer's RoPE, for methods whose keys are cached pre_rope: rows are rotated with
// kernels/ref/ops.h's rope_apply_ref(x, T, n_heads, head_dim, pos0, inv_freq, pool, factor).
struct LayerRope {
  const float* inv_freq = nullptr;  // [head_dim / 2]
  float factor = 1.f;               // attention factor (YaRN, LongRoPE; 1 otherwise)
};

// One part of a pre_rope step (AttentionMethod::select_keys): chunk rows [q_begin, q_end) attend
// `keys`, sorted absolute positions shared by every head, whose last q_end - q_begin entries are
// the rows' own positions. The model gathers them and re-numbers them 0..L-1 (L = keys.size()):
// key j is rotated at position j, query row q_begin + i at L - (q_end - q_begin) + i, so the
// causal mask is the original one and no distance exceeds L - 1.
struct KeySegment {
  int64_t q_begin = 0, q_end = 0;
  std::vector<int32_t> keys;
};

// What a method needs from the shared parts, declared up front so the engine can refuse a
// combination it cannot serve before any work starts.
struct MethodNeeds {
  KeyLayout keys = KeyLayout::rotated;
  int page_size = 0;      // KV page size the method's index needs (0: any)
  bool offload = false;   // KV pages may live in host memory
};

// Per-request state of a method (one per sequence). Methods without state use this base.
class MethodState {
 public:
  virtual ~MethodState() = default;
};

class AttentionMethod {
 public:
  virtual ~AttentionMethod() = default;
  // The canonical spec (spec.h's syntax): parsing it again gives the same method.
  virtual std::string name() const = 0;
  virtual MethodNeeds needs() const { return {}; }
  virtual Route route(const AttnStep& step) const = 0;
  virtual std::unique_ptr<MethodState> start_sequence() const { return std::make_unique<MethodState>(); }

  // The CPU index of a sparse step (route(step) == sparse), over p's fp32 Q/K/V (the chunk's
  // queries against all cached keys), in the format of sparse/sparse_index.h for p.n_q queries.
  virtual SparseIndex build_index(const AttnParams& p, Phase phase, MethodState& state, ThreadPool& pool) const = 0;

  // Key layout pre_rope only (needs().keys): the step's key sets, for p's un-rotated q and keys
  // (p.k holds pre-RoPE keys); rope rotates whatever the selection needs. Called for every step,
  // dense ones included (the set is then [0, n_kv)).
  virtual std::vector<KeySegment> select_keys(const AttnParams& p, Phase phase, const LayerRope& rope,
                                              MethodState& state, ThreadPool& pool) const;

  // Self-Extend (methods/self_extend/self_extend.h; option self_extend=G:W of dense and hip): the
  // grouped positions of phase's steps, or nullptr (every key at its own position). A method that
  // returns them declares keys = pre_rope; the CPU step then scores near keys at their own
  // positions and far keys at grouped ones (attend_self_extend_ref), over the method's index
  // built from the grouped q/k when the step routes sparse. GPU: dense only (self_extend_gpu.h).
  virtual const SelfExtendParams* self_extend(Phase /*phase*/) const { return nullptr; }

  // Prompt-wide estimation (layer-major prefill, Transformer::forward_prompt). A method that
  // estimates from the whole prompt at `layer` (MInference's vertical-slash lines, from the
  // prompt's last 64 queries as in the paper's reference) says so here; the model then computes
  // every chunk's K/V of the layer first, calls prepare_prompt with the prompt's last queries
  // (p.n_q rows at p.q_pos0) against all its keys (p.n_kv), runs the layer's chunks, then
  // end_prompt(). Default: no prompt-wide estimate (every chunk stands alone).
  virtual bool estimates_per_prompt(int /*layer*/, int64_t /*n_kv*/) const { return false; }
  virtual void prepare_prompt(const AttnParams& /*p*/, MethodState& /*state*/, ThreadPool& /*pool*/) const {}
  virtual void end_prompt(MethodState& /*state*/) const {}
};

// The --attn spec parsed for a model (spec.h has the syntax; throws Error naming the unknown
// method, bad parameter, or phase given twice).
std::unique_ptr<AttentionMethod> make_attention_method(const std::string& spec, const MethodContext& ctx);

}  // namespace longctx

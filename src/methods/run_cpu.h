// run_cpu.h: one attention step on the CPU through a method: route, build the index, run the
// shared kernel (kernels/ref dense attention, or the sparse mainloop of sparse/sparse_attention.h).
// Layers with a sliding window (p.window > 0, e.g. Gemma 3's local layers) always run dense over
// their window: a method's sparsity applies to global layers only.
//   attend_cpu({.method = m, .state = st, .phase = Phase::prefill}, params, pool);
// Pre-RoPE keys (method.needs().keys == pre_rope; the model then passes .rope and un-rotated q
// and keys): the method's key sets (AttentionMethod::select_keys) are gathered, rotated at their
// compacted positions 0..L-1 (queries at L-C+i) and attended densely: attend_compacted_ref.
// A method with Self-Extend (method.self_extend(phase)) instead scores near keys at their own
// positions and far keys at grouped ones (methods/self_extend/self_extend_attention.h), dense or
// over its index built from the grouped q/k.
#pragma once
#include <span>

#include "methods/method.h"

namespace longctx {

class ThreadPool;

struct MethodRun {
  const AttentionMethod& method;
  MethodState& state;  // the sequence's (AttentionMethod::start_sequence)
  Phase phase = Phase::prefill;
  const LayerRope* rope = nullptr;  // set iff the keys are cached pre_rope
};

void attend_cpu(const MethodRun& run, const AttnParams& p, ThreadPool& pool);

// Dense attention of p's un-rotated queries against the un-rotated keys of each segment,
// re-numbered: segment keys gathered in order, key j rotated at position j, query row
// q_begin + i at L - C + i (C = rows of the segment). Writes p.o (and p.lse) of those rows.
// Throws Error when a segment's keys are unsorted, out of range, or do not end with its rows.
void attend_compacted_ref(const AttnParams& p, std::span<const KeySegment> segments, const LayerRope& rope,
                          ThreadPool& pool);

}  // namespace longctx

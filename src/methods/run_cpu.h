// run_cpu.h: one attention step on the CPU through a method: route, build the index, run the
// shared kernel (kernels/ref dense attention, or the sparse mainloop of sparse/sparse_attention.h).
// Layers with a sliding window (p.window > 0, e.g. Gemma 3's local layers) always run dense over
// their window: a method's sparsity applies to global layers only.
//   attend_cpu({.method = m, .state = st, .phase = Phase::prefill}, params, pool);
#pragma once
#include "methods/method.h"

namespace longctx {

class ThreadPool;

struct MethodRun {
  const AttentionMethod& method;
  MethodState& state;  // the sequence's (AttentionMethod::start_sequence)
  Phase phase = Phase::prefill;
};

void attend_cpu(const MethodRun& run, const AttnParams& p, ThreadPool& pool);

}  // namespace longctx

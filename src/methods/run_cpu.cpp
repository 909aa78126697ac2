// run_cpu.cpp: see run_cpu.h.
#include "methods/run_cpu.h"

#include "kernels/ref/attention.h"
#include "sparse/sparse_attention.h"

namespace longctx {

void attend_cpu(const MethodRun& run, const AttnParams& p, ThreadPool& pool) {
  if (p.n_q == 0) return;
  // A sliding-window layer's window is its sparsity: methods apply to global layers only.
  if (p.window > 0 || run.method.route(step_of(p, run.phase)) == Route::dense) {
    attention_dense_ref(p, pool);
    return;
  }
  const SparseIndex idx = run.method.build_index(p, run.phase, run.state, pool);
  sparse_attention_ref(p, idx, pool);
}

}  // namespace longctx

// paged_dot.h (ref): per-query-head dot products of one query against key rows gathered by slot.
//
// What: scores[h][j] = sum_d q[h][d] * k[slots[j]][kvh(h)][d], kvh(h) = h / (n_head / n_kv_head),
// raw (no 1/sqrt(d) scale): TokenSelect's criticality of token j for head h (paper Eq. 10).
// Why: with a page-size-1 KV cache a selection candidate is a slot, not a contiguous row range;
// scoring in place avoids copying the candidates' keys (the paper's Paged Dot Product Kernel).
// How: fp32 with fp32 accumulation, one task per range of slots; each gathered key row is used
// for every query head of its GQA group. The CUDA twin is kernels/cuda/paged_dot.h.
// Layout:
//   q      [n_head, head_dim]
//   k      [n_rows, n_kv_head, head_dim]   row = slot (a page-size-1 pool, or a contiguous cache)
//   slots  [n_slot]                        each in [0, n_rows)
//   scores [n_head, n_slot]
#pragma once
#include <cstdint>

namespace longctx {

class ThreadPool;

struct PagedDotParams {
  const float* q = nullptr;
  const float* k = nullptr;
  const int32_t* slots = nullptr;
  float* scores = nullptr;
  int64_t n_slot = 0;
  int n_head = 0;
  int n_kv_head = 0;
  int head_dim = 0;
};

void paged_dot_ref(const PagedDotParams& p, ThreadPool& pool);

}  // namespace longctx

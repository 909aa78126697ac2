// topk_select.h (cuda): a top-k whose item count is read from device memory, so the launch is the
// same for every count (CUDA-graph replayable) and can be skipped by a device flag.
//
// What: out = the indices of the k largest votes among vote[0, M) (ties: smaller index first),
// ascending, plus an offset; M = *m_dev - m_sub when m_dev is set (e.g. the decode step's KV
// length minus TokenSelect's initial and local keys), else max_M; k is clamped to M. The rule of
// sparse/topk.h's top_k_indices (the CPU twin; NaN counts as -inf), tested against it by
// tests/cuda/test_topk_select.cpp. When *skip != 0 the kernel returns at once and out keeps what
// it held (TokenSelect's selection cache hit: tokenselect_engine_gpu.h).
// How: votes map to order-preserving uint32 keys. Four histogram kernels (8-bit digits, one
// CTA per 512 items up to 256 CTAs, shared histograms added into the workspace) narrow down the
// k-th largest key T; every later kernel re-derives T and `need` (how many keys equal to T are
// kept) from the histograms with one warp, so no kernel waits on the host. Then a count kernel
// (each CTA's keys > T and == T) and a write kernel: each warp walks its contiguous segment of
// [0, M) and keeps keys > T and the first `need` keys == T in index order, its base the counts of
// the CTAs and warps before it, ranks inside the segment from warp ballots: positions come out
// ascending without a sort. One memset + six launches, the same for every M.
// Cost (H200, M = 130432, k = 2048): see docs/benchmarks.md (TokenSelect's decode step); a
// single-CTA version of the same passes took 0.25 ms (latency-bound), CUB's full sort 0.073 ms.
#pragma once
#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace longctx::cuda {

struct TopKSelectParams {
  const float* vote = nullptr;      // fp32 [max_M]
  int64_t max_M = 0;                // the most items (host bound, < 2^31)
  const int32_t* m_dev = nullptr;   // device int32 [1] or nullptr: M = clamp(*m_dev - m_sub, 0, max_M)
  int32_t m_sub = 0;
  int64_t k = 0;                    // clamped to M
  int32_t offset = 0;               // added to every chosen index
  int32_t* out = nullptr;           // int32 [min(k, M)] ascending
  const int32_t* skip = nullptr;    // device int32 [1] or nullptr: nonzero leaves out untouched
  void* workspace = nullptr;        // top_k_select_workspace_bytes(), any alignment of cudaMalloc
};
size_t top_k_select_workspace_bytes();
void top_k_select(const TopKSelectParams& p, Stream s = nullptr);

}  // namespace longctx::cuda

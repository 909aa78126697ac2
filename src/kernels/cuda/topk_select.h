// topk_select.h (cuda): a top-k whose item count is read from device memory, so the launch is the
// same for every count (CUDA-graph replayable) and can be skipped by a device flag.
//
// What: out = the indices of the k largest votes among vote[0, M) (ties: smaller index first),
// ascending, plus an offset; M = *m_dev - m_sub when m_dev is set (e.g. the decode step's KV
// length minus TokenSelect's initial and local keys), else max_M; k is clamped to M. The rule of
// sparse/topk.h's top_k_indices (the CPU twin; NaN counts as -inf), tested against it by
// tests/cuda/test_topk_select.cpp. When *skip != 0 the kernel returns at once and out keeps what
// it held (TokenSelect's selection cache hit: tokenselect_engine_gpu.h).
// How: one CTA of 1024 threads (no workspace, one launch): votes map to order-preserving uint32
// keys; four 8-bit radix passes find the k-th largest key T and how many of the items equal to T
// are kept (need); then each warp walks its contiguous segment of [0, M) and keeps key > T and the
// first `need` keys == T in index order, with warp ballots for the in-segment ranks and one block
// scan for the segments' bases, writing positions in ascending order without a sort.
// Cost: six passes over M floats from L2 by one SM (~25 us at M = 128K on H100); a multi-CTA
// radix select would be faster at long contexts (not built).
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
};
void top_k_select(const TopKSelectParams& p, Stream s = nullptr);

}  // namespace longctx::cuda

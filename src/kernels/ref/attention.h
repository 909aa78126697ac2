// attention.h (ref): dense softmax attention on the CPU, fp32 with fp32 accumulation.
//
// The reference every other attention path is tested against, and the CPU engine's dense
// attention. Tiled over (KV head, query tile); each tile is two BLAS GEMMs (S = Q K^T, O = P V)
// with a row softmax between them, so memory is O(tile * n_kv), never O(n_q * n_kv).
// Layout and semantics: kernels/params/attention.h.
#pragma once
#include "kernels/params/attention.h"

namespace longctx {

class ThreadPool;

// Queries per tile: large enough for GEMM efficiency, small enough that the score tile
// (kQueryTile * n_kv floats per GQA group member) stays cache-friendly at 8K keys.
inline constexpr int kAttnQueryTile = 32;

void attention_dense_ref(const AttnParams& p, ThreadPool& pool);

}  // namespace longctx

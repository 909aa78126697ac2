// rope_tables.h: a model's RoPE tables, per layer, as the CPU and the GPU model both use them.
//
// What: inverse frequencies fp32 [n_layer, head_dim/2] and the per-layer cos/sin factor (YaRN,
// LongRoPE; 1 otherwise) for a context of `context` tokens (LongRoPE picks its short or long
// factors by it; 0 = at load), from the config's per-layer attention types (local/global RoPE
// bases, which layers scale) and kernels/ref/ops.h's rope_inv_freq_ref.
// rope_freqs: GGUF llama3 divisors (the file's rope_freqs tensor), or empty.
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace longctx {

struct RopeTables {
  std::vector<float> inv_freq;  // [n_layer * head_dim / 2]
  std::vector<float> factor;    // [n_layer]
};
RopeTables rope_tables(const ModelConfig& c, const std::vector<float>& rope_freqs, int64_t context);

}  // namespace longctx

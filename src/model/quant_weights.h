// quant_weights.h: the fast CPU path's weight matrices, kept in the model file's block format.
//
// `--cpu-weights quantized` runs the CPU matmuls on these (kernels/cpu/quant_matmul.h) instead
// of the fp32 matrices of weights.h (the exact path the golden tests use). Per file type:
//   Q4_0, Q4_1, Q8_0, Q4_K        kept as stored (the kernels read them directly);
//   other block types (Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, Q6_K, Q8_K)
//                                 re-quantized to Q8_0 from their fp32 values (8 bits: its rounding
//                                 error is well under theirs, and one kernel serves them all);
//   F32, F16, BF16 (or a row length not a multiple of the block)
//                                 no quantized copy: that matmul stays on the fp32 path, since
//                                 quantizing a float file would change the model.
// Rows get the same treatment as the fp32 ones (llama Q/K un-permuted, Phi-3's fused
// projections split), so both paths compute the same product.
#pragma once
#include <vector>

#include "kernels/cpu/quant_matmul.h"
#include "loader/model_file.h"
#include "model/config.h"

namespace longctx {

// Each matrix is empty when its tensor has no quantized copy (see above).
struct QuantLayerWeights {
  QuantMatrix wq, wk, wv, wo;    // [n_head*D, E], [n_kv_head*D, E] x2, [E, n_head*D]
  QuantMatrix w_gate, w_up;      // [n_ff, E]
  QuantMatrix w_down;            // [E, n_ff]
};

struct QuantModelWeights {
  std::vector<QuantLayerWeights> layers;
  QuantMatrix output;            // [vocab, E]: lm_head, or the token embedding when tied

  // Call after ModelWeights::load succeeded on the same file (it has checked every shape).
  static QuantModelWeights load(const ModelFile& mf, const ModelConfig& cfg);
};

}  // namespace longctx

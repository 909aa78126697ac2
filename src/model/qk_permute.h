// qk_permute.h: the Q/K row order of llama-architecture GGUF files.
//
// llama.cpp's converter permutes the rows of each Q/K head so that RoPE can rotate adjacent
// pairs (2j, 2j+1); HF weights rotate halves (j, j + D/2). Within each head, HF row s*(D/2)+j is
// GGUF row 2j+s. longctx keeps the HF order (one rotate-half RoPE for both formats).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace longctx {

// w: [n_heads*D, cols]. inverse=false: HF -> GGUF order; inverse=true: GGUF -> HF order.
inline std::vector<float> permute_qk_rows(const std::vector<float>& w, int n_heads, int D, int64_t cols,
                                          bool inverse) {
  std::vector<float> out(w.size());
  for (int h = 0; h < n_heads; ++h)
    for (int s = 0; s < 2; ++s)
      for (int j = 0; j < D / 2; ++j) {
        const int64_t hf_row = int64_t(h) * D + s * (D / 2) + j, gguf_row = int64_t(h) * D + 2 * j + s;
        const int64_t from = inverse ? gguf_row : hf_row, to = inverse ? hf_row : gguf_row;
        std::copy_n(w.data() + from * cols, cols, out.data() + to * cols);
      }
  return out;
}

}  // namespace longctx

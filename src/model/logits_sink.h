// logits_sink.h: how a forward pass hands over logits piece by piece instead of in one array.
//
// sink(row, rows, logits) receives the logits [rows, vocab] (fp32, row-major) of tokens
// row .. row + rows - 1 (indices into the tokens of the call). Scoring a long text wants every
// position's logits; [T, vocab] at once would be T x 49K floats for the default model (1.6 GB at
// 8K tokens) and far more for large vocabularies, so the CPU and GPU transformers emit them a
// chunk at a time and the caller (Engine::score) reduces each piece to log-probabilities.
#pragma once
#include <cstdint>
#include <functional>

namespace longctx {

using LogitsSink = std::function<void(int64_t row, int64_t rows, const float* logits)>;

}  // namespace longctx

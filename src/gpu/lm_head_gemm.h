// lm_head_gemm.h: y = x W^T with bf16 x, W and fp32 y, through cuBLASLt: the LM head.
//
// Why not kernels/cuda/gemm.h: it writes bf16, and bf16 logits of magnitude ~25 are spaced
// 0.125 apart, so distinct fp32 logits would round into ties and greedy argmax could differ
// from the CPU path for no model reason. Here the fp32 accumulator is stored as is.
// Layout as gemm.h: x [m, k] row-major, W [n, k] row-major (PyTorch layout), y [m, n] row-major.
// One plan (descriptors + heuristic's algorithm) per shape; the workspace comes from the caller.
// ldy: rows of y padded to 16 bytes (kLogitsPad) keep cuBLASLt's vectorised kernels eligible
// for vocabularies that are not a multiple of 4 (e.g. the tests' 265-token tiny models).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cuda/runtime.h"

namespace longctx::gpu {

// Row stride of the fp32 logits buffer: vocab rounded up to a multiple of 4 floats (16 bytes).
inline int64_t padded_vocab(int64_t v) { return (v + 3) / 4 * 4; }

class LmHeadGemm {
 public:
  LmHeadGemm(void* workspace, size_t workspace_bytes);
  ~LmHeadGemm();
  LmHeadGemm(const LmHeadGemm&) = delete;
  LmHeadGemm& operator=(const LmHeadGemm&) = delete;
  // x: bf16 [m, k], w: bf16 [n, k], y: fp32 [m, n] with row stride ldy >= n (all device).
  void run(const void* x, const void* w, float* y, int64_t m, int64_t n, int64_t k, int64_t ldy, cuda::Stream s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace longctx::gpu

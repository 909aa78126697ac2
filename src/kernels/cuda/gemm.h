// gemm.h (cuda): y = alpha * x W^T + beta * y through cuBLASLt (bf16 in/out, fp32 accumulate).
//
// The linear-layer product of the model: x [m, k] row-major activations, W [n, k] row-major
// weights (the PyTorch / GGUF layout), y [m, n] row-major. beta = 1 fuses the residual add
// (y += x W^T). y_fp32: y is fp32 (the LM head: bf16 logits of magnitude ~25 are spaced 0.125
// apart, so distinct fp32 logits would round into ties and greedy argmax could differ from the
// CPU path for no model reason), with row stride ldy (rows padded to 16 bytes keep cuBLASLt's
// vectorised kernels eligible for vocabularies that are not a multiple of 4). Plain C++; the cuBLASLt handle, descriptors and the chosen algorithm per shape
// live behind a pimpl. The workspace (device memory) comes from the caller, e.g. an arena;
// kGemmWorkspaceBytes is what cuBLASLt's Hopper kernels want.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cuda/runtime.h"

namespace longctx::cuda {

inline constexpr size_t kGemmWorkspaceBytes = 32u << 20;  // NVIDIA's recommendation for Hopper: 32 MiB

struct GemmParams {
  const void* x = nullptr;  // bf16 [m, k]
  const void* w = nullptr;  // bf16 [n, k]
  void* y = nullptr;        // bf16 [m, n], or fp32 [m, ldy] when y_fp32
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.f, beta = 0.f;
  bool y_fp32 = false;
  int64_t ldy = 0;          // row stride of y in elements; 0 = n
};

class Gemm {
 public:
  Gemm(void* workspace, size_t workspace_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  void run(const GemmParams& p, Stream s = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace longctx::cuda

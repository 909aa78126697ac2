// lm_head_gemm.cpp: see lm_head_gemm.h. Column-major view as in kernels/cuda/gemm.cpp:
// D (n x m, ld n) = op(A) B with A = W seen as col-major [k, n] transposed, B = x as [k, m].
#include "gpu/lm_head_gemm.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <tuple>

#include "util/error.h"

namespace longctx::gpu {

namespace {

void check(cublasStatus_t st, const char* what, int64_t m, int64_t n, int64_t k) {
  if (st != CUBLAS_STATUS_SUCCESS)
    fail("cuBLASLt error in the LM head GEMM ({}; m={} n={} k={}): {} (status {})", what, m, n, k,
         cublasLtGetStatusString(st), int(st));
}

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

}  // namespace

struct LmHeadGemm::Impl {
  cublasLtHandle_t handle = nullptr;
  void* ws = nullptr;
  size_t ws_bytes = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, Plan> plans;

  ~Impl() {
    for (auto& [key, p] : plans) {
      cublasLtMatrixLayoutDestroy(p.a);
      cublasLtMatrixLayoutDestroy(p.b);
      cublasLtMatrixLayoutDestroy(p.d);
      cublasLtMatmulDescDestroy(p.desc);
    }
    if (handle) cublasLtDestroy(handle);
  }

  const Plan& plan(int64_t m, int64_t n, int64_t k, int64_t ldy) {
    const auto key = std::make_tuple(m, n, k, ldy);
    if (auto it = plans.find(key); it != plans.end()) return it->second;
    Plan p;
    check(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc", m, n, k);
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transa", m, n, k);
    check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transb", m, n, k);
    check(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, uint64_t(k), uint64_t(n), k), "layout A", m, n, k);
    check(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, uint64_t(k), uint64_t(m), k), "layout B", m, n, k);
    check(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, uint64_t(n), uint64_t(m), ldy), "layout D", m, n, k);
    cublasLtMatmulPreference_t pref = nullptr;
    check(cublasLtMatmulPreferenceCreate(&pref), "preference", m, n, k);
    const uint64_t ws = ws_bytes;
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
          "workspace preference", m, n, k);
    cublasLtMatmulHeuristicResult_t res{};
    int n_res = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.d, p.d, pref, 1, &res, &n_res);
    cublasLtMatmulPreferenceDestroy(pref);
    check(st, "heuristic", m, n, k);
    if (n_res == 0) fail("cuBLASLt has no algorithm for the LM head GEMM (bf16 x bf16 -> fp32, m={} n={} k={})", m, n, k);
    p.algo = res.algo;
    return plans.emplace(key, p).first->second;
  }
};

LmHeadGemm::LmHeadGemm(void* workspace, size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
  impl_->ws = workspace;
  impl_->ws_bytes = workspace ? workspace_bytes : 0;
  check(cublasLtCreate(&impl_->handle), "cublasLtCreate", 0, 0, 0);
}

LmHeadGemm::~LmHeadGemm() = default;

void LmHeadGemm::run(const void* x, const void* w, float* y, int64_t m, int64_t n, int64_t k, int64_t ldy,
                     cuda::Stream s) {
  if (!x || !w || !y || m <= 0 || n <= 0 || k <= 0 || ldy < n)
    fail("LM head GEMM: bad arguments m={} n={} k={} ldy={}", m, n, k, ldy);
  const Plan& p = impl_->plan(m, n, k, ldy);
  const float alpha = 1.f, beta = 0.f;
  check(cublasLtMatmul(impl_->handle, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.d, y, p.d, &p.algo, impl_->ws,
                       impl_->ws_bytes, static_cast<cudaStream_t>(s)),
        "matmul", m, n, k);
}

}  // namespace longctx::gpu

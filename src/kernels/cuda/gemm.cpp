// gemm.cpp (cuda): cuBLASLt wrapper, see gemm.h. Host code only.
//
// Row-major y[m,n] = x[m,k] W[n,k]^T is, in cuBLAS's column-major terms, D (n x m) = op(A) B
// with A = W seen as col-major [k, n] and transposed (TRANSA = T, lda = k), B = x seen as
// col-major [k, m] (ldb = k) and D = y seen as col-major [n, m] (ldd = ldy, default n; bf16 or
// fp32). Plans (descriptors + heuristic's first algorithm) are cached per
// (m, n, k, beta != 0, y type, ldy).
#include "kernels/cuda/gemm.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <tuple>

#include "kernels/cuda/check.h"

namespace longctx::cuda {

namespace {

[[noreturn]] void raise_cublas(cublasStatus_t st, const char* call, const std::string& ctx) {
  detail::raise_msg(detail::format("cuBLASLt error in %s: %s (status %d) [%s]", ctx.c_str(),
                                   cublasLtGetStatusString(st), int(st), call));
}

#define LC_CUBLAS_CHECK(call, ...)                                                  \
  do {                                                                              \
    cublasStatus_t lc_st_ = (call);                                                 \
    if (lc_st_ != CUBLAS_STATUS_SUCCESS) raise_cublas(lc_st_, #call, detail::format(__VA_ARGS__)); \
  } while (0)

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

}  // namespace

struct Gemm::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, bool, int64_t>, Plan> plans;

  ~Impl() {
    for (auto& [key, p] : plans) {
      cublasLtMatrixLayoutDestroy(p.a);
      cublasLtMatrixLayoutDestroy(p.b);
      cublasLtMatrixLayoutDestroy(p.d);
      cublasLtMatmulDescDestroy(p.desc);
    }
    if (handle) cublasLtDestroy(handle);
  }

  const Plan& plan(int64_t m, int64_t n, int64_t k, bool accumulate, bool y_fp32, int64_t ldy) {
    auto key = std::make_tuple(m, n, k, accumulate, y_fp32, ldy);
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    Plan p;
    const char* ctx = "gemm plan";
    LC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "%s m=%lld n=%lld k=%lld", ctx,
                    (long long)m, (long long)n, (long long)k);
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "%s", ctx);
    LC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "%s", ctx);
    LC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, uint64_t(k), uint64_t(n), k), "%s A", ctx);
    LC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, uint64_t(k), uint64_t(m), k), "%s B", ctx);
    LC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, y_fp32 ? CUDA_R_32F : CUDA_R_16BF, uint64_t(n), uint64_t(m), ldy),
                    "%s D", ctx);
    cublasLtMatmulPreference_t pref = nullptr;
    LC_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref), "%s", ctx);
    const uint64_t ws = workspace_bytes;
    LC_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)), "%s",
        ctx);
    cublasLtMatmulHeuristicResult_t res{};
    int n_res = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.d, p.d, pref, 1, &res, &n_res);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || n_res == 0)
      detail::raise_msg(detail::format("cuBLASLt found no algorithm for bf16 gemm m=%lld n=%lld k=%lld -> %s (status %d)",
                                       (long long)m, (long long)n, (long long)k, y_fp32 ? "fp32" : "bf16", int(st)));
    p.algo = res.algo;
    return plans.emplace(key, p).first->second;
  }
};

Gemm::Gemm(void* workspace, size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
  impl_->workspace = workspace;
  impl_->workspace_bytes = workspace ? workspace_bytes : 0;
  LC_CUBLAS_CHECK(cublasLtCreate(&impl_->handle), "Gemm: cublasLtCreate");
}

Gemm::~Gemm() = default;

void Gemm::run(const GemmParams& p, Stream s) {
  LC_REQUIRE(p.x && p.w && p.y, "gemm: null pointer");
  LC_REQUIRE(p.m > 0 && p.n > 0 && p.k > 0, "gemm: sizes m=%lld n=%lld k=%lld must be positive", (long long)p.m,
             (long long)p.n, (long long)p.k);
  const int64_t ldy = p.ldy ? p.ldy : p.n;
  LC_REQUIRE(ldy >= p.n, "gemm: row stride %lld of y is below n=%lld", (long long)ldy, (long long)p.n);
  const Plan& pl = impl_->plan(p.m, p.n, p.k, p.beta != 0.f, p.y_fp32, ldy);
  LC_CUBLAS_CHECK(cublasLtMatmul(impl_->handle, pl.desc, &p.alpha, p.w, pl.a, p.x, pl.b, &p.beta, p.y, pl.d, p.y,
                                 pl.d, &pl.algo, impl_->workspace, impl_->workspace_bytes,
                                 static_cast<cudaStream_t>(s)),
                  "gemm m=%lld n=%lld k=%lld", (long long)p.m, (long long)p.n, (long long)p.k);
}

}  // namespace longctx::cuda

// check.h (cuda, internal): CUDA error checks that throw longctx::Error with context.
//
// LC_CUDA_CHECK(call, fmt, ...) runs a CUDA runtime call and, on failure, throws an Error whose
// message holds the call, the CUDA error string and a printf-style context naming the kernel
// and shape. LC_LAUNCH_CHECK(fmt, ...) does the same for the launch just made
// (cudaGetLastError). Usable from .cu and .cpp files; the message is built only on failure.
#pragma once
#include <cuda_runtime.h>

#include <string>

namespace longctx::cuda::detail {

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] void raise_cuda(cudaError_t err, const char* call, const char* file, int line,
                             const std::string& context);
[[noreturn]] void raise_msg(const std::string& msg);

}  // namespace longctx::cuda::detail

#define LC_CUDA_CHECK(call, ...)                                                            \
  do {                                                                                      \
    cudaError_t lc_err_ = (call);                                                           \
    if (lc_err_ != cudaSuccess)                                                             \
      ::longctx::cuda::detail::raise_cuda(lc_err_, #call, __FILE__, __LINE__,               \
                                          ::longctx::cuda::detail::format(__VA_ARGS__));    \
  } while (0)

#define LC_LAUNCH_CHECK(...) LC_CUDA_CHECK(cudaGetLastError(), __VA_ARGS__)

// LC_REQUIRE(cond, fmt, ...): argument validation in host wrappers.
#define LC_REQUIRE(cond, ...)                                                               \
  do {                                                                                      \
    if (!(cond)) ::longctx::cuda::detail::raise_msg(::longctx::cuda::detail::format(__VA_ARGS__)); \
  } while (0)

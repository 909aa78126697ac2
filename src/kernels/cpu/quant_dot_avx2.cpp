// quant_dot_avx2.cpp (cpu): the AVX2 + FMA + F16C kernel set (quant_dot_x86.inc, vpmaddubsw).
// Standard headers come before the target pragma so their inline code stays portable.
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/quant_dot.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#define QD_TOKENS 4
#define QD_VNNI 0
#define QD_ENTRY quant_gemm_tile_avx2
#include "kernels/cpu/quant_dot_x86.inc"
#else
namespace longctx {
void quant_gemm_tile_avx2(const QuantTile& p) { quant_gemm_tile_scalar(p); }
void quantize_q8_rows_avx2(const float* x, int64_t t0, int64_t t1, Q8Rows& xq) {
  quantize_q8_rows(x, t0, t1, xq, CpuIsa::scalar);
}
}  // namespace longctx
#endif

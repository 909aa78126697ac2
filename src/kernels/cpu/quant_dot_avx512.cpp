// quant_dot_avx512.cpp (cpu): the AVX-512 VNNI kernel set (quant_dot_x86.inc with vpdpbusd on
// 256-bit vectors, which needs AVX512VL). Standard headers come before the target pragma so
// their inline code stays portable.
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/quant_dot.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#define QD_TOKENS 8
#define QD_VNNI 1
#define QD_ENTRY quant_gemm_tile_avx512vnni
#include "kernels/cpu/quant_dot_x86.inc"
#else
namespace longctx {
void quant_gemm_tile_avx512vnni(const QuantTile& p) { quant_gemm_tile_scalar(p); }
}  // namespace longctx
#endif

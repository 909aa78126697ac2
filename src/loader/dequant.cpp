// dequant.cpp: dequantize() dispatch, the plain float types (F32/F16/BF16/F64), and the
// parallel helpers of dequant.h. Block quant formulas live in dequant_legacy.cpp and
// dequant_kquants.cpp.
#include "loader/dequant.h"

#include <algorithm>
#include <cstring>

#include "loader/dequant_blocks.h"
#include "util/error.h"
#include "util/half.h"
#include "util/thread_pool.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace longctx {
namespace {

// Below this many elements, threading costs more than it saves (about 50 us of work).
constexpr int64_t kParallelMinElements = int64_t(1) << 18;
// Elements per parallel_for item (a multiple of every block size: 256 = QK_K).
constexpr int64_t kParallelChunk = 1 << 14;

void f16_row(const uint8_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = dq::load_f16(src + 2 * i);
}

void bf16_row(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(dq::load_u16(src + 2 * i));
}

void f64_row(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double v;
    std::memcpy(&v, src + 8 * i, 8);
    dst[i] = float(v);
  }
}

}  // namespace

void dequantize(DType t, const void* src_v, float* dst, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  if (!info.can_dequantize) fail("cannot dequantize dtype {}: longctx has no fp32 conversion for it", info.name);
  if (n < 0 || n % info.block_size != 0)
    fail("dequantize {}: {} elements is not a multiple of the block size {}", info.name, n, info.block_size);
  const auto* src = static_cast<const uint8_t*>(src_v);
  const int64_t nb = n / info.block_size;
  switch (t) {
    case DType::F32: if (n) std::memcpy(dst, src, size_t(n) * 4); return;
    case DType::F16: f16_row(src, dst, n); return;
    case DType::BF16: bf16_row(src, dst, n); return;
    case DType::F64: f64_row(src, dst, n); return;
    case DType::Q4_0: dq::q4_0(src, dst, nb); return;
    case DType::Q4_1: dq::q4_1(src, dst, nb); return;
    case DType::Q5_0: dq::q5_0(src, dst, nb); return;
    case DType::Q5_1: dq::q5_1(src, dst, nb); return;
    case DType::Q8_0: dq::q8_0(src, dst, nb); return;
    case DType::Q2_K: dq::q2_k(src, dst, nb); return;
    case DType::Q3_K: dq::q3_k(src, dst, nb); return;
    case DType::Q4_K: dq::q4_k(src, dst, nb); return;
    case DType::Q5_K: dq::q5_k(src, dst, nb); return;
    case DType::Q6_K: dq::q6_k(src, dst, nb); return;
    case DType::Q8_K: dq::q8_k(src, dst, nb); return;
    default: break;
  }
  fail("cannot dequantize dtype {}", info.name);
}

void dequantize_parallel(DType t, const void* src_v, float* dst, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  if (n < kParallelMinElements || n % info.block_size != 0) {
    dequantize(t, src_v, dst, n);  // also reports bad arguments
    return;
  }
  const auto* src = static_cast<const uint8_t*>(src_v);
  const int64_t n_chunks = (n + kParallelChunk - 1) / kParallelChunk;
  global_pool().parallel_for(n_chunks, [&](int64_t c0, int64_t c1) {
    const int64_t e0 = c0 * kParallelChunk, e1 = std::min(n, c1 * kParallelChunk);
    const size_t byte0 = size_t(e0 / info.block_size) * size_t(info.block_bytes);
    dequantize(t, src + byte0, dst + e0, e1 - e0);
  });
}

std::vector<float> dequantize_tensor(const TensorView& t) {
  const int64_t n = t.numel();
  if (dtype_row_bytes(t.dtype, n) != t.nbytes)
    fail("tensor '{}' ({} {}) has {} bytes, expected {}", t.name, dtype_info(t.dtype).name, t.shape_str(),
         t.nbytes, dtype_row_bytes(t.dtype, n));
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_parallel(t.dtype, t.data, out.data(), n);
  return out;
}

}  // namespace longctx

// quantize.cpp: ggml reference quantizers (see quantize.h) and encode_f32().
//
//   Q8_0: d = max|x| / 127;            q = roundf(x / d)                     (round half away)
//   Q4_0: m = the x with largest |x| (sign kept); d = m / -8;  q = min(15, trunc(x/d + 8.5))
//   Q4_1: d = (max - min) / 15;  m = min;  q = min(15, trunc((x - min)/d + 0.5))
// "x / d" is computed as x * (1/d) with 1/d in fp32 (0 when d == 0), as ggml does; d is stored
// as fp16 after the quants are computed from the fp32 d.
#include "loader/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/error.h"
#include "util/half.h"

namespace longctx {
namespace {
constexpr int kQK = 32;

void store_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

void check_n(const char* what, int64_t n) {
  if (n < 0 || n % kQK != 0) fail("{}: {} elements is not a multiple of the block size {}", what, n, kQK);
}
}  // namespace

void quantize_row_q8_0(const float* x, void* dst, int64_t n) {
  check_n("quantize_row_q8_0", n);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK, out += 2 + kQK) {
    float amax = 0.f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    store_f16(out, d);
    for (int j = 0; j < kQK; ++j) out[2 + j] = uint8_t(int8_t(std::roundf(x[j] * id)));
  }
}

void quantize_row_q4_0(const float* x, void* dst, int64_t n) {
  check_n("quantize_row_q4_0", n);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK, out += 2 + kQK / 2) {
    float amax = 0.f, vmax = 0.f;
    for (int j = 0; j < kQK; ++j) {
      if (amax < std::fabs(x[j])) {  // first element of largest magnitude, sign kept
        amax = std::fabs(x[j]);
        vmax = x[j];
      }
    }
    const float d = vmax / -8.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    store_f16(out, d);
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t q0 = uint8_t(std::min(15, int(int8_t(x[j] * id + 8.5f))));
      const uint8_t q1 = uint8_t(std::min(15, int(int8_t(x[j + kQK / 2] * id + 8.5f))));
      out[2 + j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void quantize_row_q4_1(const float* x, void* dst, int64_t n) {
  check_n("quantize_row_q4_1", n);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK, out += 4 + kQK / 2) {
    float vmin = x[0], vmax = x[0];
    for (int j = 1; j < kQK; ++j) {
      vmin = std::min(vmin, x[j]);
      vmax = std::max(vmax, x[j]);
    }
    const float d = (vmax - vmin) / 15.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    store_f16(out, d);
    store_f16(out + 2, vmin);
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t q0 = uint8_t(std::min(15, int(int8_t((x[j] - vmin) * id + 0.5f))));
      const uint8_t q1 = uint8_t(std::min(15, int(int8_t((x[j + kQK / 2] - vmin) * id + 0.5f))));
      out[4 + j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

std::vector<uint8_t> encode_f32(DType t, const float* src, int64_t n) {
  std::vector<uint8_t> out(dtype_row_bytes(t, n));
  switch (t) {
    case DType::F32:
      if (n) std::memcpy(out.data(), src, out.size());
      break;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
    case DType::Q8_0: quantize_row_q8_0(src, out.data(), n); break;
    case DType::Q4_0: quantize_row_q4_0(src, out.data(), n); break;
    case DType::Q4_1: quantize_row_q4_1(src, out.data(), n); break;
    default: fail("cannot encode fp32 data as {}: longctx writes F32, F16, BF16, Q8_0, Q4_0 and Q4_1", dtype_info(t).name);
  }
  return out;
}

}  // namespace longctx

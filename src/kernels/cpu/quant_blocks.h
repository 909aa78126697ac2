// quant_blocks.h (cpu, internal): block layouts and field readers shared by the per-ISA kernels.
// Everything here has internal linkage, so each kernel file compiles its own copy for its own
// target (an inline function shared across targets could be linked as the AVX-512 copy).
#pragma once
#include <cstdint>
#include <cstring>

namespace longctx {
namespace {

constexpr int kQ4K = 256;            // weights per Q4_K super-block
constexpr int kQ4KBytes = 144;       // 2 + 2 + 12 + 128
constexpr int kQ4KSub = 8;           // sub-blocks of 32 per super-block

inline uint16_t read_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// fp16 -> fp32 (IEEE, exact), without F16C.
inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: value = man * 2^-24
    float f = float(man) * (1.f / 16777216.f);
    std::memcpy(&bits, &f, 4);
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Q4_K's 6-bit scale and min of sub-block j (ggml get_scale_min_k4).
inline void q4k_scale_min(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace
}  // namespace longctx

// quant_dot_scalar.cpp (cpu): the portable kernel set (plain C++, integer block sums), the
// fallback where neither AVX2 nor AVX-512 VNNI is available. See quant_dot.h.
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_dot.h"

namespace longctx {
namespace {

// Sum over the 32 weights of a 4-bit block (qs: 16 bytes, low nibbles first) times q8.
int32_t dot_nibbles(const uint8_t* qs, const int8_t* q8) {
  int32_t s = 0;
  for (int j = 0; j < 16; ++j) s += int32_t(qs[j] & 0xF) * q8[j] + int32_t(qs[j] >> 4) * q8[j + 16];
  return s;
}

// x: one activation row's blocks.
struct XRow {
  const int8_t* q;
  const float* d;
  const float* s;
};

float dot_row(QuantType type, const uint8_t* w, const XRow& x, int64_t n_in) {
  float sum = 0.f;
  switch (type) {
    case QuantType::q4_0:
      for (int64_t b = 0; b < n_in / 32; ++b, w += 18) {
        const float d = half_to_float(read_u16(w));
        sum += d * (x.d[b] * float(dot_nibbles(w + 2, x.q + b * 32)) - 8.f * x.s[b]);
      }
      break;
    case QuantType::q4_1:
      for (int64_t b = 0; b < n_in / 32; ++b, w += 20) {
        const float d = half_to_float(read_u16(w)), m = half_to_float(read_u16(w + 2));
        sum += d * x.d[b] * float(dot_nibbles(w + 4, x.q + b * 32)) + m * x.s[b];
      }
      break;
    case QuantType::q8_0:
      for (int64_t b = 0; b < n_in / 32; ++b, w += 34) {
        const auto* q = reinterpret_cast<const int8_t*>(w + 2);
        int32_t s = 0;
        for (int j = 0; j < 32; ++j) s += int32_t(q[j]) * x.q[b * 32 + j];
        sum += half_to_float(read_u16(w)) * x.d[b] * float(s);
      }
      break;
    case QuantType::q4_k:
      for (int64_t sb = 0; sb < n_in / kQ4K; ++sb, w += kQ4KBytes) {
        const float d = half_to_float(read_u16(w)), dmin = half_to_float(read_u16(w + 2));
        const uint8_t* scales = w + 4;
        const uint8_t* qs = w + 16;
        const int64_t b0 = sb * kQ4KSub;
        for (int j = 0; j < kQ4KSub; ++j) {
          int sc, m;
          q4k_scale_min(j, scales, sc, m);
          const uint8_t* q = qs + (j / 2) * 32;
          const int shift = (j % 2) * 4;
          int32_t s = 0;
          for (int i = 0; i < 32; ++i) s += int32_t((q[i] >> shift) & 0xF) * x.q[(b0 + j) * 32 + i];
          sum += d * float(sc) * x.d[b0 + j] * float(s) - dmin * float(m) * x.s[b0 + j];
        }
      }
      break;
  }
  return sum;
}

}  // namespace

void quant_gemm_tile_scalar(const QuantTile& p) {
  const int64_t nb = p.x->nb;
  for (int64_t t = 0; t < p.T; ++t) {
    const int64_t i = (p.t0 + t) * nb;
    const XRow x{p.x->q.data() + i * kQ8Block, p.x->d.data() + i, p.x->s.data() + i};
    for (int64_t r = 0; r < p.rows; ++r) p.y[t * p.ldy + r] = dot_row(p.type, p.w + r * p.row_bytes, x, p.n_in);
  }
}

}  // namespace longctx

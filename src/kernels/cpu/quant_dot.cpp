// quant_dot.cpp (cpu): type table, activation quantization and the ISA dispatch of quant_dot.h.
#include "kernels/cpu/quant_dot.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace longctx {

const QuantTypeInfo& quant_type_info(QuantType t) {
  static const QuantTypeInfo kInfo[] = {{"Q4_0", 32, 18}, {"Q4_1", 32, 20}, {"Q8_0", 32, 34}, {"Q4_K", 256, 144}};
  return kInfo[int(t)];
}

void Q8Rows::resize(int64_t rows, int64_t blocks) {
  T = rows;
  nb = blocks;
  q.resize(size_t(T * nb * kQ8Block));
  d.resize(size_t(T * nb));
  s.resize(size_t(T * nb));
}

void quantize_q8_rows(const float* x, int64_t t0, int64_t t1, Q8Rows& xq) {
  quantize_q8_rows(x, t0, t1, xq, best_cpu_isa());
}

void quantize_q8_rows(const float* x, int64_t t0, int64_t t1, Q8Rows& xq, CpuIsa isa) {
  if (isa != CpuIsa::scalar) {
    if (!cpu_isa_supported(isa)) fail("quantize_q8_rows: this CPU cannot run the {} kernels", cpu_isa_name(isa));
    return quantize_q8_rows_avx2(x, t0, t1, xq);
  }
  for (int64_t i = t0 * xq.nb; i < t1 * xq.nb; ++i) {  // block i of the flattened rows
    const float* xb = x + i * kQ8Block;
    float amax = 0.f;
    for (int j = 0; j < kQ8Block; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    int8_t* q = xq.q.data() + i * kQ8Block;
    int32_t sum = 0;
    for (int j = 0; j < kQ8Block; ++j) {
      const int v = int(std::nearbyint(xb[j] * id));
      q[j] = int8_t(v);
      sum += v;
    }
    xq.d[size_t(i)] = d;
    xq.s[size_t(i)] = d * float(sum);
  }
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::scalar: return "scalar";
    case CpuIsa::avx2: return "avx2";
    case CpuIsa::avx512vnni: return "avx512vnni";
  }
  return "?";
}

bool cpu_isa_supported(CpuIsa isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  switch (isa) {
    case CpuIsa::scalar: return true;
    case CpuIsa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case CpuIsa::avx512vnni:
      return cpu_isa_supported(CpuIsa::avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512vnni");
  }
  return false;
#else
  return isa == CpuIsa::scalar;
#endif
}

CpuIsa best_cpu_isa() {
  static const CpuIsa best = [] {
    for (CpuIsa isa : {CpuIsa::avx512vnni, CpuIsa::avx2})
      if (cpu_isa_supported(isa)) return isa;
    return CpuIsa::scalar;
  }();
  return best;
}

void quant_gemm_tile(const QuantTile& p, CpuIsa isa) {
  if (p.n_in % quant_type_info(p.type).block_size != 0)
    fail("quant_gemm_tile: {} inputs is not a multiple of {}'s block size", p.n_in, quant_type_info(p.type).name);
  if (!cpu_isa_supported(isa)) fail("quant_gemm_tile: this CPU cannot run the {} kernels", cpu_isa_name(isa));
  switch (isa) {
    case CpuIsa::scalar: return quant_gemm_tile_scalar(p);
    case CpuIsa::avx2: return quant_gemm_tile_avx2(p);
    case CpuIsa::avx512vnni: return quant_gemm_tile_avx512vnni(p);
  }
}

}  // namespace longctx

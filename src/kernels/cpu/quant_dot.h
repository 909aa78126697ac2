// quant_dot.h (cpu): dot products of ggml-quantized weight rows with Q8-quantized activations.
//
// The fast CPU matmul keeps a GGUF file's weights in their block format (4 or 8 bits a weight)
// and quantizes each activation row to 8 bits in blocks of 32 (Q8Rows), so a decode GEMV reads
// ~0.6 bytes a weight instead of fp32's 4 and the inner loop is an int8 dot product.
//
// Weight blocks are ggml's, byte for byte (loader/dequant_*.cpp gives their values):
//   Q4_0: {fp16 d; u8 qs[16]}            w = d * (q - 8)            32 weights, 18 bytes
//   Q4_1: {fp16 d, m; u8 qs[16]}         w = d * q + m              32 weights, 20 bytes
//   Q8_0: {fp16 d; i8 qs[32]}            w = d * q                  32 weights, 34 bytes
//   Q4_K: {fp16 d, dmin; u8 sc[12]; u8 qs[128]}  256 weights in 8 sub-blocks of 32 with 6-bit
//         scales s_j and mins m_j:       w = d * s_j * q - dmin * m_j          144 bytes
// (nibbles: byte j of a 32-weight block holds weights j (low) and j + 16 (high); in Q4_K each
// 32 bytes hold sub-block 2k (low nibbles) and 2k + 1 (high)).
// A block dot is then d_w * d_x * sum(q_w q_x) plus a term in s_x = d_x * sum(q_x) for the offset
// types (Q4_0: -8 d_w s_x; Q4_1: + m s_x; Q4_K: - dmin m_j s_x), all integer sums exact.
//
// Kernels exist per instruction set, compiled with target attributes (never -march at run time)
// and picked at startup by CPU feature (best_cpu_isa()): AVX-512 VNNI (vpdpbusd), AVX2
// (vpmaddubsw), and a portable scalar one. Tests run every ISA the CPU has. For prefill-sized
// tiles the AVX-512 set repacks the weights into 16-row panels (see below).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace longctx {

enum class QuantType { q4_0, q4_1, q8_0, q4_k };

struct QuantTypeInfo {
  const char* name;  // "Q4_0"
  int block_size;    // weights per block
  int block_bytes;   // bytes per block
};
const QuantTypeInfo& quant_type_info(QuantType t);

enum class CpuIsa { scalar, avx2, avx512vnni };

// Activation rows quantized to 8 bits in blocks of 32 (structure of arrays, so the kernels load
// 8 blocks' scales as one vector): block b of row t is x[t, 32 b + i] ~= d * q[i] with
// d = max|x| / 127 (ggml's Q8_0 rule, so |x - d q| <= d / 2) and s = d * sum(q).
constexpr int kQ8Block = 32;
struct Q8Rows {
  int64_t T = 0, nb = 0;       // rows, blocks per row
  std::vector<int8_t> q;       // [T, nb, 32]
  std::vector<float> d, s;     // [T, nb]
  void resize(int64_t rows, int64_t blocks);  // keeps the storage when it is large enough
};
// Rows [t0, t1) of x [T, 32 * xq.nb] into xq (already sized); every ISA gives the same bytes.
void quantize_q8_rows(const float* x, int64_t t0, int64_t t1, Q8Rows& xq);  // the best ISA
void quantize_q8_rows(const float* x, int64_t t0, int64_t t1, Q8Rows& xq, CpuIsa isa);

const char* cpu_isa_name(CpuIsa isa);
bool cpu_isa_supported(CpuIsa isa);  // the CPU (and OS) can run this kernel set
CpuIsa best_cpu_isa();              // detected once

// A tile of the product: y[t * ldy + r] = sum_i W[r, i] * x[t, i] for r < rows, t < T, where
// W's rows are `rows` consecutive rows of `row_bytes` bytes from w (n_in weights each, a
// multiple of the type's block size) and x row t is row t0 + t of the quantized activations.
struct QuantTile {
  QuantType type = QuantType::q4_0;
  const uint8_t* w = nullptr;
  size_t row_bytes = 0;
  int64_t n_in = 0;
  int64_t rows = 0;
  const Q8Rows* x = nullptr;
  int64_t t0 = 0, T = 0;
  float* y = nullptr;
  int64_t ldy = 0;
  // false: every token row's y exactly as a tile of that row alone gives it (no panel kernel,
  // whose fp32 summation order differs): a decode batch, whose rows are separate sequences.
  bool panels = true;
};
void quant_gemm_tile(const QuantTile& p, CpuIsa isa);

// The per-ISA kernels behind quant_gemm_tile (quant_dot_<isa>.cpp).
void quant_gemm_tile_scalar(const QuantTile& p);
void quant_gemm_tile_avx2(const QuantTile& p);
void quant_gemm_tile_avx512vnni(const QuantTile& p);
void quantize_q8_rows_avx2(const float* x, int64_t t0, int64_t t1, Q8Rows& xq);  // AVX2 and up
// Every type with AVX-512 VNNI from kPanelMinTokens token rows up
// (quant_dot_avx512_panels.cpp: weights repacked 16 rows at a time, no horizontal sums). At 4
// rows the repacking already pays (1.2-1.4x the other kernel's speed, bench_quant_gemm), at 2 not.
constexpr int64_t kPanelMinTokens = 4;
void quant_gemm_tile_panels_avx512(const QuantTile& p);

}  // namespace longctx

// dequant_blocks.h: per-type block dequantizers (internal to the loader; dequantize() dispatches).
//
// Each function turns nb consecutive blocks at src into nb * block_size floats at dst, with
// exactly ggml's block layout and arithmetic (operation order included, so results match ggml
// and gguf-py bit for bit; the loader is compiled with -ffp-contract=off for that reason).
#pragma once
#include <cstdint>
#include <cstring>

#include "util/half.h"

namespace longctx::dq {

// Little-endian loads from unaligned block bytes.
inline uint16_t load_u16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
inline uint32_t load_u32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
inline float load_f16(const uint8_t* p) { return f16_to_f32(load_u16(p)); }
inline float load_f32(const uint8_t* p) { float v; std::memcpy(&v, p, 4); return v; }

void q4_0(const uint8_t* src, float* dst, int64_t nb);
void q4_1(const uint8_t* src, float* dst, int64_t nb);
void q5_0(const uint8_t* src, float* dst, int64_t nb);
void q5_1(const uint8_t* src, float* dst, int64_t nb);
void q8_0(const uint8_t* src, float* dst, int64_t nb);
void q2_k(const uint8_t* src, float* dst, int64_t nb);
void q3_k(const uint8_t* src, float* dst, int64_t nb);
void q4_k(const uint8_t* src, float* dst, int64_t nb);
void q5_k(const uint8_t* src, float* dst, int64_t nb);
void q6_k(const uint8_t* src, float* dst, int64_t nb);
void q8_k(const uint8_t* src, float* dst, int64_t nb);

}  // namespace longctx::dq

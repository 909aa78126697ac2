// gguf_format.h: constants of the GGUF container format shared by the reader and the writer.
//
// GGUF (ggml's model file), little-endian:
//   "GGUF" | u32 version (2 or 3) | u64 n_tensors | u64 n_kv
//   n_kv x   { string key | u32 value_type | value }
//   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] (innermost first) | u32 ggml_type | u64 offset }
//   padding to `general.alignment` (default 32) | data section (tensor offsets are relative to it)
// string = u64 length + bytes; array value = u32 element type | u64 count | elements.
// Version 1 used u32 counts and lengths; it is long obsolete and rejected.
#pragma once
#include <cstdint>
#include <string_view>

namespace longctx::gguf {

inline constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
inline constexpr uint32_t kMinVersion = 2;
inline constexpr uint32_t kMaxVersion = 3;
inline constexpr uint32_t kWriteVersion = 3;
inline constexpr uint32_t kDefaultAlignment = 32;  // when general.alignment is absent
inline constexpr uint32_t kMaxDims = 4;            // GGML_MAX_DIMS
inline constexpr const char* kAlignmentKey = "general.alignment";
// Arrays may nest (array of arrays); real files nest at most once. The bound keeps a hostile
// file from recursing the parser off the stack.
inline constexpr int kMaxArrayNesting = 16;

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
inline constexpr uint32_t kNumValueTypes = 13;

inline std::string_view value_type_name(ValueType t) {
  constexpr std::string_view names[kNumValueTypes] = {"uint8", "int8",   "uint16", "int16", "uint32",
                                                      "int32", "float32", "bool",  "string", "array",
                                                      "uint64", "int64", "float64"};
  return uint32_t(t) < kNumValueTypes ? names[uint32_t(t)] : "unknown";
}

// Smallest encoded size of one value of type t (a string or array is at least its header),
// used to bound element counts by the bytes left before allocating anything.
inline uint64_t min_value_bytes(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    case ValueType::STRING: return 8;      // u64 length
    case ValueType::ARRAY: return 4 + 8;   // u32 type + u64 count
  }
  return 1;
}

// ggml type ids that exist in ggml but that longctx does not read (for a precise message).
inline std::string_view unsupported_ggml_type_name(uint32_t id) {
  switch (id) {
    case 4: return "Q4_2 (removed from ggml)";
    case 5: return "Q4_3 (removed from ggml)";
    case 16: return "IQ2_XXS";
    case 17: return "IQ2_XS";
    case 18: return "IQ3_XXS";
    case 19: return "IQ1_S";
    case 20: return "IQ4_NL";
    case 21: return "IQ3_S";
    case 22: return "IQ2_S";
    case 23: return "IQ4_XS";
    case 29: return "IQ1_M";
    case 31: return "Q4_0_4_4 (removed from ggml)";
    case 32: return "Q4_0_4_8 (removed from ggml)";
    case 33: return "Q4_0_8_8 (removed from ggml)";
    case 34: return "TQ1_0";
    case 35: return "TQ2_0";
    case 39: return "MXFP4";
    default: return {};
  }
}

}  // namespace longctx::gguf

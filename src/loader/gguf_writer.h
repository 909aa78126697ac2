// gguf_writer.h: write GGUF v3 files (test fixtures and the engine's tiny test models).
//
//   GgufWriter w;
//   w.add_string("general.architecture", "llama");
//   w.add_u32("llama.block_count", 2);
//   w.add("tokenizer.ggml.tokens", GgufValue::strings({"<s>", "a"}));
//   w.add_tensor("token_embd.weight", {vocab, dim}, DType::Q8_0, data);  // row-major shape, fp32 data
//   w.write("tiny.gguf");                                                  // or w.bytes()
// Tensor data is aligned to 32 bytes (or to a uint32 general.alignment the caller adds), each
// tensor padded with zeros to the alignment, as ggml writes it. Quantization (Q8_0/Q4_0/Q4_1)
// uses ggml's reference rounding, see quantize.h.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "loader/gguf_format.h"
#include "loader/model_file.h"

namespace longctx {

// One metadata value, already encoded (payload without the leading type tag).
class GgufValue {
 public:
  static GgufValue u8(uint8_t v);
  static GgufValue i8(int8_t v);
  static GgufValue u16(uint16_t v);
  static GgufValue i16(int16_t v);
  static GgufValue u32(uint32_t v);
  static GgufValue i32(int32_t v);
  static GgufValue f32(float v);
  static GgufValue boolean(bool v);
  static GgufValue string(std::string_view v);
  static GgufValue u64(uint64_t v);
  static GgufValue i64(int64_t v);
  static GgufValue f64(double v);
  // An array of items that all have type elem (arrays of arrays allowed; inner arrays may differ).
  static GgufValue array(gguf::ValueType elem, const std::vector<GgufValue>& items);
  static GgufValue strings(const std::vector<std::string>& items);
  static GgufValue i32s(const std::vector<int32_t>& items);
  static GgufValue f32s(const std::vector<float>& items);

  gguf::ValueType type() const { return type_; }
  const std::vector<uint8_t>& payload() const { return payload_; }

 private:
  GgufValue(gguf::ValueType t, std::vector<uint8_t> p) : type_(t), payload_(std::move(p)) {}
  gguf::ValueType type_;
  std::vector<uint8_t> payload_;
};

class GgufWriter {
 public:
  void add(const std::string& key, const GgufValue& v);  // throws on a duplicate key
  void add_u32(const std::string& key, uint32_t v) { add(key, GgufValue::u32(v)); }
  void add_i32(const std::string& key, int32_t v) { add(key, GgufValue::i32(v)); }
  void add_u64(const std::string& key, uint64_t v) { add(key, GgufValue::u64(v)); }
  void add_f32(const std::string& key, float v) { add(key, GgufValue::f32(v)); }
  void add_bool(const std::string& key, bool v) { add(key, GgufValue::boolean(v)); }
  void add_string(const std::string& key, std::string_view v) { add(key, GgufValue::string(v)); }
  void add_string_array(const std::string& key, const std::vector<std::string>& v) { add(key, GgufValue::strings(v)); }

  // shape is row-major (outermost first); data holds numel fp32 values, encoded as `type`
  // (F32, F16, BF16, Q8_0, Q4_0, Q4_1).
  void add_tensor(const std::string& name, const std::vector<int64_t>& shape, DType type, std::span<const float> data);
  // Already-encoded bytes of any known dtype (dtype_row_bytes(type, numel) of them).
  void add_tensor_bytes(const std::string& name, const std::vector<int64_t>& shape, DType type, std::vector<uint8_t> bytes);

  std::vector<uint8_t> bytes() const;
  void write(const std::string& path) const;  // throws Error naming the path on I/O failure

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    DType type;
    std::vector<uint8_t> data;
  };
  std::vector<std::pair<std::string, GgufValue>> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace longctx

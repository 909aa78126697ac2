// gguf_writer.cpp: GGUF v3 serialisation (see gguf_writer.h and the layout in gguf_format.h).
#include "loader/gguf_writer.h"

#include <cstring>

#include "loader/quantize.h"
#include "loader/write_file.h"
#include "util/error.h"

namespace longctx {
namespace {

using gguf::ValueType;

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

template <class T>
std::vector<uint8_t> encoded(T v) {
  std::vector<uint8_t> p;
  put<T>(p, v);
  return p;
}

void check_shape(const std::string& name, const std::vector<int64_t>& shape, DType type) {
  if (name.empty()) fail("GgufWriter: tensor with an empty name");
  if (shape.size() > gguf::kMaxDims) fail("GgufWriter: tensor '{}' has {} dims (GGUF allows {})", name, shape.size(), gguf::kMaxDims);
  for (int64_t d : shape)
    if (d <= 0) fail("GgufWriter: tensor '{}' has a dimension {} (must be > 0)", name, d);
  const DTypeInfo& di = dtype_info(type);
  const int64_t inner = shape.empty() ? 1 : shape.back();
  if (inner % di.block_size != 0)
    fail("GgufWriter: tensor '{}' innermost dim {} is not a multiple of the {} block size {}", name, inner, di.name, di.block_size);
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

GgufValue GgufValue::u8(uint8_t v) { return {ValueType::UINT8, encoded(v)}; }
GgufValue GgufValue::i8(int8_t v) { return {ValueType::INT8, encoded(v)}; }
GgufValue GgufValue::u16(uint16_t v) { return {ValueType::UINT16, encoded(v)}; }
GgufValue GgufValue::i16(int16_t v) { return {ValueType::INT16, encoded(v)}; }
GgufValue GgufValue::u32(uint32_t v) { return {ValueType::UINT32, encoded(v)}; }
GgufValue GgufValue::i32(int32_t v) { return {ValueType::INT32, encoded(v)}; }
GgufValue GgufValue::f32(float v) { return {ValueType::FLOAT32, encoded(v)}; }
GgufValue GgufValue::boolean(bool v) { return {ValueType::BOOL, encoded<uint8_t>(v ? 1 : 0)}; }
GgufValue GgufValue::u64(uint64_t v) { return {ValueType::UINT64, encoded(v)}; }
GgufValue GgufValue::i64(int64_t v) { return {ValueType::INT64, encoded(v)}; }
GgufValue GgufValue::f64(double v) { return {ValueType::FLOAT64, encoded(v)}; }

GgufValue GgufValue::string(std::string_view v) {
  std::vector<uint8_t> p;
  put_string(p, v);
  return {ValueType::STRING, std::move(p)};
}

GgufValue GgufValue::array(ValueType elem, const std::vector<GgufValue>& items) {
  std::vector<uint8_t> p;
  put<uint32_t>(p, uint32_t(elem));
  put<uint64_t>(p, items.size());
  for (const auto& it : items) {
    if (it.type() != elem)
      fail("GgufValue::array: element of type {} in an array of {}", gguf::value_type_name(it.type()),
           gguf::value_type_name(elem));
    p.insert(p.end(), it.payload().begin(), it.payload().end());
  }
  return {ValueType::ARRAY, std::move(p)};
}

GgufValue GgufValue::strings(const std::vector<std::string>& items) {
  std::vector<uint8_t> p;
  put<uint32_t>(p, uint32_t(ValueType::STRING));
  put<uint64_t>(p, items.size());
  for (const auto& s : items) put_string(p, s);
  return {ValueType::ARRAY, std::move(p)};
}

GgufValue GgufValue::i32s(const std::vector<int32_t>& items) {
  std::vector<uint8_t> p;
  put<uint32_t>(p, uint32_t(ValueType::INT32));
  put<uint64_t>(p, items.size());
  for (int32_t v : items) put<int32_t>(p, v);
  return {ValueType::ARRAY, std::move(p)};
}

GgufValue GgufValue::f32s(const std::vector<float>& items) {
  std::vector<uint8_t> p;
  put<uint32_t>(p, uint32_t(ValueType::FLOAT32));
  put<uint64_t>(p, items.size());
  for (float v : items) put<float>(p, v);
  return {ValueType::ARRAY, std::move(p)};
}

void GgufWriter::add(const std::string& key, const GgufValue& v) {
  for (const auto& [k, _] : kvs_)
    if (k == key) fail("GgufWriter: metadata key '{}' added twice", key);
  if (key == gguf::kAlignmentKey) {
    uint32_t a = 0;
    if (v.type() == ValueType::UINT32) std::memcpy(&a, v.payload().data(), 4);
    if (a == 0 || (a & (a - 1)) != 0) fail("GgufWriter: {} must be a uint32 power of two", key);
  }
  kvs_.emplace_back(key, v);
}

void GgufWriter::add_tensor(const std::string& name, const std::vector<int64_t>& shape, DType type,
                            std::span<const float> data) {
  check_shape(name, shape, type);
  const int64_t n = numel_of(shape);
  if (int64_t(data.size()) != n)
    fail("GgufWriter: tensor '{}' has shape with {} elements but {} values were given", name, n, data.size());
  add_tensor_bytes(name, shape, type, encode_f32(type, data.data(), n));
}

void GgufWriter::add_tensor_bytes(const std::string& name, const std::vector<int64_t>& shape, DType type,
                                  std::vector<uint8_t> bytes) {
  check_shape(name, shape, type);
  for (const auto& t : tensors_)
    if (t.name == name) fail("GgufWriter: tensor '{}' added twice", name);
  const size_t want = dtype_row_bytes(type, numel_of(shape));
  if (bytes.size() != want)
    fail("GgufWriter: tensor '{}' ({}) needs {} bytes, got {}", name, dtype_info(type).name, want, bytes.size());
  tensors_.push_back({name, shape, type, std::move(bytes)});
}

std::vector<uint8_t> GgufWriter::bytes() const {
  uint64_t align = gguf::kDefaultAlignment;
  for (const auto& [k, v] : kvs_)
    if (k == gguf::kAlignmentKey) {
      uint32_t a;
      std::memcpy(&a, v.payload().data(), 4);
      align = a;
    }
  auto pad = [&](uint64_t x) { return (x + align - 1) / align * align; };

  std::vector<uint8_t> out(sizeof gguf::kMagic);
  std::memcpy(out.data(), gguf::kMagic, sizeof gguf::kMagic);
  put<uint32_t>(out, gguf::kWriteVersion);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kvs_.size());
  for (const auto& [k, v] : kvs_) {
    put_string(out, k);
    put<uint32_t>(out, uint32_t(v.type()));
    out.insert(out.end(), v.payload().begin(), v.payload().end());
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, uint32_t(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put<uint64_t>(out, uint64_t(*it));  // ne[]: innermost first
    put<uint32_t>(out, uint32_t(t.type));
    put<uint64_t>(out, offset);
    offset += pad(t.data.size());
  }
  out.resize(pad(out.size()), 0);
  for (const auto& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    out.resize(pad(out.size()), 0);
  }
  return out;
}

void GgufWriter::write(const std::string& path) const {
  const auto b = bytes();
  write_file_bytes(path, b.data(), b.size());
}

}  // namespace longctx

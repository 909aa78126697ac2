// dtype.cpp: the dtype table (block sizes and bytes as in ggml), TensorView and ModelFile helpers.
//
// The block layouts behind these sizes are documented next to their dequantizers in
// dequant_*.cpp. Sizes follow ggml's block structs (ggml-common.h); QK_K = 256.
#include <array>
#include <limits>

#include "loader/model_file.h"
#include "util/error.h"

namespace longctx {
namespace {

constexpr int kQK = 32;    // elements per block of the legacy quants (Q4_0 ... Q8_1)
constexpr int kQKK = 256;  // elements per super-block of the k-quants (QK_K)

struct Entry {
  uint32_t id;
  DTypeInfo info;
};

// name, block_size, block_bytes, can_dequantize
constexpr std::array<Entry, 20> kTable{{
    {0, {"F32", 1, 4, true}},
    {1, {"F16", 1, 2, true}},
    {2, {"Q4_0", kQK, 2 + kQK / 2, true}},           // d, 4-bit quants
    {3, {"Q4_1", kQK, 2 + 2 + kQK / 2, true}},       // d, m, 4-bit quants
    {6, {"Q5_0", kQK, 2 + 4 + kQK / 2, true}},       // d, high bits, low nibbles
    {7, {"Q5_1", kQK, 2 + 2 + 4 + kQK / 2, true}},   // d, m, high bits, low nibbles
    {8, {"Q8_0", kQK, 2 + kQK, true}},               // d, int8 quants
    {9, {"Q8_1", kQK, 2 + 2 + kQK, false}},          // d, s, int8 (ggml has no dequantizer)
    {10, {"Q2_K", kQKK, kQKK / 16 + kQKK / 4 + 2 + 2, true}},             // 84
    {11, {"Q3_K", kQKK, kQKK / 8 + kQKK / 4 + 12 + 2, true}},             // 110
    {12, {"Q4_K", kQKK, 2 + 2 + 12 + kQKK / 2, true}},                    // 144
    {13, {"Q5_K", kQKK, 2 + 2 + 12 + kQKK / 8 + kQKK / 2, true}},         // 176
    {14, {"Q6_K", kQKK, kQKK / 2 + kQKK / 4 + kQKK / 16 + 2, true}},      // 210
    {15, {"Q8_K", kQKK, 4 + kQKK + 2 * (kQKK / 16), true}},               // 292
    {24, {"I8", 1, 1, false}},
    {25, {"I16", 1, 2, false}},
    {26, {"I32", 1, 4, false}},
    {27, {"I64", 1, 8, false}},
    {28, {"F64", 1, 8, true}},
    {30, {"BF16", 1, 2, true}},
}};

const Entry* lookup(uint32_t raw) {
  for (const auto& e : kTable)
    if (e.id == raw) return &e;
  return nullptr;
}

}  // namespace

bool dtype_is_known(uint32_t raw) { return lookup(raw) != nullptr; }

const DTypeInfo& dtype_info(DType t) {
  const Entry* e = lookup(uint32_t(t));
  if (!e) fail("unknown dtype id {}", uint32_t(t));
  return e->info;
}

size_t dtype_row_bytes(DType t, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  if (n < 0) fail("dtype_row_bytes: negative element count {} for {}", n, info.name);
  if (n % info.block_size != 0)
    fail("{} elements of {} are not a multiple of its block size {}", n, info.name, info.block_size);
  const uint64_t blocks = uint64_t(n / info.block_size);
  if (blocks > std::numeric_limits<uint64_t>::max() / uint64_t(info.block_bytes))
    fail("{} elements of {} overflow a byte count", n, info.name);
  return size_t(blocks * uint64_t(info.block_bytes));
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // readers validated the product against overflow
  return n;
}

std::string TensorView::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

const TensorView* ModelFile::find(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorView& ModelFile::get(std::string_view name) const {
  if (const TensorView* t = find(name)) return *t;
  fail("tensor '{}' not found in '{}' ({} tensors)", name, path_, tensors_.size());
}

}  // namespace longctx

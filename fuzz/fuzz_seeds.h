// fuzz_seeds.h: small valid GGUF and safetensors images made with the loader's writers: the
// seed corpus of fuzz/run_fuzz.sh and the base buffers of the CTest fuzz smoke.
#pragma once
#include <cstdint>
#include <vector>

#include "loader/gguf_writer.h"
#include "loader/safetensors_writer.h"

namespace longctx::fuzz {

// A GGUF with every metadata value type, a nested array, and tensors of several dtypes
// (including raw k-quant blocks, so mutated scales reach the dequantizers).
inline std::vector<uint8_t> seed_gguf() {
  using gguf::ValueType;
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 1);
  w.add_f32("llama.rope.freq_base", 10000.f);
  w.add("u8", GgufValue::u8(1));
  w.add("i8", GgufValue::i8(-1));
  w.add("u16", GgufValue::u16(2));
  w.add("i16", GgufValue::i16(-2));
  w.add("i32", GgufValue::i32(-3));
  w.add("b", GgufValue::boolean(true));
  w.add("u64", GgufValue::u64(5));
  w.add("i64", GgufValue::i64(-5));
  w.add("f64", GgufValue::f64(0.5));
  w.add_string_array("tokenizer.ggml.tokens", {"<s>", "</s>", "a", "b"});
  w.add("tokenizer.ggml.scores", GgufValue::f32s({0.f, 0.f, -1.f, -2.f}));
  w.add("nested", GgufValue::array(ValueType::ARRAY, {GgufValue::i32s({1, 2}), GgufValue::strings({"x"})}));
  std::vector<float> v(64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(int(i % 7) - 3) * 0.25f;
  w.add_tensor("token_embd.weight", {2, 32}, DType::Q8_0, v);
  w.add_tensor("blk.0.attn_q.weight", {2, 32}, DType::Q4_0, v);
  w.add_tensor("blk.0.attn_k.weight", {1, 64}, DType::Q4_1, v);
  w.add_tensor("blk.0.attn_norm.weight", {8}, DType::F32, std::span<const float>(v.data(), 8));
  w.add_tensor("blk.0.ffn_norm.weight", {8}, DType::F16, std::span<const float>(v.data(), 8));
  w.add_tensor("output_norm.weight", {8}, DType::BF16, std::span<const float>(v.data(), 8));
  const DType kq[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K, DType::Q5_0, DType::Q5_1};
  uint32_t x = 12345;
  for (DType t : kq) {
    const auto& di = dtype_info(t);
    std::vector<uint8_t> blk(size_t(di.block_bytes));
    for (auto& c : blk) c = uint8_t((x = x * 1664525u + 1013904223u) >> 24);
    w.add_tensor_bytes(std::string("raw.") + di.name, {di.block_size}, t, blk);
  }
  return w.bytes();
}

inline std::vector<uint8_t> seed_safetensors() {
  std::vector<uint8_t> i32(12, 1);
  return safetensors_bytes({{"model.embed_tokens.weight", DType::BF16, {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}, {}},
                            {"model.norm.weight", DType::F32, {4}, {1, 1, 1, 1}, {}},
                            {"model.layers.0.mlp.up_proj.weight", DType::F16, {2, 2}, {0.5f, -1, 2, 0}, {}},
                            {"ids", DType::I32, {3}, {}, i32},
                            {"scalar", DType::F64, {}, {}, std::vector<uint8_t>(8, 0)}},
                           {{"format", "pt"}});
}

}  // namespace longctx::fuzz

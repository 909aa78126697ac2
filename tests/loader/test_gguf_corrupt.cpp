// test_gguf_corrupt.cpp: every kind of broken GGUF file must throw longctx::Error with a message
// naming the problem (file, key, tensor, offset), never crash or read out of bounds.
#include <gtest/gtest.h>

#include <cstring>

#include "loader/gguf_reader.h"
#include "loader/gguf_writer.h"
#include "gguf_raw.h"
#include "test_util.h"

namespace longctx {
namespace {

using test::RawBytes;
using test::RawGguf;
using test::RawTensor;
using test::expect_error;

constexpr uint32_t kF32 = 0, kQ4_0 = 2, kStringType = 8, kArrayType = 9, kU32Type = 4;

void expect_gguf_error(const std::vector<uint8_t>& b, const std::vector<std::string>& parts) {
  expect_error([&] { open_gguf_bytes(b, "corrupt.gguf"); }, parts);
}

std::vector<uint8_t> valid_file(uint64_t* payload_end) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 2);
  w.add_string_array("tokenizer.ggml.tokens", {"<s>", "</s>", "hello"});
  w.add("nested", GgufValue::array(gguf::ValueType::ARRAY, {GgufValue::i32s({1, 2, 3})}));
  w.add_tensor("blk.0.attn_q.weight", {2, 32}, DType::Q8_0, test::random_floats(64, 1));
  w.add_tensor("output_norm.weight", {5}, DType::F32, test::random_floats(5, 2));
  auto b = w.bytes();
  auto f = open_gguf_bytes(b, "valid.gguf");
  const auto& t = f->get("output_norm.weight");
  *payload_end = uint64_t(t.data - b.data()) + t.nbytes;  // the last tensor ends here (padding after)
  return b;
}

TEST(GgufCorrupt, TruncatedAtEveryCutPoint) {
  uint64_t end = 0;
  const auto full = valid_file(&end);
  for (uint64_t cut = 0; cut < end; ++cut) {
    std::vector<uint8_t> b(full.begin(), full.begin() + long(cut));
    SCOPED_TRACE("cut at " + std::to_string(cut));
    expect_gguf_error(b, {"corrupt.gguf", "truncated"});
  }
  // A cut inside a tensor's data names the tensor and how many bytes are missing.
  std::vector<uint8_t> b(full.begin(), full.begin() + long(end - 3));
  expect_gguf_error(b, {"output_norm.weight", "3 bytes missing"});
}

TEST(GgufCorrupt, BadMagicAndVersion) {
  RawGguf g;
  std::memcpy(g.magic, "GGML", 4);
  expect_gguf_error(g.build(), {"corrupt.gguf", "not a GGUF file", "GGML"});
  std::memcpy(g.magic, "\x00\x01GG", 4);
  expect_gguf_error(g.build(), {"\\x00\\x01GG"});
  g = RawGguf{};
  g.version = 1;
  expect_gguf_error(g.build(), {"version 1", "obsolete"});
  g.version = 4;
  expect_gguf_error(g.build(), {"unsupported GGUF version 4"});
  g.version = 0x03000000;  // a big-endian v3 file
  expect_gguf_error(g.build(), {"big-endian"});
}

TEST(GgufCorrupt, HugeCounts) {
  RawGguf g;
  g.n_tensors = uint64_t(1) << 62;
  expect_gguf_error(g.build(), {"4611686018427387904 tensors"});
  g = RawGguf{};
  g.n_kv = ~uint64_t(0);
  expect_gguf_error(g.build(), {"18446744073709551615 metadata entries"});

  // An array claiming 2^40 strings, a string claiming 2^60 bytes, a key claiming 2^50 bytes.
  g = RawGguf{};
  g.add_kv("tokenizer.ggml.tokens", kArrayType, RawBytes().put<uint32_t>(kStringType).put<uint64_t>(uint64_t(1) << 40));
  g.data_bytes = 64;
  expect_gguf_error(g.build(), {"tokenizer.ggml.tokens", "1099511627776"});
  g = RawGguf{};
  g.add_kv("general.name", kStringType, RawBytes().put<uint64_t>(uint64_t(1) << 60));
  g.data_bytes = 64;
  expect_gguf_error(g.build(), {"general.name", "truncated"});
  g = RawGguf{};
  g.kv.put<uint64_t>(uint64_t(1) << 50);
  g.kv_count = 1;
  g.data_bytes = 64;
  expect_gguf_error(g.build(), {"key of metadata entry 0", "truncated"});
}

TEST(GgufCorrupt, BadMetadataValues) {
  RawGguf g;
  g.add_kv("weird.key", 77, RawBytes().put<uint32_t>(1));
  expect_gguf_error(g.build(), {"weird.key", "unknown value type 77"});
  g = RawGguf{};
  g.add_kv("arr.key", kArrayType, RawBytes().put<uint32_t>(99).put<uint64_t>(0));
  expect_gguf_error(g.build(), {"arr.key", "unknown value type 99"});
  g = RawGguf{};
  g.add_kv("flag", 7, RawBytes().put<uint8_t>(2));
  expect_gguf_error(g.build(), {"flag", "bool value 2"});
  g = RawGguf{};
  g.add_kv("dup", kU32Type, RawBytes().put<uint32_t>(1)).add_kv("dup", kU32Type, RawBytes().put<uint32_t>(2));
  expect_gguf_error(g.build(), {"'dup'", "twice"});
  // Arrays nested 100 deep (a stack-exhaustion attempt) are refused.
  RawBytes deep;
  for (int i = 0; i < 100; ++i) deep.put<uint32_t>(kArrayType).put<uint64_t>(1);
  deep.put<uint32_t>(kU32Type).put<uint64_t>(0);
  g = RawGguf{};
  g.kv.str("deep").put<uint32_t>(kArrayType);
  g.kv.b.insert(g.kv.b.end(), deep.b.begin(), deep.b.end());
  g.kv_count = 1;
  expect_gguf_error(g.build(), {"deep", "nests arrays"});
}

TEST(GgufCorrupt, BadAlignment) {
  RawGguf g;
  g.add_kv("general.alignment", kU32Type, RawBytes().put<uint32_t>(3));
  expect_gguf_error(g.build(), {"general.alignment", "power of two"});
  g = RawGguf{};
  g.add_kv("general.alignment", kU32Type, RawBytes().put<uint32_t>(0));
  expect_gguf_error(g.build(), {"general.alignment"});
  g = RawGguf{};
  g.add_kv("general.alignment", kStringType, RawBytes().str("32"));
  expect_gguf_error(g.build(), {"general.alignment", "uint32", "string"});
}

TEST(GgufCorrupt, BadTensorInfos) {
  auto one = [](RawTensor t, uint64_t data = 4096) {
    RawGguf g;
    g.tensors.push_back(std::move(t));
    g.data_bytes = data;
    return g.build();
  };
  expect_gguf_error(one({"blk.0.attn_q.weight", {32, 4}, 99, 0}), {"tensor 'blk.0.attn_q.weight' has unknown GGUF type 99"});
  expect_gguf_error(one({"blk.0.ffn_up.weight", {256}, 16, 0}), {"blk.0.ffn_up.weight", "IQ2_XXS", "does not support"});
  expect_gguf_error(one({"t5", {1, 1, 1, 1, 1}, kF32, 0}), {"'t5'", "5 dimensions"});
  expect_gguf_error(one({"zero", {4, 0}, kF32, 0}), {"'zero'", "dimension 1 = 0"});
  expect_gguf_error(one({"neg", {uint64_t(-4)}, kF32, 0}), {"'neg'", "-4"});
  expect_gguf_error(one({"big", {1ull << 40, 1ull << 40}, kF32, 0}), {"'big'", "overflows"});
  expect_gguf_error(one({"bytes", {1ull << 62}, kF32, 0}), {"'bytes'", "overflows"});
  expect_gguf_error(one({"q", {33, 2}, kQ4_0, 0}), {"'q'", "Q4_0", "33", "block size 32"});
  expect_gguf_error(one({"mis", {4}, kF32, 16}), {"'mis'", "offset 16", "alignment 32"});
  expect_gguf_error(one({"past", {1024}, kF32, 0}, 100), {"'past'", "truncated or corrupt", "bytes missing"});
  expect_gguf_error(one({"far", {4}, kF32, uint64_t(1) << 62}), {"'far'", "bytes missing"});
  expect_gguf_error(one({"wrap", {4}, kF32, ~uint64_t(31)}), {"'wrap'", "overflows"});
  expect_gguf_error(one({"", {4}, kF32, 0}), {"empty name"});

  RawGguf g;
  g.tensors = {{"a", {16}, kF32, 0}, {"b", {16}, kF32, 32}};  // a is 64 bytes: runs into b
  g.data_bytes = 256;
  expect_gguf_error(g.build(), {"'a'", "'b'", "overlap"});
  g.tensors = {{"same", {8}, kF32, 0}, {"same", {8}, kF32, 32}};
  expect_gguf_error(g.build(), {"'same'", "twice"});
  g.tensors = {{"x", {8}, kF32, 64}, {"y", {8}, kF32, 64}};  // identical ranges
  expect_gguf_error(g.build(), {"'x'", "'y'", "overlap"});
  g.tensors = {{"ok1", {8}, kF32, 0}, {"ok2", {8}, kF32, 32}};  // adjacent: fine
  EXPECT_EQ(open_gguf_bytes(g.build(), "fine.gguf")->tensors().size(), 2u);
}

TEST(GgufCorrupt, EmptyTensorListNeedsNoDataSection) {
  RawGguf g;
  g.add_kv("general.architecture", kStringType, RawBytes().str("llama"));
  auto b = g.build();
  b.resize(b.size() - (b.size() % 32 ? 0 : 1));  // drop padding: still valid with no tensors
  auto f = open_gguf_bytes(b, "meta_only.gguf");
  EXPECT_EQ(f->tensors().size(), 0u);
  EXPECT_EQ(f->metadata().at("general.architecture"), "llama");
}

}  // namespace
}  // namespace longctx

// test_gguf.cpp: GgufWriter -> reader round trips (every metadata type, every writable tensor
// type, v2 and v3, alignment) and open_model_file() dispatch / describe_model_file().
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "loader/dequant.h"
#include "loader/describe.h"
#include "loader/gguf_reader.h"
#include "loader/gguf_writer.h"
#include "loader/quantize.h"
#include "test_util.h"

namespace longctx {
namespace {

using gguf::ValueType;
using json = nlohmann::json;

GgufWriter all_types_writer() {
  GgufWriter w;
  w.add("t.u8", GgufValue::u8(250));
  w.add("t.i8", GgufValue::i8(-120));
  w.add("t.u16", GgufValue::u16(65535));
  w.add("t.i16", GgufValue::i16(-32768));
  w.add("t.u32", GgufValue::u32(4'000'000'000u));
  w.add("t.i32", GgufValue::i32(-2'000'000'000));
  w.add("t.f32", GgufValue::f32(1.5f));
  w.add("t.bool", GgufValue::boolean(true));
  w.add("t.string", GgufValue::string("héllo"));
  w.add("t.empty_string", GgufValue::string(""));
  w.add("t.bad_utf8", GgufValue::string(std::string("a\xff\xfe" "b", 4)));
  w.add("t.u64", GgufValue::u64(std::numeric_limits<uint64_t>::max()));
  w.add("t.i64", GgufValue::i64(std::numeric_limits<int64_t>::min()));
  w.add("t.f64", GgufValue::f64(-2.25e300));
  w.add("t.strings", GgufValue::strings({"<s>", "", "Ġthe"}));
  w.add("t.i32s", GgufValue::i32s({1, -2, 3}));
  w.add("t.f32s", GgufValue::f32s({0.5f, -1.f}));
  w.add("t.empty_array", GgufValue::array(ValueType::UINT8, {}));
  w.add("t.u8s", GgufValue::array(ValueType::UINT8, {GgufValue::u8(1), GgufValue::u8(2)}));
  w.add("t.bools", GgufValue::array(ValueType::BOOL, {GgufValue::boolean(false), GgufValue::boolean(true)}));
  w.add("t.u64s", GgufValue::array(ValueType::UINT64, {GgufValue::u64(1ull << 63)}));
  w.add("t.f64s", GgufValue::array(ValueType::FLOAT64, {GgufValue::f64(0.125)}));
  w.add("t.nested", GgufValue::array(ValueType::ARRAY, {GgufValue::i32s({1, 2}), GgufValue::strings({"x"}),
                                                         GgufValue::array(ValueType::INT8, {})}));
  w.add_string("general.architecture", "llama");
  return w;
}

TEST(GgufRoundTrip, EveryMetadataType) {
  const auto bytes = all_types_writer().bytes();
  auto f = open_gguf_bytes(bytes, "all_types.gguf");
  const json& m = f->metadata();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(m.at("t.u8").get<int>(), 250);
  EXPECT_EQ(m.at("t.i8").get<int>(), -120);
  EXPECT_EQ(m.at("t.u16").get<int>(), 65535);
  EXPECT_EQ(m.at("t.i16").get<int>(), -32768);
  EXPECT_EQ(m.at("t.u32").get<uint64_t>(), 4'000'000'000u);
  EXPECT_EQ(m.at("t.i32").get<int64_t>(), -2'000'000'000);
  EXPECT_EQ(m.at("t.f32").get<double>(), 1.5);
  EXPECT_EQ(m.at("t.bool").get<bool>(), true);
  EXPECT_EQ(m.at("t.string").get<std::string>(), "héllo");
  EXPECT_EQ(m.at("t.empty_string").get<std::string>(), "");
  EXPECT_EQ(m.at("t.bad_utf8").get<std::string>(), std::string("a\xff\xfe" "b", 4));  // stored as-is
  EXPECT_EQ(m.at("t.u64").get<uint64_t>(), std::numeric_limits<uint64_t>::max());
  EXPECT_TRUE(m.at("t.u64").is_number_unsigned());
  EXPECT_EQ(m.at("t.i64").get<int64_t>(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(m.at("t.f64").get<double>(), -2.25e300);
  EXPECT_EQ(m.at("t.strings"), json({"<s>", "", "Ġthe"}));
  EXPECT_EQ(m.at("t.i32s"), json({1, -2, 3}));
  EXPECT_EQ(m.at("t.f32s"), json({0.5, -1.0}));
  EXPECT_EQ(m.at("t.empty_array"), json::array());
  EXPECT_EQ(m.at("t.u8s"), json({1, 2}));
  EXPECT_EQ(m.at("t.bools"), json({false, true}));
  EXPECT_EQ(m.at("t.u64s").at(0).get<uint64_t>(), 1ull << 63);
  EXPECT_EQ(m.at("t.f64s"), json({0.125}));
  EXPECT_EQ(m.at("t.nested"), json({json({1, 2}), json({"x"}), json::array()}));
  EXPECT_EQ(m.at("general.architecture").get<std::string>(), "llama");

  // GGUF value types survive (JSON alone cannot tell uint8 from int32).
  const std::vector<std::pair<std::string, ValueType>> want = {
      {"t.u8", ValueType::UINT8},     {"t.i8", ValueType::INT8},       {"t.u16", ValueType::UINT16},
      {"t.i16", ValueType::INT16},    {"t.u32", ValueType::UINT32},    {"t.i32", ValueType::INT32},
      {"t.f32", ValueType::FLOAT32},  {"t.bool", ValueType::BOOL},     {"t.string", ValueType::STRING},
      {"t.u64", ValueType::UINT64},   {"t.i64", ValueType::INT64},     {"t.f64", ValueType::FLOAT64},
      {"t.strings", ValueType::ARRAY}};
  for (const auto& [k, t] : want) {
    bool found = false;
    for (const auto& [k2, t2] : f->kv_types())
      if (k2 == k) {
        found = true;
        EXPECT_EQ(t2, t) << k;
      }
    EXPECT_TRUE(found) << k;
  }
  EXPECT_EQ(f->array_type("t.strings"), ValueType::STRING);
  EXPECT_EQ(f->array_type("t.u8s"), ValueType::UINT8);
  EXPECT_EQ(f->array_type("t.nested"), ValueType::ARRAY);
  test::expect_error([&] { f->array_type("t.u8"); }, {"t.u8", "not an array"});

  // Dumping with replacement never throws, even with the non-UTF-8 string.
  EXPECT_NO_THROW((void)m.dump(-1, ' ', false, json::error_handler_t::replace));
  EXPECT_NO_THROW((void)describe_model_file(*f, true));
}

TEST(GgufRoundTrip, TensorsOfEveryWritableType) {
  GgufWriter w;
  w.add_string("general.architecture", "test");
  struct Case {
    std::string name;
    std::vector<int64_t> shape;
    DType type;
  };
  const std::vector<Case> cases = {{"a.f32", {3, 5}, DType::F32},       {"b.f16", {7}, DType::F16},
                                   {"c.bf16", {2, 2, 3}, DType::BF16},  {"d.q8_0", {4, 64}, DType::Q8_0},
                                   {"e.q4_0", {2, 3, 32}, DType::Q4_0}, {"f.q4_1", {1, 2, 3, 96}, DType::Q4_1}};
  std::vector<std::vector<float>> data;
  for (size_t i = 0; i < cases.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : cases[i].shape) n *= d;
    data.push_back(test::random_floats(size_t(n), uint32_t(100 + i)));
    w.add_tensor(cases[i].name, cases[i].shape, cases[i].type, data.back());
  }
  const auto bytes = w.bytes();
  for (uint32_t version : {2u, 3u}) {
    auto b = bytes;
    std::memcpy(b.data() + 4, &version, 4);  // v2 and v3 share the layout (v3 added big-endian files)
    auto f = open_gguf_bytes(b, "tensors.gguf");
    EXPECT_EQ(f->version(), version);
    ASSERT_EQ(f->tensors().size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      const TensorView& t = f->get(cases[i].name);
      EXPECT_EQ(t.dtype, cases[i].type);
      EXPECT_EQ(t.shape, cases[i].shape) << t.name;
      EXPECT_EQ((t.data - b.data()) % 32, 0) << t.name;
      const auto enc = encode_f32(t.dtype, data[i].data(), int64_t(data[i].size()));
      ASSERT_EQ(t.nbytes, enc.size());
      EXPECT_EQ(std::memcmp(t.data, enc.data(), enc.size()), 0) << t.name;
      const auto got = dequantize_tensor(t);
      std::vector<float> want(data[i].size());
      dequantize(t.dtype, enc.data(), want.data(), int64_t(want.size()));
      EXPECT_EQ(got, want) << t.name;
      if (t.dtype == DType::F32) {
        EXPECT_EQ(got, data[i]);
      }
    }
  }
}

TEST(GgufRoundTrip, CustomAlignmentAndFiles) {
  GgufWriter w;
  w.add_u32("general.alignment", 64);
  w.add_tensor("x", {5}, DType::F32, std::vector<float>{1, 2, 3, 4, 5});
  w.add_tensor("y", {32}, DType::Q8_0, std::vector<float>(32, 127.f));  // d = 1 exactly
  test::TempDir dir;
  const std::string path = dir.file("align.gguf");
  w.write(path);
  auto mf = open_model_file(path);
  const auto* g = dynamic_cast<const GgufFile*>(mf.get());
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->alignment(), 64u);
  EXPECT_EQ(g->data_offset() % 64, 0u);
  const auto bytes = test::read_bytes(path);
  EXPECT_EQ(g->get("y").data - g->get("x").data, 64);
  EXPECT_EQ(dequantize_tensor(g->get("x")), (std::vector<float>{1, 2, 3, 4, 5}));
  EXPECT_EQ(dequantize_tensor(g->get("y")), std::vector<float>(32, 127.f));
  test::expect_error([&] { mf->get("nope"); }, {"nope", path});
}

TEST(GgufWriterChecks, RejectsBadInput) {
  GgufWriter w;
  w.add_u32("k", 1);
  test::expect_error([&] { w.add_u32("k", 2); }, {"'k'", "twice"});
  test::expect_error([&] { w.add_tensor("q", {33}, DType::Q4_0, std::vector<float>(33)); }, {"'q'", "block size 32"});
  test::expect_error([&] { w.add_tensor("n", {4}, DType::F32, std::vector<float>(3)); }, {"'n'", "4 elements"});
  test::expect_error([&] { w.add_tensor("k4", {256}, DType::Q4_K, std::vector<float>(256)); }, {"Q4_K"});
  test::expect_error([&] { w.add_u32("general.alignment", 3); }, {"general.alignment"});
  test::expect_error([&] { GgufValue::array(ValueType::INT32, {GgufValue::u8(1)}); }, {"uint8", "int32"});
}

TEST(OpenModelFile, DispatchAndClearErrors) {
  test::TempDir dir;
  test::expect_error([&] { open_model_file(dir.file("missing.gguf")); }, {"missing.gguf", "does not exist"});
  test::write_bytes(dir.file("notes.txt"), {'h', 'e', 'l', 'l', 'o'});
  test::expect_error([&] { open_model_file(dir.file("notes.txt")); }, {"notes.txt", "GGUF", "safetensors"});
  test::write_bytes(dir.file("bad.gguf"), {'G', 'G', 'M', 'L', 0, 0, 0, 0});
  test::expect_error([&] { open_model_file(dir.file("bad.gguf")); }, {"bad.gguf", "not a GGUF file", "GGML"});
  test::write_bytes(dir.file("empty.gguf"), {});
  test::expect_error([&] { open_model_file(dir.file("empty.gguf")); }, {"empty.gguf", "truncated"});
  test::expect_error([&] { open_model_file(dir.path().string()); }, {"config.json"});
  // A GGUF file without the .gguf extension is still found by its magic.
  all_types_writer().write(dir.file("model.bin"));
  EXPECT_EQ(open_model_file(dir.file("model.bin"))->format(), "gguf");
}

TEST(Describe, SummarisesMetadataAndTensors) {
  GgufWriter w = all_types_writer();
  std::vector<std::string> tokens(1000, "tok");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  std::string long_utf8;
  for (int i = 0; i < 300; ++i) long_utf8 += "é";
  w.add_string("long.text", long_utf8);
  w.add_tensor("token_embd.weight", {4, 32}, DType::Q8_0, std::vector<float>(128, 1.f));
  w.add_tensor("output_norm.weight", {32}, DType::F32, std::vector<float>(32, 1.f));
  const auto bytes = w.bytes();
  auto f = open_gguf_bytes(bytes, "d.gguf");
  const std::string s = describe_model_file(*f, true);
  EXPECT_NE(s.find("format:   gguf"), std::string::npos) << s;
  EXPECT_NE(s.find("tokenizer.ggml.tokens = [1000 strings]"), std::string::npos) << s;
  EXPECT_NE(s.find("general.architecture = \"llama\""), std::string::npos) << s;
  EXPECT_NE(s.find("t.i32s = [1,-2,3]"), std::string::npos) << s;
  EXPECT_NE(s.find("tensors:  2"), std::string::npos) << s;
  EXPECT_NE(s.find("é...\" (600 bytes)"), std::string::npos) << s;  // cut on a UTF-8 boundary
  EXPECT_NE(s.find("Q8_0 x1"), std::string::npos) << s;
  EXPECT_NE(s.find("token_embd.weight"), std::string::npos) << s;
  EXPECT_NE(s.find("[4, 32]"), std::string::npos) << s;
  EXPECT_EQ(describe_model_file(*f, false).find("[4, 32]"), std::string::npos);
}

}  // namespace
}  // namespace longctx

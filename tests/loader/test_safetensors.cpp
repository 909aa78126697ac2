// test_safetensors.cpp: safetensors writer -> reader round trips (single file, directory,
// sharded with index) and the corruption suite (header length, JSON, dtypes, offsets, shards).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "loader/dequant.h"
#include "loader/describe.h"
#include "loader/safetensors_reader.h"
#include "loader/safetensors_writer.h"
#include "util/half.h"
#include "test_util.h"

namespace longctx {
namespace {

using json = nlohmann::json;
using test::expect_error;

template <class T>
std::vector<uint8_t> raw_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<SafetensorsTensor> sample_tensors() {
  return {
      {"model.embed_tokens.weight", DType::BF16, {4, 8}, test::random_floats(32, 1), {}},
      {"model.layers.0.self_attn.q_proj.weight", DType::F16, {8, 8}, test::random_floats(64, 2), {}},
      {"model.norm.weight", DType::F32, {8}, test::random_floats(8, 3), {}},
      {"ids.i32", DType::I32, {3}, {}, raw_of(std::vector<int32_t>{1, -2, 3})},
      {"ids.i64", DType::I64, {2}, {}, raw_of(std::vector<int64_t>{1ll << 40, -1})},
      {"ids.i8", DType::I8, {2}, {}, raw_of(std::vector<int8_t>{-1, 1})},
      {"ids.i16", DType::I16, {1}, {}, raw_of(std::vector<int16_t>{-300})},
      {"vals.f64", DType::F64, {2}, {}, raw_of(std::vector<double>{0.1, -2.5})},
      {"scalar", DType::F32, {}, {7.f}, {}},
      {"empty", DType::F32, {0, 4}, {}, {}},
  };
}

void check_sample(const ModelFile& mf) {
  const auto ts = sample_tensors();
  ASSERT_EQ(mf.tensors().size(), ts.size());
  for (const auto& want : ts) {
    const TensorView& t = mf.get(want.name);
    EXPECT_EQ(t.dtype, want.dtype) << want.name;
    EXPECT_EQ(t.shape, want.shape) << want.name;
    if (!want.raw.empty()) {
      ASSERT_EQ(t.nbytes, want.raw.size());
      EXPECT_EQ(std::memcmp(t.data, want.raw.data(), t.nbytes), 0) << want.name;
      continue;
    }
    const auto got = dequantize_tensor(t);
    ASSERT_EQ(got.size(), want.values.size()) << want.name;
    for (size_t i = 0; i < got.size(); ++i) {
      float w = want.values[i];
      if (t.dtype == DType::F16) w = f16_to_f32(f32_to_f16(w));
      if (t.dtype == DType::BF16) w = bf16_to_f32(f32_to_bf16(w));
      EXPECT_EQ(got[i], w) << want.name << "[" << i << "]";
    }
  }
  EXPECT_EQ(dequantize_tensor(mf.get("vals.f64")), (std::vector<float>{0.1f, -2.5f}));
}

TEST(SafetensorsRoundTrip, SingleFile) {
  test::TempDir dir;
  const std::string path = dir.file("m.safetensors");
  write_safetensors(path, sample_tensors(), {{"format", "pt"}});
  auto mf = open_model_file(path);
  EXPECT_EQ(mf->format(), "safetensors");
  check_sample(*mf);
  EXPECT_EQ(mf->metadata(), json::object());  // no config.json beside it; __metadata__ ignored
  // Tensors come in file order; the data section starts 8-byte aligned (header padded to 8).
  const auto bytes = test::read_bytes(path);
  auto mem = open_safetensors_bytes(bytes, "mem.safetensors");
  EXPECT_EQ(mem->tensors().front().name, "model.embed_tokens.weight");
  EXPECT_EQ((mem->tensors().front().data - bytes.data()) % 8, 0);
  EXPECT_NO_THROW((void)describe_model_file(*mf, true));
}

TEST(SafetensorsRoundTrip, DirectorySingleAndSharded) {
  const json config = {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 8}, {"model_type", "llama"}};
  for (int shards : {1, 3}) {
    test::TempDir dir;
    write_safetensors_dir(dir.path().string(), config, sample_tensors(), shards);
    test::write_bytes(dir.file("tokenizer.json"), {'{', '"', 'a', '"', ':', '1', '}'});
    test::write_bytes(dir.file("generation_config.json"), {'{', '}'});
    auto mf = open_model_file(dir.path().string());
    EXPECT_EQ(mf->format(), "safetensors");
    check_sample(*mf);
    const json& m = mf->metadata();
    EXPECT_EQ(m.at("config"), config);
    EXPECT_EQ(m.at("tokenizer"), json({{"a", 1}}));
    EXPECT_EQ(m.at("generation_config"), json::object());
    EXPECT_FALSE(m.contains("tokenizer_config"));
    const auto* st = dynamic_cast<const SafetensorsModel*>(mf.get());
    ASSERT_NE(st, nullptr);
    EXPECT_EQ(st->files().size(), size_t(shards));
    const std::string d = describe_model_file(*mf, false);
    EXPECT_NE(d.find("config.hidden_size = 8"), std::string::npos) << d;
    EXPECT_NE(d.find("tokenizer = {1 keys}"), std::string::npos) << d;
    // A single file in the directory is also opened directly, with config.json beside it.
    if (shards == 1) {
      auto f = open_model_file(dir.file("model.safetensors"));
      EXPECT_EQ(f->metadata().at("config"), config);
    }
  }
}

// A safetensors image from a header JSON string and n data bytes.
std::vector<uint8_t> image(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

void expect_st_error(const std::vector<uint8_t>& b, const std::vector<std::string>& parts) {
  expect_error([&] { open_safetensors_bytes(b, "bad.safetensors"); }, parts);
}

TEST(SafetensorsCorrupt, HeaderAndJson) {
  expect_st_error({1, 2, 3}, {"bad.safetensors", "truncated", "header length"});
  auto b = image("{}", 0);
  const uint64_t huge = uint64_t(1) << 40;
  std::memcpy(b.data(), &huge, 8);
  expect_st_error(b, {"bad.safetensors", "header length 1099511627776"});
  const uint64_t more = 100;
  std::memcpy(b.data(), &more, 8);
  expect_st_error(b, {"bad.safetensors", "truncated", "98 bytes missing"});
  expect_st_error(image("{\"a\": ", 0), {"bad.safetensors", "not valid JSON"});
  expect_st_error(image("[1, 2]", 0), {"bad.safetensors", "not a JSON object"});
  expect_st_error(image("{\"w\": 5}", 0), {"'w'", "not an object"});
  expect_st_error(image("{\"w\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4), {"'w'", "dtype"});
  expect_st_error(image("{\"w\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4), {"'w'", "shape"});
  expect_st_error(image("{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4), {"'w'", "data_offsets"});
  expect_st_error(image("{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                        " \"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8),
                  {"'w'", "twice"});
  // Invalid UTF-8 inside the JSON is a parse error, not a crash.
  expect_st_error(image("{\"\xff\": 1}", 0), {"not valid JSON"});
}

TEST(SafetensorsCorrupt, TensorEntries) {
  auto one = [](const std::string& entry, size_t data) { return image("{\"layer.w\": " + entry + "}", data); };
  expect_st_error(one(R"({"dtype": "U8", "shape": [4], "data_offsets": [0, 4]})", 4), {"'layer.w'", "U8"});
  expect_st_error(one(R"({"dtype": "BOOL", "shape": [4], "data_offsets": [0, 4]})", 4), {"'layer.w'", "BOOL"});
  expect_st_error(one(R"({"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]})", 4), {"'layer.w'", "F8_E4M3"});
  expect_st_error(one(R"({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]})", 4), {"'layer.w'", "shape"});
  expect_st_error(one(R"({"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]})", 4), {"'layer.w'", "shape"});
  expect_st_error(one(R"({"dtype": "F32", "shape": [4], "data_offsets": [0, 12]})", 16),
                  {"'layer.w'", "needs 16 bytes", "span 12"});
  expect_st_error(one(R"({"dtype": "F32", "shape": [4], "data_offsets": [8, 0]})", 16), {"'layer.w'", "begin after end"});
  expect_st_error(one(R"({"dtype": "F32", "shape": [4], "data_offsets": [0, 16]})", 10),
                  {"'layer.w'", "truncated", "6 bytes missing"});
  expect_st_error(one(R"({"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 16]})", 16),
                  {"'layer.w'", "overflow"});
  expect_st_error(one(R"({"dtype": "F32", "shape": [1,1,1,1,1,1,1,1,1], "data_offsets": [0, 4]})", 4),
                  {"'layer.w'", "9 dimensions"});
  expect_st_error(image(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                            "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", 16),
                  {"'a'", "'b'", "overlap"});
}

TEST(SafetensorsCorrupt, TruncatedAtEveryCutPoint) {
  const auto full = safetensors_bytes(sample_tensors());
  for (size_t cut = 0; cut < full.size(); ++cut) {
    std::vector<uint8_t> b(full.begin(), full.begin() + long(cut));
    SCOPED_TRACE("cut at " + std::to_string(cut));
    expect_error([&] { open_safetensors_bytes(b, "cut.safetensors"); }, {"cut.safetensors"});
  }
}

TEST(SafetensorsCorrupt, Directories) {
  const json config = {{"model_type", "llama"}};
  namespace fs = std::filesystem;
  {  // no config.json
    test::TempDir dir;
    write_safetensors(dir.file("model.safetensors"), sample_tensors());
    expect_error([&] { open_model_file(dir.path().string()); }, {dir.path().string(), "no config.json"});
  }
  {  // config.json but no weights
    test::TempDir dir;
    test::write_bytes(dir.file("config.json"), {'{', '}'});
    expect_error([&] { open_model_file(dir.path().string()); }, {"model.safetensors", "no *.safetensors"});
  }
  {  // bad config.json
    test::TempDir dir;
    write_safetensors_dir(dir.path().string(), config, sample_tensors(), 1);
    test::write_bytes(dir.file("config.json"), {'{', 'x'});
    expect_error([&] { open_model_file(dir.path().string()); }, {"config.json", "not valid JSON"});
  }
  {  // missing shard
    test::TempDir dir;
    write_safetensors_dir(dir.path().string(), config, sample_tensors(), 3);
    fs::remove(dir.path() / "model-00002-of-00003.safetensors");
    expect_error([&] { open_model_file(dir.path().string()); }, {"model-00002-of-00003.safetensors", "missing"});
  }
  {  // index names a tensor its shard lacks
    test::TempDir dir;
    write_safetensors_dir(dir.path().string(), config, sample_tensors(), 2);
    auto index = json::parse(test::read_bytes(dir.file("model.safetensors.index.json")));
    index["weight_map"]["lm_head.weight"] = "model-00001-of-00002.safetensors";
    const std::string s = index.dump();
    test::write_bytes(dir.file("model.safetensors.index.json"), std::vector<uint8_t>(s.begin(), s.end()));
    expect_error([&] { open_model_file(dir.path().string()); },
                 {"lm_head.weight", "model-00001-of-00002.safetensors", "does not contain"});
  }
  {  // the same tensor in two shards
    test::TempDir dir;
    write_safetensors_dir(dir.path().string(), config, sample_tensors(), 2);
    write_safetensors(dir.file("model-00002-of-00002.safetensors"),
                      {{"model.norm.weight", DType::F32, {1}, {1.f}, {}}, sample_tensors()[5]});
    expect_error([&] { open_model_file(dir.path().string()); }, {"model.norm.weight", "more than one shard"});
  }
  {  // index with a bad weight_map / a path escaping the directory
    test::TempDir dir;
    write_safetensors_dir(dir.path().string(), config, sample_tensors(), 2);
    test::write_bytes(dir.file("model.safetensors.index.json"), {'{', '}'});
    expect_error([&] { open_model_file(dir.path().string()); }, {"weight_map"});
    const std::string s = R"({"weight_map": {"w": "../outside.safetensors"}})";
    test::write_bytes(dir.file("model.safetensors.index.json"), std::vector<uint8_t>(s.begin(), s.end()));
    expect_error([&] { open_model_file(dir.path().string()); }, {"'w'", "outside.safetensors"});
  }
}

}  // namespace
}  // namespace longctx

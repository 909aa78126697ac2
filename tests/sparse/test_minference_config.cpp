// test_minference_config.cpp: the published MInference configs load as they are, validate
// against their models' geometry, round-trip, and bad configs fail naming layer/head/problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "methods/minference/minference_config.h"
#include "util/error.h"
#include "../common/error_of.h"

namespace longctx {
namespace {

namespace fs = std::filesystem;

// The published files (all three) live in the shared folder where it exists; the repo ships
// byte-identical copies under configs/minference (MIT), so these tests run in CI too.
const fs::path kConfigDir = fs::path(LONGCTX_SHARED_DIR) / "data" / "minference-configs";
const fs::path kShippedDir = fs::path(LONGCTX_SOURCE_DIR) / "configs" / "minference";

struct Published {
  const char* shipped;    // in configs/minference
  const char* original;   // name in the MInference repository (and the shared folder)
  const char* model;
  int n_layer, n_head;
};
const Published kPublished[] = {
    {"Llama-3-8B-Instruct-262k.json", "Llama_3_8B_Instruct_262k_kv_out_v32_fit_o_best_pattern.json", "llama3-8b", 32, 32},
    {"Llama-3.1-8B-Instruct-128k.json", "Llama_3.1_8B_Instruct_128k_kv_out_v32_fit_o_best_pattern.json", "llama3.1-8b", 32,
     32},
    {"Qwen2.5-7B-Instruct-128k.json", "Qwen2.5_7B_Instruct_128k_instruct_kv_out_v32_fit_o_best_pattern.json", "qwen2.5-7b",
     28, 28},
};

std::string shipped_path(const Published& p) { return (kShippedDir / p.shipped).string(); }

std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Message of the Error f throws ("" if none).
using test_common::error_of;

// Each shipped copy is the published file, byte for byte, where the shared folder exists.
TEST(MInferenceConfig, ShippedCopiesArePublishedFiles) {
  if (!fs::exists(kConfigDir)) GTEST_SKIP() << kConfigDir << " not found (the copies still load: LoadsPublishedConfigs)";
  for (const auto& pub : kPublished)
    EXPECT_EQ(file_bytes(kShippedDir / pub.shipped), file_bytes(kConfigDir / pub.original))
        << pub.shipped << " differs from " << pub.original;
}

TEST(MInferenceConfig, LoadsPublishedConfigs) {
  for (const auto& pub : kPublished) {
    const auto path = shipped_path(pub);
    const MInferenceConfig cfg = MInferenceConfig::load(path);
    ASSERT_EQ(int(cfg.layers.size()), pub.n_layer) << pub.shipped;
    for (const auto& layer : cfg.layers) {
      ASSERT_EQ(int(layer.size()), pub.n_head);
      for (const auto& hp : layer) {
        EXPECT_EQ(hp.kind, PatternKind::VerticalSlash);  // all three published files are VS-only
        EXPECT_GE(hp.vertical, 30);
        EXPECT_GE(hp.slash, 100);
      }
    }
    EXPECT_NO_THROW(cfg.validate(pub.n_layer, pub.n_head, pub.model, path));
    // Mismatch: the Llama configs on Qwen's geometry and vice versa.
    const int other = pub.n_layer == 32 ? 28 : 32;
    const std::string msg = error_of([&] { cfg.validate(other, other, "other-model", path); });
    EXPECT_NE(msg.find("layers"), std::string::npos) << msg;
    EXPECT_NE(msg.find("other-model"), std::string::npos) << msg;
    const std::string msg2 = error_of([&] { cfg.validate(pub.n_layer, pub.n_head / 2, "half-heads", path); });
    EXPECT_NE(msg2.find("layer 0 has"), std::string::npos) << msg2;
    // Round trip through our writer gives the same patterns.
    const MInferenceConfig back = MInferenceConfig::from_json(cfg.to_json(), "roundtrip");
    for (size_t l = 0; l < cfg.layers.size(); ++l)
      for (size_t h = 0; h < cfg.layers[l].size(); ++h) {
        EXPECT_EQ(back.layers[l][h].kind, cfg.layers[l][h].kind);
        EXPECT_EQ(back.layers[l][h].vertical, cfg.layers[l][h].vertical);
        EXPECT_EQ(back.layers[l][h].slash, cfg.layers[l][h].slash);
        EXPECT_DOUBLE_EQ(back.layers[l][h].score, cfg.layers[l][h].score);
      }
  }
}

TEST(MInferenceConfig, SpotValues) {
  // First entries as printed in the files.
  const auto llama3 = MInferenceConfig::load(shipped_path(kPublished[0]));
  EXPECT_EQ(llama3.layers[0][0].vertical, 1000);
  EXPECT_EQ(llama3.layers[0][0].slash, 6096);
  EXPECT_EQ(llama3.layers[0][0].score, 336);  // integer score in this file
  const auto qwen = MInferenceConfig::load(shipped_path(kPublished[2]));
  EXPECT_EQ(qwen.layers[0][0].vertical, 3500);
  EXPECT_EQ(qwen.layers[0][0].slash, 100);
  EXPECT_NEAR(qwen.layers[0][0].score, 0.6750829815864563, 1e-12);
}

TEST(MInferenceConfig, AllPatternNamesAndAliases) {
  const auto j = nlohmann::json::parse(R"([{"1": ["block_sparse", 100, 0, 1], "0": ["stream_llm", 64, 256, 0.5],
                                          "2": ["a_shape", 4, 8], "3": ["vertical_and_slash", 30, 800, 2]}])");
  const auto cfg = MInferenceConfig::from_json(j, "inline");
  ASSERT_EQ(cfg.layers[0].size(), 4u);
  EXPECT_EQ(cfg.layers[0][0].kind, PatternKind::AShape);
  EXPECT_EQ(cfg.layers[0][1].kind, PatternKind::BlockSparse);
  EXPECT_EQ(cfg.layers[0][2].kind, PatternKind::AShape);
  EXPECT_EQ(cfg.layers[0][2].score, 0);  // score may be missing
  EXPECT_EQ(cfg.layers[0][3].kind, PatternKind::VerticalSlash);
  // Written with the published names.
  EXPECT_EQ(cfg.to_json()[0]["2"][0], "stream_llm");
}

TEST(MInferenceConfig, ErrorsNameTheProblem) {
  auto err = [](const char* text) {
    return error_of([&] { MInferenceConfig::from_json(nlohmann::json::parse(text), "bad.json"); });
  };
  EXPECT_NE(err(R"([{"0": ["diagonal", 1, 2, 0]}])").find("unknown pattern 'diagonal'"), std::string::npos);
  EXPECT_NE(err(R"([{"0": ["vertical_and_slash", -5, 2, 0]}])").find("layer 0 head 0: vertical_size must be >= 0"),
            std::string::npos);
  EXPECT_NE(err(R"([{"0": ["vertical_and_slash", 1, 2, 0]}, {"0": ["vertical_and_slash", 1, -2, 0]}])")
                .find("layer 1 head 0: slash_size"),
            std::string::npos);
  EXPECT_NE(err(R"([{"0": ["vertical_and_slash", 1.5, 2, 0]}])").find("must be an integer"), std::string::npos);
  EXPECT_NE(err(R"([{"0": ["vertical_and_slash", 1, 2, 0], "2": ["vertical_and_slash", 1, 2, 0]}])")
                .find("layer 0 is missing head 1"),
            std::string::npos);
  EXPECT_NE(err(R"([{"x": ["vertical_and_slash", 1, 2, 0]}])").find("bad head id 'x'"), std::string::npos);
  EXPECT_NE(err(R"([{"0": ["vertical_and_slash", 1]}])").find("expected [pattern"), std::string::npos);
  EXPECT_NE(err(R"([[1, 2]])").find("layer 0 must be an object"), std::string::npos);
  EXPECT_NE(err(R"({"0": 1})").find("one object per layer"), std::string::npos);
  EXPECT_NE(err(R"([{"0": ["block_sparse", 0, 0, 0]}])").find("block_sparse needs"), std::string::npos);
  EXPECT_NE(error_of([] { MInferenceConfig::load("/nonexistent/cfg.json"); }).find("cannot open"), std::string::npos);
  const auto tmp = fs::temp_directory_path() / "longctx_bad_minference.json";
  std::ofstream(tmp) << "[{\"0\": ";
  EXPECT_NE(error_of([&] { MInferenceConfig::load(tmp.string()); }).find("not valid JSON"), std::string::npos);
  fs::remove(tmp);
}

TEST(MInferenceConfig, SaveAndLoad) {
  MInferenceConfig cfg;
  cfg.layers = {{{PatternKind::VerticalSlash, 30, 800, 0.25}, {PatternKind::AShape, 128, 512, 0.5}},
                {{PatternKind::BlockSparse, 12, 0, 0.125}, {PatternKind::VerticalSlash, 1000, 6096, 1}}};
  const auto tmp = fs::temp_directory_path() / "longctx_minference_roundtrip.json";
  cfg.save(tmp.string());
  const auto back = MInferenceConfig::load(tmp.string());
  fs::remove(tmp);
  ASSERT_EQ(back.layers.size(), 2u);
  EXPECT_EQ(back.layers[0][1].kind, PatternKind::AShape);
  EXPECT_EQ(back.layers[0][1].slash, 512);
  EXPECT_EQ(back.layers[1][0].kind, PatternKind::BlockSparse);
  EXPECT_EQ(back.layers[1][0].vertical, 12);
  EXPECT_EQ(back.layers[1][1].score, 1);
}

}  // namespace
}  // namespace longctx

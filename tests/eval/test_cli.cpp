// test_cli.cpp: `longctx eval` end to end with the fake engine: argument errors, the side-by-side
// table, JSON with every sample, pictures, perplexity and attention fidelity.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "eval/eval_cli.h"
#include "eval/image.h"
#include "eval/plots.h"
#include "fakes.h"
#include "util/error.h"

using namespace longctx;

namespace {

struct Harness {
  std::vector<LoadOptions> loads;
  int64_t ctx = 8192;
  eval::EngineFactory factory() {
    return [this](const LoadOptions& lo) {
      loads.push_back(lo);
      if (lo.attn == "refused") fail("fake: attention method 'refused' is not implemented on this device");
      return std::make_unique<evaltest::FakeEngine>(lo, ctx);
    };
  }
  // Parses and runs `longctx <args>`; returns stdout. Errors propagate.
  std::string run(std::vector<std::string> args) {
    CLI::App app{"test"};
    register_eval_command(app, factory());
    args.insert(args.begin(), "longctx");
    std::vector<const char*> argv;
    for (auto& a : args) argv.push_back(a.c_str());
    testing::internal::CaptureStdout();
    try {
      app.parse(int(argv.size()), argv.data());
    } catch (...) {
      testing::internal::GetCapturedStdout();
      throw;
    }
    return testing::internal::GetCapturedStdout();
  }
  std::string error(std::vector<std::string> args) {
    try {
      run(std::move(args));
    } catch (const Error& e) {
      return e.what();
    } catch (const CLI::ParseError& e) {  // usage errors found while parsing (cli/options.h)
      return e.what();
    }
    return "";
  }
};

std::string temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("longctx_eval_cli_" + name);
  std::filesystem::remove_all(p);
  return p.string();
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

}  // namespace

TEST(EvalCli, UnknownTaskListsTheValidOnes) {
  Harness h;
  const std::string m = h.error({"eval", "xyz"});
  EXPECT_NE(m.find("unknown task \"xyz\""), std::string::npos) << m;
  EXPECT_NE(m.find("passkey"), std::string::npos) << m;
  EXPECT_NE(m.find("attention"), std::string::npos) << m;
  EXPECT_TRUE(h.loads.empty()) << "no model is loaded for a bad request";
}

TEST(EvalCli, BadLengthsSayWhatIsWrong) {
  Harness h;
  const std::string m = h.error({"eval", "passkey", "--lengths", "2k,2q", "--quiet"});
  EXPECT_NE(m.find("\"2q\""), std::string::npos) << m;
}

TEST(EvalCli, LengthAboveTheModelContextSaysSo) {
  Harness h;
  const std::string m = h.error({"eval", "passkey", "--lengths", "2k,16k", "--quiet"});
  EXPECT_NE(m.find("16K"), std::string::npos) << m;
  EXPECT_NE(m.find("above the context"), std::string::npos) << m;
  EXPECT_NE(m.find("8192"), std::string::npos) << m;
}

TEST(EvalCli, OtherArgumentErrors) {
  Harness h;
  EXPECT_NE(h.error({"eval", "passkey", "--samples", "0"}).find("--samples"), std::string::npos);
  EXPECT_NE(h.error({"eval", "passkey", "--depths", "2"}).find("[0, 1]"), std::string::npos);
  EXPECT_NE(h.error({"eval", "attention", "--layer", "1"}).find("--head"), std::string::npos);
  EXPECT_NE(h.error({"eval", "attention", "--attn", "nosuch", "--quiet"}).find("'nosuch'"), std::string::npos);
  EXPECT_THROW(h.run({"eval"}), CLI::ParseError);  // TASK is required
}

TEST(EvalCli, AMethodTheEngineRefusesStopsTheRunBeforeAnyPrompt) {
  for (const std::string task : {"passkey", "ppl"}) {
    Harness h;
    std::vector<std::string> args{"eval", task, "--attn", "dense,refused", "--lengths", "1k", "--samples", "1", "--quiet"};
    if (task == "ppl") {
      const std::string text = temp_dir("refused_text") + ".txt";
      std::ofstream(text) << std::string(20000, 'a');
      args.insert(args.end(), {"--text", text});
    }
    const std::string m = h.error(args);
    EXPECT_NE(m.find("method 'refused'"), std::string::npos) << m;
    EXPECT_NE(m.find("not implemented on this device"), std::string::npos) << m;
    // dense was loaded for the check only: its run (a second load) never started
    ASSERT_EQ(h.loads.size(), 2u) << task;
    EXPECT_EQ(h.loads[0].attn, "dense");
  }
}

TEST(EvalCli, PasskeySideBySideTableJsonAndHeatmap) {
  Harness h;
  const std::string dir = temp_dir("passkey");
  const std::string json = dir + "/out.json";
  std::vector<std::string> args{"eval", "passkey", "--attn", "dense,blind", "--lengths", "1k,2k", "--samples", "2",
                                "--depths", "0,0.5,1", "--json", json, "--quiet", "-m", "fake.gguf", "--device", "cuda"};
  if (eval::pictures_built()) args.insert(args.end(), {"--out", dir});
  const std::string out = h.run(args);
  ASSERT_EQ(h.loads.size(), 4u);  // each method loaded once up front (the check), then once for its run
  EXPECT_EQ(h.loads[0].attn, "dense");
  EXPECT_EQ(h.loads[1].attn, "blind");
  EXPECT_EQ(h.loads[2].attn, "dense");
  EXPECT_EQ(h.loads[3].attn, "blind");
  EXPECT_EQ(h.loads[0].model_path, "fake.gguf");
  EXPECT_EQ(h.loads[0].device, "cuda");
  // Table: dense 100%, blind 0%, per length.
  EXPECT_NE(out.find("passkey: accuracy (%)"), std::string::npos) << out;
  EXPECT_NE(out.find("length  dense  blind"), std::string::npos) << out;
  EXPECT_NE(out.find("1K      100.0    0.0"), std::string::npos) << out;
  EXPECT_NE(out.find("2K      100.0    0.0"), std::string::npos) << out;
  const auto doc = read_json(json);
  EXPECT_EQ(doc["task"], "passkey");
  EXPECT_EQ(doc["seed"], 42);
  ASSERT_EQ(doc["samples"].size(), 2u * 2 * 3 * 2);  // methods x lengths x depths x samples
  const auto& s0 = doc["samples"][0];
  for (const char* k : {"id", "length", "prompt_tokens", "depth", "expected", "output", "correct", "score"})
    EXPECT_TRUE(s0.contains(k)) << k;
  EXPECT_EQ(s0["correct"], true);
  EXPECT_LE(s0["prompt_tokens"].get<int64_t>(), 1024);
  EXPECT_EQ(doc["samples"].back()["correct"], false);
  EXPECT_EQ(doc["samples"][0]["id"], doc["samples"][12]["id"]) << "every method sees the same prompts";
  if (!eval::pictures_built()) return;
  ASSERT_EQ(doc["pictures"].size(), 2u);
  for (const char* pic : {"/passkey_dense.png", "/passkey_blind.png"}) {
    ASSERT_TRUE(std::filesystem::exists(dir + pic)) << pic;
    const eval::Image img = eval::read_png(dir + pic);
    EXPECT_GT(img.width(), 300);
    EXPECT_GT(img.height(), 200);
  }
  // dense scores 100% everywhere, blind 0%: their cells are green and red.
  auto count = [](const eval::Image& img, eval::Rgb c) {
    int n = 0;
    for (int y = 0; y < img.height(); ++y)
      for (int x = 0; x < img.width(); ++x) n += img.get(x, y) == c;
    return n;
  };
  const eval::Image dense = eval::read_png(dir + "/passkey_dense.png"), blind = eval::read_png(dir + "/passkey_blind.png");
  EXPECT_GT(count(dense, eval::score_colour(1.0)), 6 * 500) << "six green cells";
  EXPECT_GT(count(blind, eval::score_colour(0.0)), 6 * 500) << "six red cells";
  EXPECT_LT(count(blind, eval::score_colour(1.0)), 100) << "only the colour bar's top is green";
}

TEST(EvalCli, PicturesWithoutCairoFailBeforeWork) {
  if (eval::pictures_built()) GTEST_SKIP() << "this build draws pictures (cairo)";
  Harness h;
  for (const char* task : {"passkey", "attention"}) {
    const std::string m = h.error({"eval", task, "--lengths", "1k", "--out", temp_dir("nopics"), "--quiet"});
    EXPECT_NE(m.find("no picture support (cairo)"), std::string::npos) << m;
    EXPECT_NE(m.find("LONGCTX_PICTURES=ON"), std::string::npos) << m;
  }
  EXPECT_TRUE(h.loads.empty()) << "no model is loaded before the error";
  EXPECT_FALSE(std::filesystem::exists(temp_dir("nopics")));
}

TEST(EvalCli, SameSeedSameAnswers) {
  Harness h;
  const std::string dir = temp_dir("repro");
  h.run({"eval", "niah_multikey", "--lengths", "2k", "--samples", "2", "--json", dir + "/a.json", "--quiet"});
  h.run({"eval", "niah_multikey", "--lengths", "2k", "--samples", "2", "--json", dir + "/b.json", "--quiet"});
  EXPECT_EQ(read_json(dir + "/a.json")["samples"], read_json(dir + "/b.json")["samples"]);
}

TEST(EvalCli, RulerRunsAllTasksWithAMeanTable) {
  Harness h;
  const std::string out = h.run({"eval", "ruler", "--lengths", "2k", "--samples", "1", "--quiet"});
  for (const char* t : {"niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe"})
    EXPECT_NE(out.find(std::string(t) + ": accuracy"), std::string::npos) << t;
  EXPECT_NE(out.find("ruler: mean accuracy (%) over 7 tasks"), std::string::npos) << out;
}

TEST(EvalCli, JsonToStdoutMovesTheTableToStderr) {
  Harness h;
  const std::string out = h.run({"eval", "passkey", "--lengths", "1k", "--samples", "1", "--depths", "0.5", "--quiet", "--json"});
  const auto doc = nlohmann::json::parse(out);
  EXPECT_EQ(doc["samples"].size(), 1u);
}

TEST(EvalCli, PerplexityOnATextFile) {
  Harness h;
  const std::string dir = temp_dir("ppl");
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir + "/book.txt");
    for (int i = 0; i < 300; ++i) f << "Of Mans First Disobedience, and the Fruit of that Forbidden Tree.\n";
  }
  const std::string out = h.run({"eval", "ppl", "--text", dir + "/book.txt", "--lengths", "1k,2k", "--samples", "3",
                                 "--json", dir + "/ppl.json", "--quiet"});
  const auto doc = read_json(dir + "/ppl.json");
  ASSERT_EQ(doc["results"].size(), 2u);
  EXPECT_NEAR(doc["results"][0]["ppl"].get<double>(), 4.0, 1e-4);  // the fake scores log(1/4)
  EXPECT_EQ(doc["results"][0]["windows"], 3);
  EXPECT_EQ(doc["results"][0]["tokens"], 3 * 1023);
  EXPECT_NE(out.find("4.000"), std::string::npos) << out;
  const std::string m = h.error({"eval", "ppl", "--text", dir + "/missing.txt", "--quiet"});
  EXPECT_NE(m.find("missing.txt"), std::string::npos) << m;
  std::ofstream(dir + "/short.txt") << "A short text.\n";
  const std::string too_long = h.error({"eval", "ppl", "--text", dir + "/short.txt", "--lengths", "1k", "--quiet"});
  EXPECT_NE(too_long.find("fewer than the length"), std::string::npos) << too_long;
}

TEST(EvalCli, AttentionFidelityTableJsonAndPictures) {
  Harness h;
  const std::string dir = temp_dir("attention");
  std::vector<std::string> args{"eval", "attention", "--attn", "dense,a_shape=16,64", "--lengths", "1k", "--json",
                                dir + "/attn.json", "--layer", "1", "--head", "2", "--quiet", "--max-queries", "128"};
  if (eval::pictures_built()) args.insert(args.end(), {"--out", dir});
  const std::string out = h.run(args);
  EXPECT_NE(out.find("attention fidelity at 1K"), std::string::npos) << out;
  const auto doc = read_json(dir + "/attn.json");
  ASSERT_EQ(doc["results"].size(), 2u);
  EXPECT_NEAR(doc["results"][0]["mean_rel_err"].get<double>(), 0.0, 1e-9);
  EXPECT_NEAR(doc["results"][0]["mean_recall"].get<double>(), 1.0, 1e-9);
  EXPECT_EQ(doc["results"][0]["heads"].size(), 2u * 4);  // layers x heads
  EXPECT_GT(doc["results"][1]["mean_rel_err"].get<double>(), 0.0);
  EXPECT_LT(doc["results"][1]["mean_recall"].get<double>(), 1.0);
  EXPECT_GT(doc["results"][1]["mean_recall"].get<double>(), 0.5);  // the sink carries most mass
  EXPECT_EQ(doc["results"][1]["pictures"].size(), eval::pictures_built() ? 2u : 0u);  // worst head + layer 1 head 2
  for (const auto& p : doc["pictures"]) {
    const eval::Image img = eval::read_png(p.get<std::string>());
    EXPECT_GT(img.width(), 512 + 100) << "the 512-pixel map, its axes and colour bar";
    EXPECT_GT(img.height(), 512 + 60);
    // The map: inside its frame (a 514-pixel grey square), causal pixels below the diagonal in
    // many heat colours, the non-causal corner above it.
    int fx = -1, fy = -1;
    for (int y = 0; y < img.height() && fx < 0; ++y)
      for (int x = 0, run = 0; x < img.width(); ++x) {
        run = img.get(x, y) == img.get(x - 1, y) && img.get(x, y) == eval::Rgb{120, 120, 120} ? run + 1 : 0;
        if (run == 513) { fx = x - 513; fy = y; break; }
      }
    ASSERT_GE(fx, 0) << "no map frame in " << p;
    std::set<uint32_t> heat;
    for (int y = 1; y <= 512; ++y)
      for (int x = 1; x <= y; ++x) {
        const eval::Rgb c = img.get(fx + x, fy + y);
        heat.insert(uint32_t(c.r) << 16 | uint32_t(c.g) << 8 | c.b);
      }
    EXPECT_GT(heat.size(), 20u) << p;
    EXPECT_EQ(img.get(fx + 512, fy + 1), eval::kNotCausal) << p;
  }
  ASSERT_EQ(h.loads.size(), 1u);
  EXPECT_EQ(h.loads[0].attn, "dense");  // capture is dense; methods are masks
}

// test_mask_minference.cpp: `--attn minference=CFG` in the fidelity evaluation: the engine's
// MInference index for a captured layer, converted to the evaluation's mask.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "eval/mask_method.h"
#include "util/error.h"

namespace longctx::eval {
namespace {

MethodContext ctx_of(const AttnCapture& c, int n_layer = 1) {
  return {.n_layer = n_layer, .n_head = c.n_head, .n_kv_head = c.n_kv_head, .head_dim = c.head_dim, .model_name = "test"};
}

namespace fs = std::filesystem;

// A published-format config: one layer, `n_head` heads, every head A-shape(sink 4, window 64)
// except head 1, vertical-slash (30 columns, 100 diagonals).
std::string write_config(int n_head) {
  nlohmann::json layer = nlohmann::json::object();
  for (int h = 0; h < n_head; ++h)
    layer[std::to_string(h)] = h == 1 ? nlohmann::json{"vertical_and_slash", 30, 100, 0.0}
                                      : nlohmann::json{"stream_llm", 4, 64, 0.0};
  const fs::path p = fs::temp_directory_path() / ("longctx-mask-minf-" + std::to_string(::getpid()) + ".json");
  std::ofstream(p) << nlohmann::json::array({layer}).dump();
  return p.string();
}

TEST(MaskMInference, BuildsTheEnginesIndexForEveryHead) {
  const int n_head = 4, n_kv = 2, d = 16;
  const int64_t T = 300;
  std::mt19937 g(5);
  std::normal_distribution<float> nd;
  std::vector<float> q(size_t(T * n_head * d)), k(size_t(T * n_kv * d)), v(k.size());
  for (auto* x : {&q, &k, &v})
    for (auto& f : *x) f = nd(g);
  AttnCapture c;
  c.layer = 0;
  c.n_tokens = T;
  c.n_head = n_head;
  c.n_kv_head = n_kv;
  c.head_dim = d;
  c.q = q.data();
  c.k = k.data();
  c.v = v.data();
  const std::string cfg = write_config(n_head);
  const LayerMask m = make_mask_method("minference=" + cfg, ctx_of(c))->build(c);
  ASSERT_EQ(m.heads.size(), size_t(n_head));  // one index head per query head
  ASSERT_EQ(m.n_blocks(), 5);
  for (int h = 0; h < n_head; ++h) {
    for (int64_t b = 0; b < m.n_blocks(); ++b) {
      // Every pattern keeps each row's own diagonal key (local window / nearest diagonals).
      const int64_t q0 = b * kMaskBlockQ;
      bool has_diag = false;
      for (const auto& r : m.heads[size_t(h)][size_t(b)].ranges) has_diag |= r.begin <= q0 && q0 < r.end;
      for (int64_t col : m.heads[size_t(h)][size_t(b)].cols) has_diag |= col == q0;
      EXPECT_TRUE(has_diag) << "head " << h << " block " << b;
    }
  }
  // Wrong shapes are errors naming the mismatch.
  c.n_head = 3;
  EXPECT_THROW(make_mask_method("minference=" + cfg, ctx_of(c)), Error);  // config made for 4 heads
  c.n_head = n_head;
  EXPECT_THROW(make_mask_method("minference=" + cfg, ctx_of(c, 2)), Error);  // ... and for 1 layer
  std::remove(cfg.c_str());
}

TEST(MaskMInference, NeedsAConfig) {
  try {
    make_mask_method("minference", MethodContext{1, 4, 2, 16, "test"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("search-patterns"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace longctx::eval

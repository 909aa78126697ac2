// model_rows.h (tests/gpu): what the "GPU model vs CPU model" tests share: a tiny random model
// written to a temp dir and opened, the method context of a config, and the logit rows a run
// yields (the last prefill rows, then one row per teacher-forced decode token), the same loop
// for the GPU model (gpu::GpuTransformer) and the CPU engine (Transformer), so both devices see
// the same calls, and the comparison of two runs' rows within the bf16 logit tolerance.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "loader/model_file.h"
#include "methods/method.h"
#include "model/config.h"
#include "model/tiny_model.h"
#include "test_util.h"

namespace longctx::test {

// Logit rows, each [vocab]: the last prefill rows, then one per decode token.
using Rows = std::vector<std::vector<float>>;

// A tiny random model (model/tiny_model.h) in temp_dir(name), opened; its config read back.
struct TinyModel {
  std::filesystem::path dir;
  ModelConfig cfg;
  std::unique_ptr<ModelFile> file;
};

inline std::unique_ptr<TinyModel> write_tiny(const std::string& name, const TinyModelSpec& spec) {
  auto t = std::make_unique<TinyModel>();
  t->dir = temp_dir(name);
  write_tiny_model(t->dir.string(), spec);
  t->file = open_model_file((t->dir / "tiny.gguf").string());
  t->cfg = ModelConfig::from_model_file(*t->file);
  return t;
}

inline MethodContext ctx_of(const ModelConfig& c) { return {c.n_layer, c.n_head, c.n_kv_head, c.head_dim, c.name}; }

// Runs ids then decode through `m` (reset or attached by the caller): the prompt in calls of
// `call` tokens (0: one call; the GPU model cuts a call into its own chunks), the last call
// asking for the last `rows` rows (all of them for a shorter prompt); then each decode token
// alone, teacher-forced. Model: anything with forward(span<const int32_t>, n_rows, float out*).
template <class Model>
Rows logit_rows(Model& m, const std::vector<int32_t>& ids, const std::vector<int32_t>& decode, int64_t rows,
                int64_t call = 0) {
  const int64_t n = int64_t(ids.size()), V = m.config().vocab_size;
  if (call <= 0) call = std::max<int64_t>(n, 1);
  std::vector<float> lg;
  for (int64_t c0 = 0; c0 < n; c0 += call) {
    const int64_t c1 = std::min(n, c0 + call);
    m.forward(std::span(ids).subspan(size_t(c0), size_t(c1 - c0)), c1 == n ? rows : 0, &lg);
  }
  Rows r;
  for (int64_t i = 0; i < std::min(rows, n); ++i) r.emplace_back(lg.begin() + i * V, lg.begin() + (i + 1) * V);
  for (int32_t t : decode) {
    m.forward(std::span(&t, 1), 1, &lg);
    r.push_back(lg);
  }
  return r;
}

// Rows b against reference rows a, with the bf16 logit tolerance (test_util.h).
struct RowsCmp {
  double worst = 0;            // max over rows of max|diff| / tol (<= 1: within the tolerance)
  int checked = 0, equal = 0;  // rows whose argmax is clear (top1 - top2 > 2 tol); of those, equal
  static bool clear(const LogitDiff& d) { return d.margin_a > 2 * d.tol(); }
  void add(const LogitDiff& d) {
    worst = std::max(worst, d.max_abs / d.tol());
    if (clear(d)) ++checked, equal += d.argmax_a == d.argmax_b;
  }
};
inline RowsCmp compare_rows(const Rows& a, const Rows& b) {
  RowsCmp c;
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    c.add(compare_row(a[i].data(), b[i].data(), int64_t(a[i].size())));
  return c;
}

// compare_rows, as expectations: every row of b within the tolerance of a's, and the argmax equal
// on a's clear rows; `what` names the pair in the failures and the printed summary.
inline RowsCmp expect_rows_match(const Rows& a, const Rows& b, const std::string& what) {
  RowsCmp c;
  EXPECT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const LogitDiff d = compare_row(a[i].data(), b[i].data(), int64_t(a[i].size()));
    c.add(d);
    EXPECT_LE(d.max_abs, d.tol()) << what << ": row " << i << " (rel_l2 " << d.rel_l2 << ")";
    if (RowsCmp::clear(d)) {
      EXPECT_EQ(d.argmax_a, d.argmax_b) << what << ": row " << i;
    }
  }
  std::printf("%s: worst |diff|/tol %.3f, argmax equal %d of %d clear rows\n", what.c_str(), c.worst, c.equal,
              c.checked);
  return c;
}

// That a method's own path ran, not a fallback: where the GPU's rows under the method differ from
// the GPU's rows under a baseline without it beyond noise (largest row rel_l2 > kNoise; random
// weights with near-uniform attention can hide the difference), the GPU rows are much closer to
// the CPU engine's rows under the same method (under half that distance) than to the baseline.
inline void expect_method_path_ran(const Rows& gpu, const Rows& cpu, const Rows& gpu_baseline,
                                   const std::string& what) {
  constexpr double kNoise = 0.02;  // a bound on what bf16 rounding alone moves a row here
  double moved = 0, match = 0;
  for (size_t i = 0; i < std::min({gpu.size(), cpu.size(), gpu_baseline.size()}); ++i) {
    const int64_t V = int64_t(gpu[i].size());
    moved = std::max(moved, compare_row(gpu[i].data(), gpu_baseline[i].data(), V).rel_l2);
    match = std::max(match, compare_row(cpu[i].data(), gpu[i].data(), V).rel_l2);
  }
  std::printf("%s: largest row rel_l2, GPU vs GPU baseline %.4f, GPU vs CPU %.4f\n", what.c_str(), moved, match);
  if (moved > kNoise) {
    EXPECT_LT(match, moved / 2) << what;
  }
}

// Graph-replayed decode against eager decode of the same run: the same kernels and plans, so
// every row bit-equal (what names the run in the failure and the printed summary).
inline void expect_rows_bit_equal(const Rows& graph, const Rows& eager, int64_t captures, const std::string& what) {
  ASSERT_EQ(graph.size(), eager.size()) << what;
  int64_t differ = 0;
  for (size_t i = 0; i < graph.size(); ++i) differ += graph[i] != eager[i];
  EXPECT_EQ(differ, 0) << what << ": rows whose graph logits differ from eager";
  std::printf("%s: %lld captures, %lld of %zu rows differ from eager\n", what.c_str(), (long long)captures,
              (long long)differ, graph.size());
}

}  // namespace longctx::test

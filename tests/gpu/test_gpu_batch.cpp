// test_gpu_batch.cpp: several sequences on the GPU (GpuTransformer::new_sequence / attach /
// decode_batch, Engine::generate_batch on --device cuda) against each sequence run alone.
//
// What "equal" means here: a batched step computes each row with the same kernels as a step
// alone, but cuBLASLt picks its GEMM algorithm per row count and the split-KV decode plans its
// splits for the longest sequence of the step, so a row's logits may differ from alone by bf16
// rounding (never by a misplaced K/V row: those differ by whole units). So the model-level tests
// teacher-force the alone tokens and check every step's logits within the GPU tolerance
// (test_util.h), the argmax equal wherever alone's top-2 margin exceeds twice the largest
// difference seen (else it is a tie at this precision); the engine-level tests check greedy
// tokens equal outright. Graph replay on vs off is bit for bit. Skipped without a GPU.
// Run: build-gpu/tests/gpu/test_gpu --gtest_filter='GpuBatch*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "longctx/engine.h"
#include "test_util.h"

#ifdef LONGCTX_WITH_GPU
#include "gpu/device_weights.h"
#include "gpu/geometry.h"
#include "gpu/gpu_transformer.h"

namespace longctx {
namespace {

using test::compare_row;
using test::LogitDiff;
using test::random_ids;

int32_t argmax(const float* row, int64_t V) { return int32_t(std::max_element(row, row + V) - row); }

// One sequence alone on the model's own sequence: prefill, then n_new greedy steps; the logits
// of every step (prefill's last row first) and the tokens chosen.
struct Alone {
  std::vector<std::vector<float>> logits;  // [n_new + 1][vocab]
  std::vector<int32_t> tokens;             // [n_new + 1]
};

Alone run_alone(gpu::GpuTransformer& g, const std::vector<int32_t>& prompt, int64_t n_new) {
  const int64_t V = g.config().vocab_size;
  g.reset(int64_t(prompt.size()) + n_new);
  Alone a;
  std::vector<float> lg;
  g.forward(prompt, 1, &lg);
  for (int64_t s = 0; s <= n_new; ++s) {
    a.logits.push_back(lg);
    a.tokens.push_back(argmax(lg.data(), V));
    if (s < n_new) g.forward(std::span(&a.tokens.back(), 1), 1, &lg);
  }
  return a;
}

// The prompts as sequences of one pool (with room for `spare` more tokens: the own sequence),
// each prefilled attached; returns the sequences and the prefill's logits [seq][1][vocab].
struct Batch {
  std::vector<std::unique_ptr<gpu::GpuSequence>> seqs;
  std::vector<std::vector<std::vector<float>>> logits;  // [seq][step][vocab]
};

Batch prefill_batch(gpu::GpuTransformer& g, const std::vector<std::vector<int32_t>>& prompts, int64_t n_new,
                    int64_t spare = 0) {
  std::vector<int64_t> caps;
  for (const auto& p : prompts) caps.push_back(int64_t(p.size()) + n_new);
  if (spare) caps.push_back(spare);
  EXPECT_EQ(g.sequences_fit_problem(caps), "");
  g.reserve_sequences(caps);
  Batch b;
  std::vector<float> lg;
  for (size_t i = 0; i < prompts.size(); ++i) {
    b.seqs.push_back(g.new_sequence(caps[i]));
    g.attach(b.seqs.back().get());
    g.forward(prompts[i], 1, &lg);
    g.attach(nullptr);
    b.logits.push_back({lg});
  }
  return b;
}

// n_new batched steps of the sequences, fed the alone tokens (teacher forcing).
void decode_teacher_forced(gpu::GpuTransformer& g, Batch& b, const std::vector<Alone>& alone, int64_t n_new) {
  const size_t n = b.seqs.size();
  const int64_t V = g.config().vocab_size;
  std::vector<gpu::GpuSequence*> step;
  for (auto& s : b.seqs) step.push_back(s.get());
  std::vector<int32_t> ids(n);
  std::vector<float> lg;
  for (int64_t s = 0; s < n_new; ++s) {
    for (size_t i = 0; i < n; ++i) ids[i] = alone[i].tokens[size_t(s)];
    g.decode_batch(step, ids, lg);
    EXPECT_EQ(int64_t(lg.size()), int64_t(n) * V);
    for (size_t i = 0; i < n; ++i) b.logits[i].emplace_back(lg.begin() + int64_t(i) * V, lg.begin() + int64_t(i + 1) * V);
  }
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(b.seqs[i]->size(), b.seqs[i]->capacity());
}

std::vector<std::vector<std::vector<float>>> run_batched(gpu::GpuTransformer& g,
                                                         const std::vector<std::vector<int32_t>>& prompts,
                                                         const std::vector<Alone>& alone, int64_t n_new) {
  Batch b = prefill_batch(g, prompts, n_new);
  decode_teacher_forced(g, b, alone, n_new);
  return std::move(b.logits);
}

// Mixed prompt lengths (from 1 token to past several decode tiles), ids reproducible from seed.
std::vector<std::vector<int32_t>> mixed_prompts(int n, int32_t V, int64_t max_len, uint32_t seed) {
  std::vector<std::vector<int32_t>> p;
  for (int i = 0; i < n; ++i) {
    const int64_t len = i == 0 ? 1 : 1 + (int64_t(i) * 97 + 13 * i * i) % max_len;
    p.push_back(random_ids(len, V, seed + uint32_t(i)));
  }
  return p;
}

// Batched == alone for every sequence and step (see the file comment); returns the largest
// difference relative to its tolerance.
// fp8: the pool's scales are shared (gpu_transformer.h), so "alone" runs on the model's own
// sequence in the same pool while the batch's sequences hold their pages, with the scales the
// longest prompt's prefill set (it goes first, as in generate_batch): the same numbers a
// sequence decodes with in the batch. (Against alone with its own scales only the prefill's
// logits are equal: GpuBatchEngine checks the first tokens.)
double expect_batched_equals_alone(gpu::GpuTransformer& g, int n_seq, int64_t max_len, int64_t n_new,
                                   const std::string& label) {
  const int64_t V = g.config().vocab_size;
  auto prompts = mixed_prompts(n_seq, int32_t(V), max_len, 11);
  std::vector<Alone> alone;
  std::vector<std::vector<std::vector<float>>> batched;
  if (g.kv_cache() == gpu::KvCacheType::fp8) {
    std::stable_sort(prompts.begin(), prompts.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
    Batch b = prefill_batch(g, prompts, n_new, int64_t(prompts[0].size()) + n_new);
    for (const auto& p : prompts) alone.push_back(run_alone(g, p, n_new));  // own sequence, same scales
    decode_teacher_forced(g, b, alone, n_new);
    batched = std::move(b.logits);
  } else {
    for (const auto& p : prompts) alone.push_back(run_alone(g, p, n_new));
    batched = run_batched(g, prompts, alone, n_new);
  }
  double worst = 0, worst_abs = 0;
  int ties = 0, same_bits = 0, rows = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (size_t s = 0; s < batched[i].size(); ++s) {
      const LogitDiff d = compare_row(alone[i].logits[s].data(), batched[i][s].data(), V);
      ++rows;
      same_bits += d.max_abs == 0;
      worst = std::max(worst, d.max_abs / d.tol());
      worst_abs = std::max(worst_abs, d.max_abs);
      EXPECT_LE(d.max_abs, d.tol()) << label << " seq " << i << " (prompt " << prompts[i].size() << ") step " << s;
      if (d.argmax_a != d.argmax_b) {
        ++ties;
        EXPECT_LT(d.margin_a, 2 * d.max_abs) << label << " seq " << i << " step " << s << ": argmax differs ("
                                              << d.argmax_a << " vs " << d.argmax_b << ") with margin " << d.margin_a;
      }
    }
  }
  std::printf("[ gpu     ] %s: %d sequences x %lld steps, max |diff| %.3g (%.3f of tol), %d/%d rows bit-equal, "
              "%d argmax ties\n",
              label.c_str(), n_seq, (long long)(n_new + 1), worst_abs, worst, same_bits, rows, ties);
  return worst;
}

gpu::GpuTransformer make_model(const std::string& geometry, uint64_t seed, gpu::GpuOptions o) {
  const ModelConfig cfg = gpu::geometry_config(geometry);
  return gpu::GpuTransformer(cfg, gpu::DeviceWeights::random(cfg, seed, nullptr), o);
}

TEST(GpuBatch, Bf16BatchedEqualsAloneMixedLengths) {
  REQUIRE_GPU();
  auto g = make_model("smollm2-135m:4", 21, {.chunk = 256});
  expect_batched_equals_alone(g, 24, 700, 20, "bf16 smollm2-135m:4, 24 seqs");
}

// A chunk of 16 tokens: the arena holds 16 logit rows, so 20 sequences run as steps of 16 + 4.
TEST(GpuBatch, MoreSequencesThanStepRows) {
  REQUIRE_GPU();
  auto g = make_model("smollm2-135m:2", 22, {.chunk = 16});
  expect_batched_equals_alone(g, 20, 200, 6, "bf16 smollm2-135m:2, chunk 16, 20 seqs");
}

TEST(GpuBatch, Llama3GeometryD128) {
  REQUIRE_GPU();
  auto g = make_model("llama3-8b:1", 23, {.chunk = 1024});
  expect_batched_equals_alone(g, 8, 3000, 8, "bf16 llama3-8b:1, 8 seqs");
}

// Gemma 3 geometry: head_dim 256 and sliding-window layers (512) in the paged batched decode,
// sequences shorter and longer than the window.
TEST(GpuBatch, Gemma3GeometryWindowD256) {
  REQUIRE_GPU();
  auto g = make_model("gemma3-270m:6", 24, {.chunk = 256});
  expect_batched_equals_alone(g, 8, 1400, 8, "bf16 gemma3-270m:6, 8 seqs");
}

// fp8: batched == alone with the pool's shared scales (see expect_batched_equals_alone).
TEST(GpuBatch, Fp8BatchedEqualsAlone) {
  REQUIRE_GPU();
  auto g = make_model("smollm2-135m:4", 24, {.chunk = 256, .kv_cache = gpu::KvCacheType::fp8});
  expect_batched_equals_alone(g, 12, 600, 12, "fp8 smollm2-135m:4, 12 seqs");
}

// Sparse decode (A-shape sinks + window) batched: one build_decode for n sequences, each with
// its own length; prompts longer than sinks + window so the index matters.
TEST(GpuBatch, SparseDecodeBatchedEqualsAlone) {
  REQUIRE_GPU();
  auto g = make_model("smollm2-135m:4", 25, {.chunk = 256, .attn = "decode:a_shape=16,128"});
  expect_batched_equals_alone(g, 12, 900, 12, "decode:a_shape=16,128, 12 seqs");
  auto f = make_model("smollm2-135m:4", 25,
                      {.chunk = 256, .attn = "decode:a_shape=16,128", .kv_cache = gpu::KvCacheType::fp8});
  expect_batched_equals_alone(f, 8, 900, 8, "fp8 decode:a_shape=16,128, 8 seqs");
}

// A-shape on the Gemma 3 geometry: sparse prefill and decode at head_dim 256 on its global layers
// (the generic sparse prefill kernel, sparse decode's two-warps-per-key-group tiles), window
// layers dense; prompts past sinks + window so the index matters.
TEST(GpuBatch, SparseAShapeGemma3GeometryD256) {
  REQUIRE_GPU();
  auto g = make_model("gemma3-270m:6", 27, {.chunk = 256, .attn = "a_shape=16,128"});
  expect_batched_equals_alone(g, 6, 900, 8, "a_shape=16,128 gemma3-270m:6, 6 seqs");
}

// The batched step by graph replay equals its eager launches bit for bit (and does replay).
TEST(GpuBatch, GraphReplayEqualsEager) {
  REQUIRE_GPU();
  auto g = make_model("smollm2-135m:4", 26, {.chunk = 256});
  const int64_t V = g.config().vocab_size, n_new = 70;  // crosses a 64-key tile: re-captures
  const auto prompts = mixed_prompts(10, int32_t(V), 300, 5);
  std::vector<Alone> alone;
  for (const auto& p : prompts) alone.push_back(run_alone(g, p, n_new));
  g.set_cuda_graph(false);
  const int64_t c0 = g.batch_graph_captures();
  const auto eager = run_batched(g, prompts, alone, n_new);
  EXPECT_EQ(g.batch_graph_captures(), c0);
  g.set_cuda_graph(true);
  const auto graph = run_batched(g, prompts, alone, n_new);
  EXPECT_GT(g.batch_graph_captures(), c0);
  int differing = 0;
  for (size_t i = 0; i < prompts.size(); ++i)
    for (size_t s = 0; s < eager[i].size(); ++s)
      differing += std::memcmp(eager[i][s].data(), graph[i][s].data(), size_t(V) * sizeof(float)) != 0;
  EXPECT_EQ(differing, 0);
  std::printf("[ gpu     ] batched graph == eager bit for bit: %zu seqs x %lld steps, %lld captures\n", prompts.size(),
              (long long)n_new, (long long)(g.batch_graph_captures() - c0));
}

// Lifecycle and errors: no pool room, duplicates, no room for a token, the own sequence after a
// batch, pages given back by a destroyed sequence.
TEST(GpuBatch, SequenceLifecycleAndErrors) {
  REQUIRE_GPU();
  auto g = make_model("smollm2-135m:1", 27, {.chunk = 64});
  const int64_t V = g.config().vocab_size;
  std::string e = test::error_of([&] { (void)g.new_sequence(100); });
  EXPECT_TRUE(test::contains(e, "reserve_sequences")) << e;
  const int64_t caps[] = {100, 300};
  g.reserve_sequences(caps);
  auto a = g.new_sequence(100);
  auto b = g.new_sequence(300);
  e = test::error_of([&] { (void)g.new_sequence(100); });  // the pool is full
  EXPECT_TRUE(test::contains(e, "no run of free pages")) << e;
  std::vector<float> lg;
  const auto p = random_ids(100, int32_t(V), 3);
  g.attach(a.get());
  g.forward(p, 1, &lg);
  e = test::error_of([&] { g.reset(10); });
  EXPECT_TRUE(test::contains(e, "attach(nullptr)")) << e;
  g.attach(nullptr);
  gpu::GpuSequence* twice[] = {b.get(), b.get()};
  const int32_t ids2[] = {1, 2};
  e = test::error_of([&] { g.decode_batch(twice, ids2, lg); });
  EXPECT_TRUE(test::contains(e, "given twice")) << e;
  gpu::GpuSequence* full[] = {a.get()};  // 100 of 100 tokens
  e = test::error_of([&] { g.decode_batch(full, std::span(ids2, 1), lg); });
  EXPECT_TRUE(test::contains(e, "no room for one more")) << e;
  e = test::error_of([&] { g.reserve_sequences(caps); });
  EXPECT_TRUE(test::contains(e, "free them first")) << e;
  a.reset();  // its pages go back: a new sequence fits again
  auto c = g.new_sequence(128);
  EXPECT_EQ(c->size(), 0);
  c.reset();
  b.reset();
  g.reset(200);  // the own sequence uses the same pool
  g.forward(p, 1, &lg);
  EXPECT_EQ(g.size(), 100);
  const int64_t huge[] = {int64_t(1) << 34, 5};
  e = g.sequences_fit_problem(huge);
  EXPECT_TRUE(test::contains(e, "2 sequences") && test::contains(e, "free")) << e;
  std::printf("[ message ] %s\n", e.c_str());
}

// Engine::generate_batch on --device cuda: greedy tokens equal generate() of each prompt alone.
// fp8 (shared_scales): the longest prompt's tokens and every first token (prefill reads bf16
// K/V) must be equal; the other sequences' fp8 decode uses the longest prompt's scales, so their
// later tokens may part from alone (counted, not asserted).
void expect_engine_batch_equals_alone(Engine& eng, int n_prompts, int64_t max_len, int max_tokens,
                                      const std::string& label, bool shared_scales = false) {
  const int32_t V = int32_t(eng.config().vocab_size);
  const auto prompts = mixed_prompts(n_prompts, std::min<int32_t>(V, 32000), max_len, 41);
  SamplingParams sp;
  sp.max_tokens = max_tokens;
  std::vector<GenerateResult> alone;
  for (const auto& p : prompts) alone.push_back(eng.generate(p, sp));
  const std::vector<GenerateResult> batch = eng.generate_batch(prompts, sp);
  ASSERT_EQ(batch.size(), prompts.size());
  int equal = 0;
  size_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i)
    if (prompts[i].size() > prompts[longest].size()) longest = i;
  for (size_t i = 0; i < prompts.size(); ++i) {
    equal += batch[i].tokens == alone[i].tokens;
    if (shared_scales && i != longest) {
      ASSERT_FALSE(batch[i].tokens.empty() || alone[i].tokens.empty());
      EXPECT_EQ(batch[i].tokens[0], alone[i].tokens[0]) << label << " prompt " << i;
      continue;
    }
    EXPECT_EQ(batch[i].tokens, alone[i].tokens) << label << " prompt " << i << " (" << prompts[i].size() << " tokens)";
    EXPECT_EQ(batch[i].stop_reason, alone[i].stop_reason) << label << " prompt " << i;
  }
  // The engine stays usable alone afterwards.
  const GenerateResult again = eng.generate(prompts[0], sp);
  EXPECT_EQ(again.tokens, alone[0].tokens);
  std::printf("[ gpu     ] %s: %d/%d prompts generate the same greedy tokens batched as alone\n", label.c_str(), equal,
              n_prompts);
}

TEST(GpuBatchEngine, RandomWeightsGreedyEqualsAlone) {
  REQUIRE_GPU();
  auto eng = Engine::load({.model_path = "", .device = "cuda", .random_weights = "smollm2-135m:6", .gpu_chunk = 512});
  expect_engine_batch_equals_alone(*eng, 16, 600, 16, "engine random smollm2-135m:6");
}

// The default model (SmolLM2-135M-Instruct), bf16 and fp8 caches, 32 prompts of mixed lengths.
TEST(GpuBatchEngine, DefaultModelGreedyEqualsAlone) {
  REQUIRE_GPU();
  std::string path;
  try {
    path = default_model_path();
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  for (const char* kv : {"bf16", "fp8"}) {
    auto eng = Engine::load({.model_path = "", .device = "cuda", .kv_cache = kv});
    const bool fp8 = kv == std::string("fp8");
    expect_engine_batch_equals_alone(*eng, fp8 ? 12 : 32, 800, 24, std::string("engine default model, ") + kv, fp8);
  }
}

// HiP keeps its decode mask cache per decode row on the GPU (GpuMethod::keeps_sequence_state):
// decode_batch refuses it, generate_batch runs the prompts one at a time, and no sequence decodes
// with another's cached masks (each result equals generate() alone, greedy, exactly).
TEST(GpuBatchEngine, PerSequenceStateMethodRunsOneAtATime) {
  REQUIRE_GPU();
  const std::string hip = "decode:hip=k=64,window=64,sinks=16,refresh=4,dense_layers=1";
  auto g = make_model("llama3-8b:2", 31, {.chunk = 256, .attn = hip});
  EXPECT_FALSE(g.batches_decode());
  Batch b = prefill_batch(g, mixed_prompts(2, 32000, 600, 5), 4);
  std::vector<gpu::GpuSequence*> step{b.seqs[0].get(), b.seqs[1].get()};
  std::vector<float> lg;
  const std::string e = test::error_of([&] { g.decode_batch(step, std::vector<int32_t>{1, 2}, lg); });
  EXPECT_TRUE(test::contains(e, "one sequence at a time")) << e;
  for (const std::string& spec : {hip, std::string("hip=k=64,window=64,sinks=16,refresh=4,dense_layers=1")}) {
    auto eng =
        Engine::load({.model_path = "", .attn = spec, .device = "cuda", .random_weights = "llama3-8b:2", .gpu_chunk = 256});
    expect_engine_batch_equals_alone(*eng, 5, 900, 12, "engine llama3-8b:2 " + spec);
  }
}

TEST(GpuBatchEngine, NotFittingFailsBeforeAnyWork) {
  REQUIRE_GPU();
  auto eng = Engine::load({.model_path = "", .max_context = int64_t(1) << 30, .device = "cuda", .random_weights = "smollm2-135m:1"});
  std::vector<std::vector<int32_t>> prompts(3, random_ids(10, 1000, 1));
  SamplingParams sp;
  sp.max_tokens = int(int64_t(1) << 29);
  const std::string e = test::error_of([&] { (void)eng->generate_batch(prompts, sp); });
  EXPECT_TRUE(test::contains(e, "3 sequences") && test::contains(e, "free")) << e;
  std::printf("[ message ] %s\n", e.c_str());
}

}  // namespace
}  // namespace longctx
#endif  // LONGCTX_WITH_GPU

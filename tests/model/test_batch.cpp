// test_batch.cpp: several sequences in one engine (Engine::generate_batch, Transformer::decode_batch).
//
// The contract: a batch of prompts of different lengths, decoded together (batched projections,
// MLP and LM head; attention per sequence, each with its own length and method state), gives every
// sequence the tokens it gets when generated alone. Checked greedy on the default model with 32
// prompts of mixed lengths, dense and with sparse prefill + sparse decode (per-sequence routing);
// decode_batch's logits against one-at-a-time decoding on a tiny random model; errors before work.
// Run: build/tests/model/test_model --gtest_filter='Batch*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "longctx/engine.h"
#include "loader/model_file.h"
#include "model/tiny_model.h"
#include "model/weights.h"
#include "model/transformer.h"
#include "model_test_util.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {
namespace {

std::unique_ptr<Engine> default_engine(const std::string& attn) { return test::default_engine(attn, 96); }

// n prompts of ~15..~450 tokens: sentences of different lengths, so sequences finish at
// different steps (EOS or max_tokens) and their caches hold different lengths.
std::vector<std::vector<int32_t>> mixed_prompts(const Tokenizer& tok, int n) {
  const std::string base =
      "The library of the old monastery held a thousand books about rivers, mountains and the stars. ";
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::string text = "Story " + std::to_string(i) + ": ";
    for (int r = 0; r < (i * 7) % 23; ++r) text += base;
    text += "Question " + std::to_string(i) + ": what comes next?";
    out.push_back(tok.encode(text, true, false));
  }
  return out;
}

void expect_batch_equals_alone(const std::string& attn, int n_prompts) {
  auto eng = default_engine(attn);
  if (!eng) GTEST_SKIP() << "default model not installed (scripts/bootstrap.sh)";
  const auto prompts = mixed_prompts(eng->tokenizer(), n_prompts);
  SamplingParams sp;
  sp.max_tokens = 10;
  int64_t shortest = 1 << 30, longest = 0;
  for (const auto& p : prompts) {
    shortest = std::min<int64_t>(shortest, int64_t(p.size()));
    longest = std::max<int64_t>(longest, int64_t(p.size()));
  }
  ASSERT_GT(longest, 10 * shortest) << "the prompts should be of very different lengths";
  int64_t reported = 0;
  const auto batch = eng->generate_batch(prompts, sp, [&](const Progress& p) { reported = p.done; });
  EXPECT_EQ(reported, n_prompts);
  ASSERT_EQ(batch.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const GenerateResult alone = eng->generate(prompts[i], sp);
    EXPECT_EQ(batch[i].tokens, alone.tokens) << attn << ", prompt " << i << " (" << prompts[i].size() << " tokens)";
    EXPECT_EQ(batch[i].stop_reason, alone.stop_reason) << attn << ", prompt " << i;
    EXPECT_EQ(batch[i].text, alone.text) << attn << ", prompt " << i;
    EXPECT_EQ(batch[i].prompt_tokens, int64_t(prompts[i].size()));
  }
}

TEST(Batch, ThirtyTwoMixedLengthsGiveTheTokensOfEachAlone) { expect_batch_equals_alone("dense", 32); }

// Per-sequence method routing in a batch: sparse prefill, and sparse decode (sinks + window
// small enough to leave keys out of the longer prompts).
TEST(Batch, SparseDecodePerSequenceGivesTheTokensOfEachAlone) {
  expect_batch_equals_alone("prefill:a_shape=16,64;decode:a_shape=8,48", 12);
}

TEST(Batch, ErrorsBeforeAnyWork) {
  auto eng = default_engine("dense");
  if (!eng) GTEST_SKIP() << "default model not installed (scripts/bootstrap.sh)";
  const int64_t ctx = eng->max_context();
  std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {}, {4, 5}};
  SamplingParams sp;
  sp.max_tokens = 4;
  try {
    eng->generate_batch(prompts, sp);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt 1: the prompt is empty"), std::string::npos) << e.what();
  }
  prompts[1] = std::vector<int32_t>(size_t(ctx), 7);
  try {
    eng->generate_batch(prompts, sp);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt 1:"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(eng->generate_batch({}, sp).empty());
}

// decode_batch itself: rows of one batched step equal each sequence decoded alone (logits, tiny
// random model), whatever the order, and a full cache or a repeated sequence is an error.
TEST(Batch, DecodeBatchRowsEqualOneAtATime) {
  const auto dir = test::temp_dir("batch");
  write_tiny_model(dir.string(), {});
  const std::string path = (dir / "tiny.gguf").string();
  auto file = open_model_file(path);
  const ModelConfig cfg = ModelConfig::from_model_file(*file);
  const MethodContext mc{cfg.n_layer, cfg.n_head, cfg.n_kv_head, cfg.head_dim, cfg.name};
  ThreadPool pool(2);
  Transformer model(cfg, ModelWeights::load(*file, cfg), make_attention_method("dense", mc), pool);
  const std::vector<int64_t> lens = {5, 40, 17, 1, 63};
  std::vector<std::unique_ptr<SequenceState>> seqs;
  std::vector<std::vector<float>> alone;
  std::vector<float> lg;
  for (size_t i = 0; i < lens.size(); ++i) {
    std::vector<int32_t> ids;
    for (int64_t t = 0; t < lens[i]; ++t) ids.push_back(int32_t((t * 13 + int64_t(i) * 7) % cfg.vocab_size));
    seqs.push_back(model.new_sequence(lens[i] + 2));
    model.attach(seqs.back().get());
    model.forward(ids, 1, &lg);
    // Alone: a copy of the sequence decodes its next token by itself.
    SequenceState copy;
    copy.cache = seqs.back()->cache;
    copy.method = make_attention_method("dense", mc)->start_sequence();
    model.attach(&copy);
    const int32_t next = int32_t(i + 3);
    model.forward(std::span(&next, 1), 1, &lg);
    alone.push_back(lg);
  }
  model.attach(nullptr);
  std::vector<SequenceState*> order = {seqs[3].get(), seqs[0].get(), seqs[4].get(), seqs[2].get(), seqs[1].get()};
  const std::vector<int32_t> ids = {6, 3, 7, 5, 4};  // = i + 3 of each
  std::vector<float> rows;
  model.decode_batch(order, ids, rows);
  const int64_t V = cfg.vocab_size;
  const size_t which[] = {3, 0, 4, 2, 1};
  for (size_t r = 0; r < 5; ++r) {
    double worst = 0, scale = 0;
    for (int64_t v = 0; v < V; ++v) {
      worst = std::max(worst, std::abs(double(rows[r * size_t(V) + size_t(v)]) - alone[which[r]][size_t(v)]));
      scale = std::max(scale, std::abs(double(alone[which[r]][size_t(v)])));
    }
    EXPECT_LT(worst, 1e-4 * std::max(1.0, scale)) << "row " << r << " (sequence of " << lens[which[r]] << " tokens)";
    EXPECT_EQ(order[r]->cache.size(), lens[which[r]] + 1);
  }
  EXPECT_THROW(model.decode_batch(std::vector<SequenceState*>{seqs[0].get(), seqs[0].get()}, std::vector<int32_t>{1, 2},
                                  rows),
               Error);
  model.decode_batch(std::vector<SequenceState*>{seqs[0].get()}, std::vector<int32_t>{1}, rows);  // fills its cache
  EXPECT_THROW(model.decode_batch(std::vector<SequenceState*>{seqs[0].get()}, std::vector<int32_t>{1}, rows), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace longctx

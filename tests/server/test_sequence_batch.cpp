// test_sequence_batch.cpp: the step-level batch API (Engine::start_batch, SequenceBatch) on the
// default model, CPU.
//
// The contract: sequences opened at different steps (some while others decode, some while a long
// prompt is still prefilling) each get the tokens generate() gives their prompt alone (greedy);
// a short request streams tokens while a long prompt prefills (chunks interleave with decode
// steps); close() frees a sequence's KV reservation at once; requests that can never run or do
// not fit now are told apart before any work.
// Run: build/tests/server/test_sequence_batch
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "longctx/engine.h"
#include "util/error.h"

namespace longctx {
namespace {

constexpr int64_t kChunk = 64;  // small, so a few hundred tokens take several prefill steps

std::unique_ptr<Engine> default_engine() {
  std::string path;
  try {
    path = default_model_path();
  } catch (const Error&) {
    return nullptr;
  }
  return Engine::load({.model_path = path, .n_threads = 2, .max_context = 2048, .prefill_chunk = kChunk});
}

std::vector<int32_t> prompt(const Tokenizer& tok, int i, int repeats) {
  std::string text = "Note " + std::to_string(i) + ": ";
  for (int r = 0; r < repeats; ++r) text += "The river ran past the mill and the bakery, under the old bridge. ";
  return tok.encode(text + "What happened next?", true, false);
}

struct Collected {
  std::vector<int32_t> tokens;
  std::string text, stop_reason;
  std::vector<int64_t> token_steps;  // the step of each token
};

TEST(SequenceBatch, StaggeredSequencesEqualGenerateAlone) {
  auto eng = default_engine();
  if (!eng) GTEST_SKIP() << "default model not installed (scripts/bootstrap.sh)";
  const Tokenizer& tok = eng->tokenizer();
  const std::vector<int> repeats = {0, 12, 1, 5, 0, 3};  // 1 long prompt (~200 tokens: 4 chunks)
  SamplingParams sp;
  sp.max_tokens = 8;
  sp.stop_at_eos = false;  // every sequence decodes its 8 tokens
  std::vector<GenerateResult> alone;
  for (size_t i = 0; i < repeats.size(); ++i) alone.push_back(eng->generate(prompt(tok, int(i), repeats[i]), sp));

  auto batch = eng->start_batch({.kv_tokens = 4096, .max_sequences = 8});
  std::map<int64_t, size_t> which;  // sequence id -> prompt index
  std::vector<Collected> got(repeats.size());
  int64_t step = 0;
  const SequenceEventFn on_event = [&](const SequenceEvent& e) {
    Collected& c = got[which.at(e.id)];
    if (e.token >= 0) {
      c.tokens.push_back(e.token);
      c.token_steps.push_back(step);
    }
    c.text += e.text;
    if (e.finished) c.stop_reason = e.stop_reason;
    return true;
  };
  // Open two, step, open the rest one per step: sequences join a running batch.
  size_t next = 0;
  auto open_next = [&] {
    const size_t i = next++;
    which[batch->open({.prompt = prompt(tok, int(i), repeats[i]), .sp = sp})] = i;
  };
  open_next();
  open_next();
  for (; batch->stats().sequences > 0 || next < repeats.size(); ++step) {
    if (step > 0 && next < repeats.size()) open_next();
    batch->step(on_event);
    ASSERT_LT(step, 500) << "the batch does not finish";
  }
  for (size_t i = 0; i < repeats.size(); ++i) {
    EXPECT_EQ(got[i].tokens, alone[i].tokens) << "prompt " << i;
    EXPECT_EQ(got[i].text, alone[i].text) << "prompt " << i;
    EXPECT_EQ(got[i].stop_reason, alone[i].stop_reason) << "prompt " << i;
  }
  // Prompt 2 (short) opened while prompt 1 (4 chunks) still prefilled, and got its first token
  // before prompt 1 did (prefilling sequences take turns); prompt 0 decoded one token at every
  // step meanwhile: a long prompt freezes neither.
  ASSERT_FALSE(got[1].token_steps.empty());
  ASSERT_FALSE(got[2].token_steps.empty());
  EXPECT_LT(got[2].token_steps[0], got[1].token_steps[0]);
  for (size_t k = 1; k < got[0].token_steps.size(); ++k) EXPECT_EQ(got[0].token_steps[k], got[0].token_steps[k - 1] + 1);
  const BatchStats st = batch->stats();
  EXPECT_EQ(st.sequences, 0);
  EXPECT_EQ(st.kv_tokens, 0);
  EXPECT_EQ(st.kv_used, 0);
  EXPECT_GT(st.decode_tokens, 0);
}

TEST(SequenceBatch, CloseFreesAndBudgetAdmits) {
  auto eng = default_engine();
  if (!eng) GTEST_SKIP() << "default model not installed (scripts/bootstrap.sh)";
  const Tokenizer& tok = eng->tokenizer();
  SamplingParams sp;
  sp.max_tokens = 50;
  sp.stop_at_eos = false;
  const auto p = prompt(tok, 0, 2);
  const int64_t need = int64_t(p.size()) + sp.max_tokens;
  auto batch = eng->start_batch({.kv_tokens = 2 * need, .max_sequences = 4});
  const SequenceRequest r{.prompt = p, .sp = sp};
  EXPECT_EQ(batch->check(r), "");
  const int64_t a = batch->open(r);
  const int64_t b = batch->open(r);
  EXPECT_FALSE(batch->fits_now(r));  // the budget holds two
  EXPECT_THROW(batch->open(r), Error);
  int tokens_a = 0;
  for (int s = 0; s < 6; ++s)
    batch->step([&](const SequenceEvent& e) {
      tokens_a += e.id == a && e.token >= 0;
      return e.id != b || e.token < 0;  // b hangs up at its first token
    });
  EXPECT_GT(tokens_a, 0);
  EXPECT_EQ(batch->stats().sequences, 1);  // b closed by its callback
  EXPECT_TRUE(batch->fits_now(r));
  batch->close(a);
  batch->close(12345);  // unknown: ignored
  const BatchStats st = batch->stats();
  EXPECT_EQ(st.sequences, 0);
  EXPECT_EQ(st.kv_tokens, 0);
}

TEST(SequenceBatch, CheckNamesWhatCanNeverRun) {
  auto eng = default_engine();
  if (!eng) GTEST_SKIP() << "default model not installed (scripts/bootstrap.sh)";
  auto batch = eng->start_batch({.kv_tokens = 1000});
  const std::vector<int32_t> p(10, 1);
  auto why = [&](SequenceRequest r) { return batch->check(r); };
  EXPECT_NE(why({.prompt = {}}).find("empty"), std::string::npos);
  EXPECT_NE(why({.prompt = p, .sp = {.max_tokens = 5000}}).find("context"), std::string::npos);
  EXPECT_NE(why({.prompt = p, .sp = {.max_tokens = 1500}}).find("KV budget"), std::string::npos);
  EXPECT_NE(why({.prompt = p, .sp = {.temperature = -1.f}}).find("temperature"), std::string::npos);
  EXPECT_NE(why({.prompt = p, .attn = "no_such_method"}).find("no_such_method"), std::string::npos);
  EXPECT_EQ(why({.prompt = p, .sp = {.max_tokens = 4}, .attn = "a_shape=4,64"}), "");
  EXPECT_THROW(batch->open({.prompt = {}}), Error);
  EXPECT_EQ(batch->stats().sequences, 0);
}

// A sequence with its own attention method (a_shape) gets what an engine loaded with that method
// generates, while it shares the batch with dense sequences.
TEST(SequenceBatch, PerSequenceAttentionMethod) {
  auto dense = default_engine();
  if (!dense) GTEST_SKIP() << "default model not installed (scripts/bootstrap.sh)";
  const std::string spec = "a_shape=4,32";  // sink 4, window 32: differs from dense past 36 tokens
  auto sparse = Engine::load({.model_path = default_model_path(), .n_threads = 2, .max_context = 2048,
                              .attn = spec, .prefill_chunk = kChunk});
  const auto p = prompt(dense->tokenizer(), 7, 6);
  SamplingParams sp;
  sp.max_tokens = 12;
  sp.stop_at_eos = false;
  const GenerateResult want_sparse = sparse->generate(p, sp), want_dense = dense->generate(p, sp);
  auto batch = dense->start_batch({.kv_tokens = 4096});
  const int64_t ia = batch->open({.prompt = p, .sp = sp, .attn = spec});
  const int64_t id = batch->open({.prompt = p, .sp = sp});
  std::map<int64_t, std::vector<int32_t>> got;
  while (batch->stats().sequences > 0)
    batch->step([&](const SequenceEvent& e) {
      if (e.token >= 0) got[e.id].push_back(e.token);
      return true;
    });
  EXPECT_EQ(got[ia], want_sparse.tokens);
  EXPECT_EQ(got[id], want_dense.tokens);
}

}  // namespace
}  // namespace longctx

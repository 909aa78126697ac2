// test_gpu_batch_serve.cpp: continuous batching on the GPU (Engine::start_batch on --device
// cuda, make_gpu_batch: runtime/sequence_batch_gpu.cpp) with growing sequences in the paged pool.
//
// What: (1) requests joining at random steps (while others decode or prefill in chunks) and some
// leaving early (close) each get generate()'s greedy tokens alone (a leaver: a prefix of them);
// (2) pages are taken as sequences grow and given back when they leave, and the same schedule run
// again over a pool whose free pages lie elsewhere (other sequences hold the low pages) gives the
// same tokens and log-probabilities bit for bit; (3) a full pool queues (fits_now false, open()
// refuses with the numbers), a request that can never fit is refused by check(), and both clear
// once pages come back; (4) methods with per-sequence decode state (HiP) run one sequence at a time.
// Why greedy tokens may be compared outright: random-weight logits have wide top-2 margins, and
// GpuBatchEngine (test_gpu_batch.cpp) holds generate_batch to the same standard.
// Skipped without a GPU. Run: build-gpu/tests/gpu/test_gpu --gtest_filter='GpuServeBatch*'
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "longctx/engine.h"
#include "test_util.h"

#ifdef LONGCTX_WITH_GPU
#include "gpu/device_weights.h"
#include "gpu/geometry.h"
#include "gpu/gpu_transformer.h"
#include "gpu/null_tokenizer.h"
#include "runtime/sequence_batch.h"

namespace longctx {
namespace {

using test::random_ids;

constexpr int64_t kChunk = 256;  // the engine's GPU chunk and the batch's piece: generate's boundaries

struct Request {
  std::vector<int32_t> prompt;
  SamplingParams sp;
  int64_t join_step = 0;   // opened at the first step >= this when it fits
  int64_t leave_after = -1;  // close after this many tokens (-1: run to the end)
};

struct Got {
  int64_t join_step = -1;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string stop_reason;
  bool finished = false;
};

// Runs the requests through `batch` on their schedule; returns what each got. Also checks every
// step that the batch's KV use stays within its budget.
std::vector<Got> run_schedule(SequenceBatch& batch, const std::vector<Request>& reqs, bool logprobs = false) {
  std::vector<Got> got(reqs.size());
  std::map<int64_t, size_t> which;  // batch id -> request
  size_t next = 0;
  for (int64_t step = 0; next < reqs.size() || batch.stats().sequences > 0; ++step) {
    while (next < reqs.size() && reqs[next].join_step <= step) {
      const SequenceRequest r{.prompt = reqs[next].prompt, .sp = reqs[next].sp, .logprobs = logprobs};
      EXPECT_EQ(batch.check(r), "");
      if (!batch.fits_now(r)) break;  // queued: it joins when pages come back
      got[next].join_step = step;
      which[batch.open(r)] = next++;
    }
    std::vector<int64_t> leaving;
    batch.step([&](const SequenceEvent& e) {
      const size_t i = which.at(e.id);
      if (e.token >= 0) {
        got[i].tokens.push_back(e.token);
        got[i].logprobs.push_back(e.logprob);
      }
      if (e.finished) {
        got[i].finished = true;
        got[i].stop_reason = e.stop_reason;
      } else if (reqs[i].leave_after >= 0 && int64_t(got[i].tokens.size()) >= reqs[i].leave_after) {
        leaving.push_back(e.id);
      }
      return true;
    });
    for (int64_t id : leaving) batch.close(id);
    const BatchStats st = batch.stats();
    EXPECT_LE(st.kv_tokens, st.kv_capacity);
    EXPECT_LE(st.kv_used, st.kv_tokens);
    if (step > 100000) {
      ADD_FAILURE() << "the schedule did not finish";
      break;
    }
  }
  return got;
}

// n requests of random lengths (1 token .. max_len: past several chunks and pages), random
// max_tokens, joining at random steps, every fourth leaving early.
std::vector<Request> random_requests(int n, int32_t vocab, uint32_t seed, int64_t max_len = 900) {
  std::mt19937 rng(seed);
  std::vector<Request> reqs;
  int64_t step = 0;
  for (int i = 0; i < n; ++i) {
    Request r;
    const int64_t len = i % 5 == 0 ? 1 + int64_t(rng() % 4) : 1 + int64_t(rng() % uint32_t(max_len));
    r.prompt = random_ids(len, vocab, seed * 131 + uint32_t(i));
    r.sp.max_tokens = 1 + int(rng() % 150);  // past a page boundary for many
    r.sp.stop_at_eos = false;
    step += int64_t(rng() % 6);
    r.join_step = step;
    if (i % 4 == 3) r.leave_after = 1 + int64_t(rng() % 8);
    reqs.push_back(std::move(r));
  }
  return reqs;
}

TEST(GpuServeBatch, JoinsAndLeavesAtRandomStepsEqualGenerateAlone) {
  REQUIRE_GPU();
  auto eng = Engine::load({.model_path = "", .device = "cuda", .random_weights = "smollm2-135m:6", .gpu_chunk = kChunk});
  const auto reqs = random_requests(40, int32_t(eng->config().vocab_size), 7);
  std::vector<GenerateResult> alone;
  for (const Request& r : reqs) alone.push_back(eng->generate(r.prompt, r.sp));
  int64_t decode_rows = 0;
  std::vector<Got> got;
  {
    auto batch = eng->start_batch({.kv_tokens = 48 * 1024, .max_sequences = 24, .prefill_chunk = kChunk});
    got = run_schedule(*batch, reqs);
    decode_rows = batch->stats().decode_tokens;
    EXPECT_EQ(batch->stats().sequences, 0);
    EXPECT_EQ(batch->stats().kv_tokens, 0);
  }
  int equal = 0, leavers = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& a = alone[i].tokens;
    if (reqs[i].leave_after >= 0 && !got[i].finished) {
      ++leavers;
      ASSERT_LE(got[i].tokens.size(), a.size());
      EXPECT_EQ(got[i].tokens, std::vector<int32_t>(a.begin(), a.begin() + int64_t(got[i].tokens.size())))
          << "request " << i << " (left early)";
      continue;
    }
    EXPECT_TRUE(got[i].finished) << i;
    EXPECT_EQ(got[i].tokens, a) << "request " << i << " (prompt " << reqs[i].prompt.size() << ", max_tokens "
                                << reqs[i].sp.max_tokens << ")";
    EXPECT_EQ(got[i].stop_reason, alone[i].stop_reason) << i;
    equal += got[i].tokens == a;
  }
  EXPECT_GT(leavers, 0);
  // The engine generates alone again afterwards (the batch's pool released).
  EXPECT_EQ(eng->generate(reqs[1].prompt, reqs[1].sp).tokens, alone[1].tokens);
  std::printf("[ gpu     ] %d/%zu requests finished with generate()'s tokens, %d left early with a prefix; "
              "%lld decode rows\n",
              equal, reqs.size() - size_t(leavers), leavers, (long long)decode_rows);
}

// The model-level fixture: a GpuTransformer with random weights and a batch over it.
struct ModelBatch {
  gpu::GpuTransformer g;
  std::unique_ptr<Tokenizer> tok;
  explicit ModelBatch(const std::string& geometry)
      : g(gpu::geometry_config(geometry), gpu::DeviceWeights::random(gpu::geometry_config(geometry), 5, nullptr),
          {.chunk = kChunk}),
        tok(gpu::make_null_tokenizer(g.config().vocab_size)) {}
  std::unique_ptr<SequenceBatch> batch(int64_t kv_tokens, int max_sequences) {
    return make_gpu_batch({g, *tok, g.config(), 4096, kChunk, "dense"},
                          {.kv_tokens = kv_tokens, .max_sequences = max_sequences, .prefill_chunk = kChunk});
  }
};

TEST(GpuServeBatch, PagesGrowWithTheSequenceAndAreReused) {
  REQUIRE_GPU();
  ModelBatch mb("smollm2-135m:4");
  const int32_t V = int32_t(mb.g.config().vocab_size);
  constexpr int64_t P = 96;
  auto batch = mb.batch(P * 128, 8);  // 96 pages of 128 tokens
  auto u = mb.g.pool_use();
  ASSERT_EQ(u.pages, P);
  ASSERT_EQ(u.free_pages, P);
  // One sequence: its 200-token prompt takes 2 pages (one run); decoding past 256 tokens takes a
  // third only when it gets there.
  SamplingParams sp;
  sp.max_tokens = 120;
  sp.stop_at_eos = false;
  const int64_t id = batch->open({.prompt = random_ids(200, V, 1), .sp = sp});
  EXPECT_EQ(mb.g.pool_use().free_pages, P - 2);
  int64_t tokens = 0, third_at = -1;
  while (batch->stats().sequences > 0) {
    batch->step([&](const SequenceEvent& e) {
      EXPECT_EQ(e.id, id);
      tokens += e.token >= 0;
      return true;
    });
    const int64_t held = P - mb.g.pool_use().free_pages;
    if (batch->stats().sequences == 0) break;
    EXPECT_EQ(held, std::max<int64_t>(2, (199 + tokens + 127) / 128)) << "after " << tokens << " tokens";
    if (held == 3 && third_at < 0) third_at = tokens;
  }
  EXPECT_EQ(tokens, 120);
  EXPECT_EQ(third_at, 58);  // the step that samples token 58 appends row 257 (token 57)
  EXPECT_EQ(mb.g.pool_use().free_pages, P);

  // The same schedule twice: once on a fresh pool, once while spacer sequences (outside the
  // batch) hold the low pages and fragment the rest, so every sequence's pages lie elsewhere.
  // Prompts up to 300 tokens and 150 new ones: at most 4 pages each, 8 sequences use <= 32 of
  // the 92 free pages, so both runs admit on the same steps (checked) and run the same rows.
  const auto reqs = random_requests(16, V, 3, 300);
  const std::vector<Got> first = run_schedule(*batch, reqs, true);
  EXPECT_EQ(mb.g.pool_use().free_pages, P);
  std::vector<std::unique_ptr<gpu::GpuSequence>> spacers;
  for (int i = 0; i < 6; ++i) spacers.push_back(mb.g.new_sequence(128, 128));  // pages 0..5
  spacers.erase(spacers.begin() + 1);  // holes at page 1 and 3
  spacers.erase(spacers.begin() + 2);
  EXPECT_EQ(mb.g.pool_use().free_pages, P - 4);
  const std::vector<Got> second = run_schedule(*batch, reqs, true);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(first[i].join_step, second[i].join_step) << "request " << i;
    EXPECT_EQ(first[i].tokens, second[i].tokens) << "request " << i;
    EXPECT_EQ(first[i].logprobs, second[i].logprobs) << "request " << i;
  }
  EXPECT_EQ(mb.g.pool_use().free_pages, P - 4);
  spacers.clear();
  EXPECT_EQ(mb.g.pool_use().free_pages, P);
  EXPECT_EQ(mb.g.pool_use().longest_free_run, P);
}

TEST(GpuServeBatch, FullPoolQueuesAndNeverFittingIsRefused) {
  REQUIRE_GPU();
  ModelBatch mb("smollm2-135m:2");
  const int32_t V = int32_t(mb.g.config().vocab_size);
  auto batch = mb.batch(8 * 128, 16);  // 8 pages
  SamplingParams sp;
  sp.max_tokens = 200;  // with a 100-token prompt: 3 pages promised each
  sp.stop_at_eos = false;
  const SequenceRequest r{.prompt = random_ids(100, V, 2), .sp = sp};
  EXPECT_EQ(batch->check(r), "");
  const int64_t a = batch->open(r);
  const int64_t b = batch->open(r);
  EXPECT_TRUE(batch->fits_now(SequenceRequest{.prompt = random_ids(100, V, 3), .sp = {.max_tokens = 28}}));
  EXPECT_FALSE(batch->fits_now(r)) << "6 of 8 pages promised: a third request must wait";
  const std::string e = test::error_of([&] { batch->open(r); });
  EXPECT_TRUE(test::contains(e, "no room for the request now")) << e;
  // More than the whole budget: refused by check(), with the numbers.
  const SequenceRequest huge{.prompt = random_ids(900, V, 4), .sp = {.max_tokens = 200}};
  const std::string why = batch->check(huge);
  EXPECT_TRUE(test::contains(why, "1100") && test::contains(why, "1024")) << why;
  // Once a leaves, the third opens.
  batch->close(a);
  EXPECT_TRUE(batch->fits_now(r));
  const int64_t c = batch->open(r);
  int64_t done = 0;
  while (batch->stats().sequences > 0)
    batch->step([&](const SequenceEvent& ev) {
      EXPECT_TRUE(ev.id == b || ev.id == c);
      done += ev.finished;
      return true;
    });
  EXPECT_EQ(done, 2);
  EXPECT_EQ(mb.g.pool_use().free_pages, 8);
  // A per-request method other than the server's: refused with the reason.
  const std::string m = batch->check({.prompt = random_ids(5, V, 5), .sp = {}, .attn = "a_shape=64,256"});
  EXPECT_TRUE(test::contains(m, "server's method")) << m;
}

TEST(GpuServeBatch, PerSequenceStateMethodRunsOneAtATime) {
  REQUIRE_GPU();
  const std::string hip = "decode:hip=k=64,window=64,sinks=16,refresh=4,dense_layers=1";
  auto eng = Engine::load(
      {.model_path = "", .attn = hip, .device = "cuda", .random_weights = "llama3-8b:2", .gpu_chunk = kChunk});
  auto reqs = random_requests(4, 32000, 9);
  for (auto& r : reqs) r.leave_after = -1;
  std::vector<GenerateResult> alone;
  for (const Request& r : reqs) alone.push_back(eng->generate(r.prompt, r.sp));
  auto batch = eng->start_batch({.kv_tokens = 8192, .max_sequences = 4});
  const std::vector<Got> got = run_schedule(*batch, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[i].tokens, alone[i].tokens) << i;
}

}  // namespace
}  // namespace longctx
#endif  // LONGCTX_WITH_GPU

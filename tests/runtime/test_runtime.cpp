// test_runtime.cpp: sampler (greedy, top-k, top-p, seeds) and the text stream (UTF-8, stops).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/text_stream.h"
#include "util/error.h"

namespace longctx {
namespace {

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  Sampler s({});
  std::vector<float> l{0.1f, 3.f, -1.f, 3.f};
  EXPECT_EQ(s.sample(l), 1);
}

TEST(Sampler, TopKOneIsGreedy) {
  SamplingParams p;
  p.temperature = 1.5f;
  p.top_k = 1;
  Sampler s(p);
  std::vector<float> l{0.1f, 0.2f, 5.f, 0.3f};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(l), 2);
}

TEST(Sampler, TopPKeepsOnlyTheNucleus) {
  SamplingParams p;
  p.temperature = 1.f;
  p.top_p = 0.5f;
  p.seed = 3;
  Sampler s(p);
  // probs ~ 0.64, 0.24, 0.09, 0.03: nucleus 0.5 is just the first.
  std::vector<float> l{3.f, 2.f, 1.f, 0.f};
  for (int i = 0; i < 100; ++i) EXPECT_EQ(s.sample(l), 0);
}

TEST(Sampler, TemperatureSamplingFollowsTheDistribution) {
  SamplingParams p;
  p.temperature = 1.f;
  p.seed = 42;
  Sampler s(p);
  std::vector<float> l{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  std::map<int, int> counts;
  const int N = 20000;
  for (int i = 0; i < N; ++i) counts[s.sample(l)]++;
  EXPECT_NEAR(counts[0] / double(N), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(N), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(N), 0.2, 0.02);
}

TEST(Sampler, SameSeedSameTokens) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 7;
  Sampler a(p), b(p);
  std::vector<float> l{0.f, 0.5f, 0.2f, 0.9f, 0.1f};
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.sample(l), b.sample(l));
}

TEST(Sampler, BadParamsAreErrors) {
  SamplingParams p;
  p.top_p = 0.f;
  EXPECT_THROW(Sampler{p}, Error);
  p.top_p = 1.f;
  p.temperature = -1.f;
  EXPECT_THROW(Sampler{p}, Error);
}

TEST(TextStream, HoldsBackIncompleteUtf8) {
  TextStream s({});
  s.push("a\xE2\x82");  // "a" + first two bytes of the euro sign
  EXPECT_EQ(s.take_ready(), "a");
  s.push("\xAC!");
  EXPECT_EQ(s.take_ready(), "\xE2\x82\xAC!");
}

TEST(TextStream, StopStringAcrossTokensIsCutAndNeverShown) {
  TextStream s({"</end>"});
  EXPECT_FALSE(s.push("hello </"));
  EXPECT_EQ(s.take_ready(), "hello ");  // "</" may start the stop string
  EXPECT_FALSE(s.push("en"));
  EXPECT_EQ(s.take_ready(), "");
  EXPECT_TRUE(s.push("d> tail"));
  EXPECT_EQ(s.text(), "hello ");
  EXPECT_EQ(s.take_ready(), "");
  EXPECT_EQ(s.take_rest(), "");
}

TEST(TextStream, FalseStartOfStopIsReleased) {
  TextStream s({"STOP"});
  s.push("ST");
  EXPECT_EQ(s.take_ready(), "");
  s.push("AY");
  EXPECT_EQ(s.take_ready(), "STAY");
}

}  // namespace
}  // namespace longctx

#include <atomic>
#include <stdexcept>

#include "util/thread_pool.h"

namespace longctx {
namespace {

TEST(ThreadPool, EveryItemExactlyOnceOverManyCalls) {
  ThreadPool pool(4);
  std::vector<int> hits(1000);
  for (int call = 0; call < 2000; ++call) {
    const int64_t n = 1 + call % 997;
    std::fill(hits.begin(), hits.end(), 0);
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
    }, 1 + call % 7);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)], 1) << "call " << call << " item " << i;
  }
}

TEST(ThreadPool, ExceptionsReachTheCaller) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(100, [](int64_t b, int64_t) {
    if (b >= 50) throw std::runtime_error("boom");
  }), std::runtime_error);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 100);
}

}  // namespace
}  // namespace longctx

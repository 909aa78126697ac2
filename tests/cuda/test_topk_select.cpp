// test_topk_select.cpp: cuda::top_k_select (kernels/cuda/topk_select.h) against its CPU twin
// sparse/topk.h's top_k_indices on fresh random votes: plain, many exact ties, signed values with
// -0/+0, inf and NaN, M = k, k > M, M = k +- 1, the count read from device memory (with garbage
// votes past it), the skip flag, and one captured CUDA graph replayed for several counts.
// Run: build-gpu/tests/cuda/test_cuda --gtest_filter='TopKSelect*' (skips without a Hopper GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cuda/topk_select.h"
#include "sparse/topk.h"
#include "test_util.h"

namespace longctx::cuda::test {
namespace {

std::vector<float> random_votes(size_t n) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = std::abs(d(rng()));
  return v;
}

std::vector<int32_t> cpu_top_k(const std::vector<float>& v, int64_t M, int64_t k, int32_t offset) {
  std::vector<int32_t> out;
  top_k_indices(std::span<const float>(v.data(), size_t(M)), k, out);
  for (auto& i : out) i += offset;
  return out;
}

// The kernel on v with M = m (host count, or *m_dev - sub when on_device), out pre-filled with -7.
std::vector<int32_t> gpu_top_k(const std::vector<float>& v, int64_t m, int64_t k, int32_t offset, bool on_device) {
  const int64_t kk = std::min(k, m);
  DevBuf dv(std::max<size_t>(v.size() * 4, 4)), dout(size_t(std::max<int64_t>(k, 1)) * 4), dm(4),
      ws(top_k_select_workspace_bytes());
  dv.upload(v);
  dout.upload(std::vector<int32_t>(size_t(std::max<int64_t>(k, 1)), -7));
  constexpr int32_t kSub = 37;
  dm.upload(std::vector<int32_t>{int32_t(m) + kSub});
  TopKSelectParams p{.vote = dv.as<float>(), .max_M = on_device ? int64_t(v.size()) : m, .k = k, .offset = offset,
                     .out = dout.as<int32_t>(), .workspace = ws.p};
  if (on_device) p.m_dev = dm.as<int32_t>(), p.m_sub = kSub;
  top_k_select(p);
  auto got = dout.download<int32_t>(size_t(std::max<int64_t>(k, 1)));
  for (size_t i = size_t(std::max<int64_t>(kk, 0)); i < got.size(); ++i)
    EXPECT_EQ(got[i], -7) << "wrote past min(k, M) at " << i;
  got.resize(size_t(std::max<int64_t>(kk, 0)));
  return got;
}

TEST(TopKSelect, EqualsCpuTopKRandomAndTies) {
  LC_REQUIRE_GPU();
  for (auto [M, k] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {5, 3}, {100, 100}, {100, 300}, {1000, 1}, {2047, 2048}, {2048, 2048}, {2049, 2048},
           {5000, 2048}, {70001, 2048}, {131072 - 4128, 2048}, {300001, 4096}}) {
    auto v = random_votes(size_t(M));
    EXPECT_EQ(gpu_top_k(v, M, k, 128, false), cpu_top_k(v, M, k, 128)) << "M " << M << " k " << k;
    for (auto& x : v) x = std::round(x * 4.f) / 4.f;  // many exact ties at the k-th place
    EXPECT_EQ(gpu_top_k(v, M, k, 0, false), cpu_top_k(v, M, k, 0)) << "ties, M " << M << " k " << k;
    std::fill(v.begin(), v.end(), 0.5f);  // all equal: the first k
    EXPECT_EQ(gpu_top_k(v, M, k, 3, false), cpu_top_k(v, M, k, 3)) << "all equal, M " << M << " k " << k;
  }
}

TEST(TopKSelect, SignedZerosInfAndNaN) {
  LC_REQUIRE_GPU();
  const int64_t M = 9000, k = 700;
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(M));
  for (auto& x : v) x = std::round(d(rng()) * 2.f) / 2.f;
  std::uniform_int_distribution<int64_t> at(0, M - 1);
  const float special[] = {0.f, -0.f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()};
  for (int i = 0; i < 2000; ++i) v[size_t(at(rng()))] = special[i % 5];
  for (int64_t kk : {k, M - 10, M})
    EXPECT_EQ(gpu_top_k(v, M, kk, 0, false), cpu_top_k(v, M, kk, 0)) << "k " << kk;
}

TEST(TopKSelect, CountFromDeviceMemory) {
  LC_REQUIRE_GPU();
  const int64_t max_M = 40000, k = 2048;
  auto v = random_votes(size_t(max_M));
  for (size_t i = 0; i < v.size(); i += 3) v[i] = std::round(v[i] * 8.f) / 8.f;
  for (int64_t M : {int64_t(0), int64_t(1), k - 1, k, k + 1, int64_t(12345), max_M}) {
    auto w = v;  // the votes past M are larger than any before it: a kernel that read them would pick them
    for (size_t i = size_t(M); i < w.size(); ++i) w[i] = 100.f + float(i);
    EXPECT_EQ(gpu_top_k(w, M, k, 5, true), cpu_top_k(w, M, k, 5)) << "device M " << M;
  }
}

TEST(TopKSelect, SkipFlagLeavesOutput) {
  LC_REQUIRE_GPU();
  const int64_t M = 5000, k = 100;
  const auto v = random_votes(size_t(M));
  DevBuf dv(v.size() * 4), dout(size_t(k) * 4), dskip(4), ws(top_k_select_workspace_bytes());
  dv.upload(v);
  const std::vector<int32_t> before(size_t(k), 42);
  for (int32_t skip : {1, 0}) {
    dout.upload(before);
    dskip.upload(std::vector<int32_t>{skip});
    top_k_select({.vote = dv.as<float>(), .max_M = M, .k = k, .out = dout.as<int32_t>(), .skip = dskip.as<int32_t>(),
                  .workspace = ws.p});
    EXPECT_EQ(dout.download<int32_t>(size_t(k)), skip ? before : cpu_top_k(v, M, k, 0)) << "skip " << skip;
  }
}

// One capture, replayed while the count in device memory changes (as the decode graph does).
TEST(TopKSelect, GraphReplayFollowsDeviceCount) {
  LC_REQUIRE_GPU();
  const int64_t max_M = 30000, k = 1024;
  const auto v = random_votes(size_t(max_M));
  DevBuf dv(v.size() * 4), dout(size_t(k) * 4), dm(4), ws(top_k_select_workspace_bytes());
  dv.upload(v);
  dm.upload(std::vector<int32_t>{int32_t(max_M)});
  Stream s = stream_create();
  {
    CudaGraph g;
    g.begin_capture(s);
    top_k_select({.vote = dv.as<float>(), .max_M = max_M, .m_dev = dm.as<int32_t>(), .k = k, .out = dout.as<int32_t>(),
                  .workspace = ws.p},
                 s);
    g.end_capture(s);
    for (int64_t M : {int64_t(29999), int64_t(1025), int64_t(17000), max_M}) {
      dm.upload(std::vector<int32_t>{int32_t(M)});
      g.launch(s);
      stream_sync(s);
      EXPECT_EQ(dout.download<int32_t>(size_t(k)), cpu_top_k(v, M, k, 0)) << "replayed with M " << M;
    }
  }
  stream_destroy(s);
}

}  // namespace
}  // namespace longctx::cuda::test

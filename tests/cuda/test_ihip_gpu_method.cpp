// test_ihip_gpu_method.cpp: InfiniteHiP's GpuMethod (methods/infinitehip/infinitehip_gpu.cpp)
// against the CPU method (InfiniteHipMethod::build_index, rope=off) on the same bf16 data: every
// 64-query block of prefill chunks (early and late layers, a chunk after a prefix and the prompt's
// first chunk) attends the same key set (on small-integer inputs: the GPU scores rope=off prefill on
// tensor cores, whose fp32 sums equal the CPU's only when every dot is exact; test_ihip_gpu.cpp
// judges random inputs against fp64); and what the GPU refuses, with the reason: rope=on, and
// sparse decode (prefill:infinitehip runs, its decode is dense).
// Run: build-gpu/tests/cuda/test_ihip_gpu_method (skips without a Hopper GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "methods/gpu_method.h"
#include "methods/registry.h"
#include "sparse/sparse_index.h"
#include "test_util.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx::cuda {
namespace {
using namespace test;

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

constexpr int H = 8, Hkv = 2, D = 128, kLayers = 4;
// Small stages so a few thousand keys prune at every stage; layer 0 is early (k_early).
const char* kSpec = "prefill:infinitehip=l_c=64/16/4,k=1024/256/64,n_sink=32,n_stream=128,early_layers=1,"
                    "k_early=128,rope=off";
MethodContext model() { return {.n_layer = kLayers, .n_head = H, .n_kv_head = Hkv, .head_dim = D, .model_name = "t"}; }

std::vector<float> to_float(const std::vector<uint16_t>& h) {
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = bf16_to_f32(h[i]);
  return f;
}

std::vector<KeyRange> normalised(std::span<const KeyRange> r, int64_t limit) {
  BlockKeys out;
  block_union(r, {}, limit, out);
  return out.ranges;
}

// Small integers in [-2, 2], exact in bf16: every q.k is an exact integer however it is summed.
std::vector<uint16_t> small_int_bf16(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> dist(-2, 2);
  std::vector<uint16_t> v(n);
  for (auto& x : v) {
    const float f = float(dist(rng));
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    x = uint16_t(bits >> 16);
  }
  return v;
}

void check_chunk(GpuMethod& g, const AttentionMethod& m, int layer, int64_t n_q, int64_t q_pos0) {
  const int64_t n_kv = q_pos0 + n_q;
  const auto hq = small_int_bf16(size_t(n_q * H * D), uint64_t(31 + q_pos0 + layer)),
             hk = small_int_bf16(size_t(n_kv * Hkv * D), uint64_t(37 + q_pos0 + layer));
  auto fq = to_float(hq), fk = to_float(hk);
  DevBuf q(hq.size() * 2), k(hk.size() * 2);
  q.upload(hq);
  k.upload(hk);
  const GpuIndex gi =
      g.build_prefill({.layer = layer, .q = q.p, .k = k.p, .n_q = n_q, .q_pos0 = q_pos0, .n_kv = n_kv}, nullptr);
  device_sync();
  ASSERT_EQ(gi.index.n_index_head, 1);
  ASSERT_EQ(gi.index.n_qblk, (n_q + 63) / 64);
  std::vector<int64_t> ptr(size_t(gi.index.n_qblk + 1));
  copy_d2h(ptr.data(), gi.index.range_ptr, ptr.size() * 8);
  ASSERT_EQ(ptr.back(), gi.index.n_ranges);
  std::vector<KeyRange> ranges(size_t(gi.index.n_ranges));
  copy_d2h(ranges.data(), gi.index.ranges, ranges.size() * 8);
  EXPECT_GE(gi.workspace_bytes, sparse_attention_workspace_bytes(gi.index));
  AttnParams p;
  p.q = fq.data();
  p.k = fk.data();
  p.n_q = n_q;
  p.n_kv = n_kv;
  p.n_head = H;
  p.n_kv_head = Hkv;
  p.head_dim = D;
  p.q_pos0 = q_pos0;
  p.layer = layer;
  ASSERT_EQ(m.route({.layer = layer, .phase = Phase::prefill, .n_q = n_q, .q_pos0 = q_pos0, .n_kv = n_kv}),
            Route::sparse);
  auto st = m.start_sequence();
  const SparseIndex cpu = m.build_index(p, Phase::prefill, *st, pool());
  ASSERT_EQ(cpu.heads.size(), 1u);
  for (int64_t b = 0; b < gi.index.n_qblk; ++b) {
    const int64_t limit = std::min<int64_t>(q_pos0 + (b + 1) * 64, n_kv);
    const auto got = normalised({ranges.data() + ptr[size_t(b)], size_t(ptr[size_t(b + 1)] - ptr[size_t(b)])}, limit);
    const auto want = normalised(cpu.heads[0].block_ranges(b), limit);
    ASSERT_EQ(got.size(), want.size()) << "layer " << layer << " block " << b;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(got[i].start == want[i].start && got[i].end == want[i].end)
          << "layer " << layer << " block " << b << " range " << i;
  }
}

TEST(IhipGpuMethod, PrefillIndexHasTheCpuKeySets) {
  LC_REQUIRE_GPU();
  const auto m = make_attention_method(kSpec, model());
  auto g = make_gpu_method(*m, model());
  ASSERT_TRUE(g);
  EXPECT_FALSE(g->decodes());
  g->allocate({.model = model(), .chunk = 512, .capacity = 16384, .n_seq = 1}, nullptr);
  const auto* phase = m.get();
  for (int layer : {0, 2}) {
    SCOPED_TRACE(layer);
    check_chunk(*g, *phase, layer, 300, 9000);   // a chunk after a prefix (partial last block)
    check_chunk(*g, *phase, layer, 512, 15872);  // the buffers' full chunk at the capacity
    check_chunk(*g, *phase, layer, 512, 0);      // the prompt's first chunk
  }
  g->release();
}

TEST(IhipGpuMethod, RefusesWhatTheGpuCannotRunWithTheReason) {
  const auto on = make_attention_method("prefill:infinitehip", model());
  try {
    (void)make_gpu_method(*on, model());
    ADD_FAILURE() << "rope=on accepted on the GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("un-rotated keys"), std::string::npos) << e.what();
  }
  EXPECT_NE(gpu_method_problem(*on, model()).find("rope=on"), std::string::npos);
  const auto both = make_attention_method("infinitehip=rope=off", model());
  EXPECT_NE(gpu_method_problem(*both, model()).find("sparse decode"), std::string::npos)
      << gpu_method_problem(*both, model());
  EXPECT_EQ(gpu_method_problem(*make_attention_method(kSpec, model()), model()), "");
}

}  // namespace
}  // namespace longctx::cuda

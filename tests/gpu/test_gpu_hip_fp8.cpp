// test_gpu_hip_fp8.cpp: HiP's prefill index over the fp8 cache's keys (--attn-tiles fp8:
// GpuPrefillStep::k_fp8, gpu_transformer.h "fp8 attention tiles"). The engine hands the layer's
// e4m3 rows to the builder; HiP's GPU builder (methods/hip/hip_gpu.cpp) must score those codes,
// not the bf16 keys beside them.
//
// Check: the builder gets bf16 keys K1 and, as k_fp8, the e4m3 codes of DIFFERENT keys K2 (times a
// scale of 1/4, as the cache stores k / scale); every (head, 64-query block) of its index must
// attend the key set of the CPU method (HipMethod::build_index) over e4m3_to_f32(code), and some
// entry must differ from the CPU method over K1 (else the check could not tell the two apart).
// Inputs are small integers in [-2, 2] (exact in bf16 and e4m3, their dot products exact on the
// tensor cores), so the GPU's selection is the CPU's bit for bit, ties included (as
// tests/cuda/test_hip_gpu_method.cpp; random inputs with near-tie judging: tests/cuda/test_hip_gpu.cpp).
// At head_dim 128 (4 query / 2 KV heads) and 64 (the tiny engine models' of test_gpu_attn_tiles.cpp,
// which runs HiP end to end with fp8 tiles).
//   build/tests/gpu/test_gpu --gtest_filter='HipFp8*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "test_util.h"

#ifdef LONGCTX_WITH_GPU
#include "kernels/cuda/runtime.h"
#include "kernels/params/attention.h"
#include "kernels/ref/fp8_e4m3.h"
#include "methods/gpu_method.h"
#include "methods/method.h"
#include "sparse/sparse_index.h"
#include "util/half.h"
#include "util/thread_pool.h"
#endif

namespace longctx {
namespace {

#ifdef LONGCTX_WITH_GPU

constexpr const char* kSpec = "hip=k=64,window=64,sinks=8,refresh=4,dense_layers=0";
constexpr float kCodeScale = 4.f;  // the codes hold 4 * K2 (k / scale with scale 1/4): exact in e4m3

// Small integers in [-2, 2] (a rounded normal), as floats.
std::vector<float> small_integers(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = std::round(std::clamp(nd(rng) * 1.5f, -2.f, 2.f));
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& f) {
  std::vector<uint16_t> h(f.size());
  for (size_t i = 0; i < f.size(); ++i) h[i] = f32_to_bf16(f[i]);
  return h;
}

struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) : p(cuda::dev_malloc(bytes)) {}
  ~DevBuf() { cuda::dev_free(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

// The normalised key set of (start, end) pairs, clipped to limit.
std::vector<KeyRange> keys_of(const std::vector<KeyRange>& r, int64_t limit) {
  BlockKeys out;
  block_union(r, {}, limit, out);
  return out.ranges;
}
bool same(const std::vector<KeyRange>& a, const std::vector<KeyRange>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const KeyRange& x, const KeyRange& y) {
           return x.start == y.start && x.end == y.end;
         });
}

void check_builder_scores_fp8_keys(int n_head, int n_kv_head, int head_dim) {
  SCOPED_TRACE(testing::Message() << "heads " << n_head << "/" << n_kv_head << " d=" << head_dim);
  const MethodContext mc{.n_layer = 2, .n_head = n_head, .n_kv_head = n_kv_head, .head_dim = head_dim, .model_name = "t"};
  const auto m = make_attention_method(kSpec, mc);
  auto g = make_gpu_method(*m, mc);
  ASSERT_TRUE(g);
  g->allocate({.model = mc, .chunk = 256, .capacity = 8192, .n_seq = 1}, nullptr);
  const int64_t n_q = 200, q_pos0 = 3100, n_kv = q_pos0 + n_q;  // q [n_q, H, D], k [n_kv, Hkv, D]
  const auto fq = small_integers(size_t(n_q * n_head * head_dim), 1);
  const auto fk1 = small_integers(size_t(n_kv * n_kv_head * head_dim), 2);  // the bf16 keys (not scored)
  const auto fk2 = small_integers(size_t(n_kv * n_kv_head * head_dim), 3);  // the keys of the codes
  std::vector<uint8_t> codes(fk2.size());
  std::vector<float> fk8(fk2.size());  // e4m3_to_f32(code): what the CPU twin scores
  for (size_t i = 0; i < fk2.size(); ++i) {
    codes[i] = f32_to_e4m3(fk2[i] * kCodeScale);
    fk8[i] = e4m3_to_f32(codes[i]);
  }
  const auto hq = to_bf16(fq), hk1 = to_bf16(fk1);
  DevBuf q(hq.size() * 2), k(hk1.size() * 2), k8(codes.size());
  cuda::copy_h2d(q.p, hq.data(), hq.size() * 2);
  cuda::copy_h2d(k.p, hk1.data(), hk1.size() * 2);
  cuda::copy_h2d(k8.p, codes.data(), codes.size());
  const GpuIndex gi = g->build_prefill(
      {.layer = 1, .q = q.p, .k = k.p, .n_q = n_q, .q_pos0 = q_pos0, .n_kv = n_kv, .k_fp8 = k8.p}, nullptr);
  cuda::device_sync();
  const int64_t entries = int64_t(n_head) * gi.index.n_qblk;
  std::vector<int64_t> ptr(size_t(entries + 1));
  cuda::copy_d2h(ptr.data(), gi.index.range_ptr, ptr.size() * 8);
  std::vector<int32_t> ranges(size_t(gi.index.n_ranges * 2));
  cuda::copy_d2h(ranges.data(), gi.index.ranges, ranges.size() * 4);

  ThreadPool pool(2);
  auto cpu_index = [&](const std::vector<float>& keys) {
    AttnParams p;
    p.q = fq.data();
    p.k = keys.data();
    p.n_q = n_q;
    p.n_kv = n_kv;
    p.n_head = n_head;
    p.n_kv_head = n_kv_head;
    p.head_dim = head_dim;
    p.q_pos0 = q_pos0;
    p.layer = 1;
    auto st = m->start_sequence();
    return m->build_index(p, Phase::prefill, *st, pool);
  };
  const SparseIndex over_codes = cpu_index(fk8), over_bf16 = cpu_index(fk1);
  int64_t bad = 0, differs_from_bf16 = 0;
  for (int h = 0; h < n_head; ++h)
    for (int64_t b = 0; b < gi.index.n_qblk; ++b) {
      const int64_t e = h * gi.index.n_qblk + b, limit = std::min<int64_t>(q_pos0 + (b + 1) * 64, n_kv);
      std::vector<KeyRange> gr;
      for (int64_t i = ptr[size_t(e)]; i < ptr[size_t(e + 1)]; ++i) gr.push_back({ranges[size_t(2 * i)], ranges[size_t(2 * i + 1)]});
      const auto got = keys_of(gr, limit);
      const auto cr = over_codes.heads[size_t(h)].block_ranges(b), c1 = over_bf16.heads[size_t(h)].block_ranges(b);
      const auto want = keys_of({cr.begin(), cr.end()}, limit), other = keys_of({c1.begin(), c1.end()}, limit);
      if (!same(got, want)) {
        ++bad;
        ADD_FAILURE() << "head " << h << " block " << b << ": not the CPU method's key set over the codes";
      }
      differs_from_bf16 += !same(want, other);
    }
  std::printf("[hip fp8] d=%d: %lld entries, %lld differ from the CPU's over the bf16 keys, %lld wrong\n", head_dim,
              (long long)entries, (long long)differs_from_bf16, (long long)bad);
  EXPECT_GT(differs_from_bf16, 0) << "the two key sets select alike: the check cannot tell which one was scored";
  g->release();
}

TEST(HipFp8, BuilderScoresTheFp8KeysHeadDim128) {
  REQUIRE_GPU();
  check_builder_scores_fp8_keys(4, 2, 128);
}

TEST(HipFp8, BuilderScoresTheFp8KeysHeadDim64) {
  REQUIRE_GPU();
  check_builder_scores_fp8_keys(4, 2, 64);
}

#endif  // LONGCTX_WITH_GPU

}  // namespace
}  // namespace longctx

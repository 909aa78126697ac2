// test_hip_gpu_method.cpp: HiP's GpuMethod (methods/hip/hip_gpu.cpp) against the CPU method
// (HipMethod::build_index) on the same bf16 data: every (head, query block) of a prefill chunk and
// every (sequence, head) row of decode steps attends the same key set (the GPU pads and does not
// merge ranges, so key sets are compared after normalisation). Decode runs as one captured CUDA
// graph replayed over refresh and cached steps while the lengths and queries change. Both at
// head_dim 128 (4 query / 2 KV heads) and 256 (gemma-3-270m's geometry: 4 query heads, 1 KV head).
// Run: build-gpu/tests/cuda/test_hip_gpu_method (skips without a Hopper GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "methods/gpu_method.h"
#include "methods/hip/hip_method.h"
#include "sparse/sparse_index.h"
#include "test_util.h"
#include "util/thread_pool.h"

namespace longctx::cuda {
namespace {
using namespace test;

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

constexpr int kLayers = 3;
const char* kSpec = "hip=k=64,window=64,sinks=8,refresh=4,dense_layers=0";
MethodContext model(int n_head = 4, int n_kv_head = 2, int head_dim = 128) {
  return {.n_layer = kLayers, .n_head = n_head, .n_kv_head = n_kv_head, .head_dim = head_dim, .model_name = "t"};
}
MethodContext gemma_like() { return model(4, 1, 256); }

std::vector<float> to_float(const std::vector<uint16_t>& h) {
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = bf16_to_f32(h[i]);
  return f;
}

// The normalised key set of a list of (start, end) pairs (clipped to limit).
std::vector<KeyRange> keys_of(const int32_t* pairs, int64_t n, int64_t limit) {
  std::vector<KeyRange> r;
  for (int64_t i = 0; i < n; ++i) r.push_back({pairs[2 * i], pairs[2 * i + 1]});
  BlockKeys out;
  block_union(r, {}, limit, out);
  return out.ranges;
}
bool same(const std::vector<KeyRange>& a, const std::vector<KeyRange>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const KeyRange& x, const KeyRange& y) {
           return x.start == y.start && x.end == y.end;
         });
}

// bf16 values in {-2, ..., 2}: dot products of up to 256 of them are exact in fp32 in any order.
std::vector<uint16_t> small_integers(size_t n) {
  std::vector<double> tmp;
  auto h = random_bf16(n, 1.0, tmp);
  for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16(std::round(std::clamp(float(tmp[i]) * 1.5f, -2.f, 2.f)));
  return h;
}

void check_prefill_key_sets(const MethodContext& mc) {
  SCOPED_TRACE(testing::Message() << "heads " << mc.n_head << "/" << mc.n_kv_head << " d=" << mc.head_dim);
  const int H = mc.n_head, Hkv = mc.n_kv_head, D = mc.head_dim;
  const auto m = make_attention_method(kSpec, mc);
  auto g = make_gpu_method(*m, mc);
  ASSERT_TRUE(g);
  g->allocate({.model = mc, .chunk = 256, .capacity = 8192, .n_seq = 1}, nullptr);
  const int64_t n_q = 200, q_pos0 = 3100, n_kv = q_pos0 + n_q;
  // Small-integer inputs: the GPU's tensor-core dot products are exact, so its selection is the
  // CPU's bit for bit (test_hip_gpu judges random inputs against an fp64 oracle).
  const auto hq = small_integers(size_t(n_q * H * D)), hk = small_integers(size_t(n_kv * Hkv * D));
  auto fq = to_float(hq), fk = to_float(hk);
  DevBuf q(hq.size() * 2), k(hk.size() * 2);
  q.upload(hq);
  k.upload(hk);
  const GpuIndex gi = g->build_prefill({.layer = 1, .q = q.p, .k = k.p, .n_q = n_q, .q_pos0 = q_pos0, .n_kv = n_kv}, nullptr);
  device_sync();
  const int64_t entries = int64_t(H) * gi.index.n_qblk;
  std::vector<int64_t> ptr(size_t(entries + 1));
  copy_d2h(ptr.data(), gi.index.range_ptr, ptr.size() * 8);
  std::vector<int32_t> ranges(size_t(gi.index.n_ranges * 2));
  copy_d2h(ranges.data(), gi.index.ranges, ranges.size() * 4);
  AttnParams p;
  p.q = fq.data();
  p.k = fk.data();
  p.n_q = n_q;
  p.n_kv = n_kv;
  p.n_head = H;
  p.n_kv_head = Hkv;
  p.head_dim = D;
  p.q_pos0 = q_pos0;
  p.layer = 1;
  auto st = m->start_sequence();
  const SparseIndex cpu = m->build_index(p, Phase::prefill, *st, pool());
  for (int h = 0; h < H; ++h)
    for (int64_t b = 0; b < gi.index.n_qblk; ++b) {
      const int64_t e = h * gi.index.n_qblk + b, limit = std::min<int64_t>(q_pos0 + (b + 1) * 64, n_kv);
      const auto cr = cpu.heads[size_t(h)].block_ranges(b);
      BlockKeys want;
      block_union(cr, {}, limit, want);
      EXPECT_TRUE(same(keys_of(ranges.data() + 2 * ptr[size_t(e)], ptr[size_t(e + 1)] - ptr[size_t(e)], limit),
                       want.ranges))
          << "head " << h << " block " << b;
    }
  g->release();
}

TEST(HipGpuMethod, PrefillIndexHasTheCpuKeySets) {
  LC_REQUIRE_GPU();
  check_prefill_key_sets(model());
}

TEST(HipGpuMethod, HeadDim256PrefillIndexHasTheCpuKeySets) {
  LC_REQUIRE_GPU();
  check_prefill_key_sets(gemma_like());
}

void check_decode_graph(const MethodContext& mc) {
  SCOPED_TRACE(testing::Message() << "heads " << mc.n_head << "/" << mc.n_kv_head << " d=" << mc.head_dim);
  const int H = mc.n_head, Hkv = mc.n_kv_head, D = mc.head_dim;
  const auto m = make_attention_method(kSpec, mc);
  auto g = make_gpu_method(*m, mc);
  ASSERT_TRUE(g);
  const int n_seq = 2, page = 16, cap = 6000, max_pages = cap / page, layer = 2;
  g->allocate({.model = mc, .chunk = 64, .capacity = cap, .n_seq = n_seq}, nullptr);
  const int64_t n_pages = int64_t(n_seq) * max_pages;
  std::vector<int32_t> tab(static_cast<size_t>(n_pages));
  std::iota(tab.begin(), tab.end(), 0);
  std::shuffle(tab.begin(), tab.end(), std::mt19937_64(5));
  std::vector<double> tmp;
  const auto hk = random_bf16(size_t(n_pages * page * Hkv * D), 1.0, tmp);
  const auto fk = to_float(hk);
  DevBuf kp(hk.size() * 2), table(tab.size() * 4), dlens(8), q(size_t(n_seq * H * D) * 2);
  kp.upload(hk);
  table.upload(tab);
  KvView kv;
  kv.k_pool = kv.v_pool = kp.p;
  kv.elem = KvElem::bf16;
  kv.block_table = table.as<int32_t>();
  kv.seq_lens = dlens.as<int32_t>();
  kv.n_seq = n_seq;
  kv.max_pages_per_seq = max_pages;
  kv.page_size = page;
  kv.n_pages = n_pages;
  kv.n_kv_head = Hkv;
  kv.head_dim = D;
  kv.on_device = true;
  const std::vector<int32_t> len0 = {2500, 5100};
  std::vector<std::unique_ptr<MethodState>> cpu_st;
  for (int s = 0; s < n_seq; ++s) cpu_st.push_back(m->start_sequence());
  Stream stream = stream_create();
  CudaGraph graph;
  GpuDecodeIndex gi;
  for (int step = 0; step < 9; ++step) {
    const std::vector<int32_t> lens = {len0[0] + step, len0[1] + step};
    dlens.upload(lens);
    const auto hq = random_bf16(size_t(n_seq * H * D), 1.0, tmp);
    q.upload(hq);
    if (step == 0) {  // one eager step (kernel setup), then capture the next one
      gi = g->build_decode({.layer = layer, .kv = kv, .q = q.p}, stream);
    } else {
      if (step == 1) {
        graph.begin_capture(stream);
        gi = g->build_decode({.layer = layer, .kv = kv, .q = q.p}, stream);
        graph.end_capture(stream);
      }
      graph.launch(stream);
    }
    stream_sync(stream);
    const int64_t R = gi.index.range_capacity / (n_seq * H);
    std::vector<int32_t> ptr(size_t(n_seq * H + 1)), ranges(size_t(gi.index.range_capacity * 2));
    copy_d2h(ptr.data(), gi.index.range_ptr, ptr.size() * 4);
    copy_d2h(ranges.data(), gi.index.ranges, ranges.size() * 4);
    const auto fq = to_float(hq);
    for (int s = 0; s < n_seq; ++s) {
      const int64_t len = lens[size_t(s)];
      std::vector<float> keys(size_t(len * Hkv * D));
      for (int64_t t = 0; t < len; ++t) {
        const int64_t row = int64_t(tab[size_t(s * max_pages + t / page)]) * page + t % page;
        std::copy_n(&fk[size_t(row * Hkv * D)], Hkv * D, &keys[size_t(t * Hkv * D)]);
      }
      AttnParams p;
      p.q = fq.data() + s * H * D;
      p.k = keys.data();
      p.n_q = 1;
      p.n_kv = len;
      p.n_head = H;
      p.n_kv_head = Hkv;
      p.head_dim = D;
      p.q_pos0 = len - 1;
      p.layer = layer;
      const SparseIndex cpu = m->build_index(p, Phase::decode, *cpu_st[size_t(s)], pool());
      for (int h = 0; h < H; ++h) {
        const int64_t r = s * H + h;
        EXPECT_EQ(ptr[size_t(r)], r * R);
        BlockKeys want;
        block_union(cpu.heads[size_t(h)].block_ranges(0), {}, len, want);
        EXPECT_TRUE(same(keys_of(ranges.data() + 2 * r * R, R, len), want.ranges))
            << "step " << step << " seq " << s << " head " << h;
      }
    }
  }
  EXPECT_EQ(static_cast<HipState&>(*cpu_st[0]).estimates, 3);  // steps 0, 4, 8 on the CPU too
  stream_destroy(stream);
  g->release();
}

TEST(HipGpuMethod, DecodeGraphReplaysRefreshAndCachedSteps) {
  LC_REQUIRE_GPU();
  check_decode_graph(model());
}

TEST(HipGpuMethod, HeadDim256DecodeGraphReplaysRefreshAndCachedSteps) {
  LC_REQUIRE_GPU();
  check_decode_graph(gemma_like());
}

// A budget the estimator cannot hold is refused when the method is made, before any work (no GPU
// needed: the factory runs on the host), with what to change.
TEST(HipGpuMethod, BudgetOverTheEstimatorIsRefusedUpFront) {
  auto big = make_attention_method("hip=k=8192,b_k=2,dense_layers=0", model());
  const std::string why = gpu_method_problem(*big, model());
  EXPECT_NE(why.find("at most 2048 key blocks"), std::string::npos) << why;
  EXPECT_NE(why.find("asks for 4096"), std::string::npos) << why;
  auto fits = make_attention_method("hip=k=8192,b_k=4,dense_layers=0", model());
  EXPECT_EQ(gpu_method_problem(*fits, model()), "");
}

// head_dim 256 runs (the registry used to refuse HiP there); a CTA the estimator's shared memory
// cannot hold is refused up front, naming the parameters to lower. k = 18432 with b_k = 16 (1152
// key blocks of 16 sampled keys, their item scores in shared memory): 233,744 bytes at head_dim 256,
// 221,456 at 64 (the limit: 232,448).
TEST(HipGpuMethod, HeadDim256IsAcceptedAndOversizedSharedMemoryRefused) {
  auto m = make_attention_method("hip=dense_layers=0", gemma_like());
  EXPECT_EQ(gpu_method_problem(*m, gemma_like()), "");
  auto big = make_attention_method("hip=k=18432,b_k=16,dense_layers=0", gemma_like());
  const std::string why = gpu_method_problem(*big, gemma_like());
  EXPECT_NE(why.find("shared memory"), std::string::npos) << why;
  EXPECT_NE(why.find("lower k"), std::string::npos) << why;
  EXPECT_EQ(gpu_method_problem(*big, model(4, 2, 64)), "") << "the same budget fits at head_dim 64";
}

}  // namespace
}  // namespace longctx::cuda

// test_ihip_gpu_method.cpp: InfiniteHiP's GpuMethod (methods/infinitehip/infinitehip_gpu.cpp)
// against the CPU method (InfiniteHipMethod::build_index, rope=off) on the same bf16 data: every
// 64-query block of prefill chunks (early and late layers, a chunk after a prefix and the prompt's
// first chunk) attends the same key set (on small-integer inputs: the GPU scores rope=off prefill on
// tensor cores, whose fp32 sums equal the CPU's only when every dot is exact; test_ihip_gpu.cpp
// judges random inputs against fp64); decode (InfiniteHipMethod's per-stage caches, refreshed
// on the device): over a run of steps every step's decode index holds the CPU method's key set
// (step types None / S1 / S1&2 / All, steps the route makes dense, a position that goes back)
// and the step-type counts equal the CPU State's; at head_dim 128 (8 / 2 heads), 256
// (gemma-3-270m's 4 / 1 heads) and 64 (SmolLM2-135M's 9 / 3); and what the GPU refuses, with the reason: rope=on
// composed per phase (rope=on runs as one method for both phases: tests/gpu/test_gpu_infinitehip.cpp);
// rope=on prefill's block attention on several streams (attend_blocks) bit-equal to block by block;
// rope=on decode's compacted attention on the fp8 cache's e4m3 rows (attend_decode, kv_fp8): equal
// bits to the bf16 rows of the same values where they are exact, and an fp64 oracle otherwise.
// Run: build-gpu/tests/cuda/test_ihip_gpu_method (skips without a Hopper GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "methods/gpu_method.h"
#include "methods/infinitehip/infinitehip_attend_gpu.h"
#include "methods/infinitehip/infinitehip_gpu.h"
#include "methods/infinitehip/infinitehip_method.h"
#include "kernels/ref/fp8_e4m3.h"
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

constexpr int kLayers = 4;
struct Geometry {  // the test model's attention heads and head_dim
  int H, Hkv, D;
};
constexpr Geometry kGqa128{8, 2, 128};  // GQA groups of 4 at head_dim 128
constexpr Geometry kGemma3{4, 1, 256};  // gemma-3-270m's attention: 4 query heads on 1 KV head, head_dim 256
constexpr Geometry kSmolLM2{9, 3, 64};  // SmolLM2-135M's (the default model): 9 query heads on 3 KV heads, head_dim 64
// Small stages so a few thousand keys prune at every stage; layer 0 is early (k_early).
const char* kSpec = "prefill:infinitehip=l_c=64/16/4,k=1024/256/64,n_sink=32,n_stream=128,early_layers=1,"
                    "k_early=128,rope=off";
MethodContext model(const Geometry& ge = kGqa128) {
  return {.n_layer = kLayers, .n_head = ge.H, .n_kv_head = ge.Hkv, .head_dim = ge.D, .model_name = "t"};
}

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

void check_chunk(GpuMethod& g, const AttentionMethod& m, const Geometry& ge, int layer, int64_t n_q, int64_t q_pos0) {
  const int H = ge.H, Hkv = ge.Hkv, D = ge.D;
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

// extra: appended to the spec (",rank=local").
void check_prefill_index(const Geometry& ge, const std::string& extra = "") {
  const auto m = make_attention_method(kSpec + extra, model(ge));
  auto g = make_gpu_method(*m, model(ge));
  ASSERT_TRUE(g);
  EXPECT_FALSE(g->decodes());
  g->allocate({.model = model(ge), .chunk = 512, .capacity = 16384, .n_seq = 1}, nullptr);
  const auto* phase = m.get();
  for (int layer : {0, 2}) {
    SCOPED_TRACE(layer);
    check_chunk(*g, *phase, ge, layer, 300, 9000);   // a chunk after a prefix (partial last block)
    check_chunk(*g, *phase, ge, layer, 512, 15872);  // the buffers' full chunk at the capacity
    check_chunk(*g, *phase, ge, layer, 512, 0);      // the prompt's first chunk
  }
  g->release();
}

TEST(IhipGpuMethod, PrefillIndexHasTheCpuKeySets) {
  LC_REQUIRE_GPU();
  check_prefill_index(kGqa128);
}

// Decode: keys of a sequence in a one-page device view (the GPU model's own_view), a fresh query per
// step; the CPU method runs with its State across the same steps.
void check_decode_index(const Geometry& ge, const std::string& extra = "") {
  const int H = ge.H, Hkv = ge.Hkv, D = ge.D;
  // Both phases; refresh 8/4/2 so a dozen steps visit every step type (from stage 0, 1, 2; cached).
  const std::string spec = "infinitehip=l_c=64/16/4,k=1024/256/64,n_sink=32,n_stream=128,early_layers=1,k_early=128,"
                           "refresh=8/4/2,rope=off" + extra;
  const auto m = make_attention_method(spec, model(ge));
  auto g = make_gpu_method(*m, model(ge));
  ASSERT_TRUE(g);
  EXPECT_TRUE(g->decodes());
  EXPECT_TRUE(g->keeps_sequence_state());
  constexpr int64_t cap = 8192;
  g->allocate({.model = model(ge), .chunk = 512, .capacity = cap, .n_seq = 1}, nullptr);
  std::vector<double> tmp;
  const auto hk = random_bf16(size_t(cap * Hkv * D), 1.0, tmp);
  const auto fk = to_float(hk);
  DevBuf k(hk.size() * 2), table(4), len_d(4);
  k.upload(hk);
  table.upload(std::vector<int32_t>{0});
  KvView kv;
  kv.k_pool = k.p;
  kv.v_pool = k.p;
  kv.elem = KvElem::bf16;
  kv.block_table = table.as<int32_t>();
  kv.seq_lens = len_d.as<int32_t>();
  kv.n_seq = 1;
  kv.max_pages_per_seq = 1;
  kv.page_size = int(cap);
  kv.n_pages = 1;
  kv.n_kv_head = Hkv;
  kv.head_dim = D;
  kv.on_device = true;
  const auto& cpu_m = static_cast<const InfiniteHipMethod&>(*m);
  // The route turns sparse at length 32 + 64 + 128 (min_k 64): start just before it; later a
  // position that goes back (a new request on the same state) refreshes every stage.
  std::vector<int64_t> lens;
  for (int64_t n = 200; n < 240; ++n) lens.push_back(n);
  for (int64_t n = 3000; n < 3013; ++n) lens.push_back(n);
  for (int64_t n = 2500; n < 2505; ++n) lens.push_back(n);
  int checked_sparse = 0;
  for (int layer : {0, 2}) {
    g->start_sequence(nullptr);
    auto state = m->start_sequence();
    auto& s2 = static_cast<InfiniteHipMethod::State&>(*state);
    for (const int64_t n : lens) {
      SCOPED_TRACE(::testing::Message() << "layer " << layer << " len " << n);
      const auto hq = random_bf16(size_t(H * D), 1.0, tmp);
      auto fq = to_float(hq);
      DevBuf q(hq.size() * 2);
      q.upload(hq);
      len_d.upload(std::vector<int32_t>{int32_t(n)});
      const GpuDecodeIndex gi = g->build_decode({.layer = layer, .kv = kv, .q = q.p}, nullptr);
      device_sync();
      ASSERT_EQ(gi.index.n_seq, 1);
      ASSERT_EQ(gi.index.n_index_head, 1);
      std::vector<int32_t> ptr(2);
      copy_d2h(ptr.data(), gi.index.range_ptr, 8);
      ASSERT_LE(int64_t(ptr[1]), gi.index.range_capacity);
      std::vector<KeyRange> ranges(static_cast<size_t>(ptr[1]));
      copy_d2h(ranges.data(), gi.index.ranges, ranges.size() * 8);
      std::vector<KeyRange> want;
      const AttnStep step{.layer = layer, .phase = Phase::decode, .n_q = 1, .q_pos0 = n - 1, .n_kv = n};
      if (cpu_m.route(step) == Route::sparse) {
        AttnParams p;
        p.q = fq.data();
        p.k = fk.data();
        p.n_q = 1;
        p.n_kv = n;
        p.n_head = H;
        p.n_kv_head = Hkv;
        p.head_dim = D;
        p.q_pos0 = n - 1;
        p.layer = layer;
        const SparseIndex cpu = m->build_index(p, Phase::decode, s2, pool());
        want = normalised(cpu.heads[0].block_ranges(0), n);
        ++checked_sparse;
      } else {
        want = {{0, int32_t(n)}};  // dense: every key (the GPU attends all of them through the index)
      }
      const auto got = normalised(ranges, n);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(got[i].start == want[i].start && got[i].end == want[i].end) << "range " << i;
      int64_t keys = 0;
      for (const KeyRange& r : got) keys += r.end - r.start;
      EXPECT_LE(keys, gi.max_keys_per_row);
    }
    const IhipGpuDecodeCounts c = infinitehip_gpu_decode_counts(*g, nullptr);
    ASSERT_EQ(c.refreshes.size(), s2.refreshes.size());
    for (size_t i = 0; i < c.refreshes.size(); ++i) EXPECT_EQ(c.refreshes[i], s2.refreshes[i]) << "stage " << i;
    EXPECT_EQ(c.cached_steps, s2.cached_steps);
    for (size_t i = 0; i < c.refreshes.size(); ++i) EXPECT_GT(c.refreshes[i], 0) << "step type from stage " << i;
    EXPECT_GT(c.cached_steps, 0);
    std::printf("[ ihip decode ] layer %d: refreshes from stage 0/1/2 %lld/%lld/%lld, cached %lld\n", layer,
                (long long)c.refreshes[0], (long long)c.refreshes[1], (long long)c.refreshes[2],
                (long long)c.cached_steps);
  }
  EXPECT_GT(checked_sparse, 40);
  g->release();
}

TEST(IhipGpuMethod, DecodeIndexHasTheCpuKeySetsAtEveryStep) {
  LC_REQUIRE_GPU();
  check_decode_index(kGqa128);
}

// gemma-3-270m's attention shape (4 / 1 heads, head_dim 256): the same prefill and decode key sets.
TEST(IhipGpuMethod, HeadDim256HasTheCpuKeySets) {
  LC_REQUIRE_GPU();
  EXPECT_EQ(gpu_method_problem(*make_attention_method("infinitehip=rope=off", model(kGemma3)), model(kGemma3)), "");
  check_prefill_index(kGemma3);
  check_decode_index(kGemma3);
}

// The default model's attention shape (SmolLM2-135M: 9 / 3 heads, head_dim 64): the same key sets.
TEST(IhipGpuMethod, HeadDim64HasTheCpuKeySets) {
  LC_REQUIRE_GPU();
  EXPECT_EQ(gpu_method_problem(*make_attention_method("infinitehip=rope=off", model(kSmolLM2)), model(kSmolLM2)), "");
  EXPECT_EQ(gpu_method_problem(*make_attention_method("infinitehip", model(kSmolLM2)), model(kSmolLM2)), "");
  check_prefill_index(kSmolLM2);
  check_decode_index(kSmolLM2);
}

TEST(IhipGpuMethod, RefusesWhatTheGpuCannotRunWithTheReason) {
  // rope=on keeps pre-RoPE keys: on the GPU the method attends itself, both phases as one method.
  const auto on = make_attention_method("prefill:infinitehip", model());
  try {
    (void)make_gpu_method(*on, model());
    ADD_FAILURE() << "rope=on composed per phase accepted on the GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pre-RoPE"), std::string::npos) << e.what();
  }
  const auto both_on = make_attention_method("infinitehip", model());
  EXPECT_EQ(gpu_method_problem(*both_on, model()), "");
  EXPECT_TRUE(make_gpu_method(*both_on, model())->attends());
  // Sparse decode runs (both phases, or decode alone after a dense prefill).
  EXPECT_EQ(gpu_method_problem(*make_attention_method("infinitehip=rope=off", model()), model()), "");
  EXPECT_EQ(gpu_method_problem(*make_attention_method("decode:infinitehip=rope=off", model()), model()), "");
  EXPECT_EQ(gpu_method_problem(*make_attention_method(kSpec, model()), model()), "");
}

// rope=on prefill's attention (IhipCompactAttention): attend_blocks, which runs a chunk's 64-row
// blocks on several streams at once, each on its own slice of the gather buffers, writes the same
// bits as attend_rows block by block (the kernels and their inputs are the same), on random
// inputs with a random key set per block (ending with the block's own rows, as the method's sets);
// capacity n_kv (fewer lanes: 10 blocks reuse their lanes' slices) and kLanes x the largest set.
void check_compact_blocks(const Geometry& ge, int64_t capacity_keys_per_lane) {
  const MethodContext m = model(ge);
  const int64_t n_kv = 4000, T = 600, q0 = n_kv - T, n_blk = (T + 63) / 64;
  const size_t kv_row = size_t(ge.Hkv) * size_t(ge.D), q_row = size_t(ge.H) * size_t(ge.D);
  std::vector<double> scratch;
  DevBuf k(n_kv * kv_row * 2), v(n_kv * kv_row * 2), q(size_t(T) * q_row * 2), o_ref(size_t(T) * q_row * 2),
      o_new(size_t(T) * q_row * 2), inv_freq(size_t(ge.D / 2) * 4);
  k.upload(random_bf16(n_kv * kv_row, 1.0, scratch));
  v.upload(random_bf16(n_kv * kv_row, 1.0, scratch));
  q.upload(random_bf16(size_t(T) * q_row, 1.0, scratch));
  std::vector<float> f(size_t(ge.D / 2));
  for (int i = 0; i < ge.D / 2; ++i) f[size_t(i)] = float(std::pow(10000.0, -2.0 * i / ge.D));
  inv_freq.upload(f);
  // Each block: a random subset (~1/4 .. 1/3 of the earlier keys, at most 1200) then its own rows.
  std::vector<int32_t> all;
  std::vector<IhipCompactBlock> blocks;
  int64_t max_keys = 0;
  for (int64_t b = 0; b < n_blk; ++b) {
    const int64_t row0 = b * 64, n = std::min<int64_t>(64, T - row0), first = q0 + row0;
    std::vector<int32_t> set;
    const double keep = std::uniform_real_distribution<double>(0.1, 0.3)(rng());
    for (int64_t j = 0; j < first && int64_t(set.size()) < 1200; ++j)
      if (std::uniform_real_distribution<double>(0, 1)(rng()) < keep) set.push_back(int32_t(j));
    for (int64_t j = 0; j < n; ++j) set.push_back(int32_t(first + j));
    blocks.push_back({.row0 = row0, .n_rows = n, .keys = nullptr, .n_keys = int64_t(set.size())});
    max_keys = std::max<int64_t>(max_keys, int64_t(set.size()));
    all.insert(all.end(), set.begin(), set.end());
  }
  DevBuf keys(all.size() * 4);
  keys.upload(all);
  for (int64_t b = 0, off = 0; b < n_blk; off += blocks[size_t(b)].n_keys, ++b)
    blocks[size_t(b)].keys = keys.as<int32_t>() + off;
  const int64_t capacity = std::max(n_kv, capacity_keys_per_lane < 0 ? max_keys * IhipCompactAttention::kLanes
                                                                       : capacity_keys_per_lane);
  IhipCompactAttention att;
  att.allocate(m, T, capacity, nullptr);
  IhipCompactRows rows{.q = q.p, .o = o_ref.p, .n_rows = T, .keys = nullptr, .n_keys = 0, .k = k.p, .v = v.p,
                       .inv_freq = inv_freq.as<float>(), .rope_factor = 1.f, .scale = 0.f};
  for (const IhipCompactBlock& b : blocks) {
    IhipCompactRows r = rows;
    r.q = static_cast<const char*>(q.p) + size_t(b.row0) * q_row * 2;
    r.o = static_cast<char*>(o_ref.p) + size_t(b.row0) * q_row * 2;
    r.n_rows = b.n_rows;
    r.keys = b.keys;
    r.n_keys = b.n_keys;
    att.attend_rows(r, nullptr);
  }
  device_sync();
  o_new.poison();
  rows.o = o_new.p;
  att.attend_blocks(rows, blocks.data(), n_blk, max_keys, nullptr);
  const auto want = o_ref.download<uint16_t>(size_t(T) * q_row), got = o_new.download<uint16_t>(size_t(T) * q_row);
  int64_t differ = 0;
  for (size_t i = 0; i < want.size(); ++i) differ += want[i] != got[i];
  EXPECT_EQ(differ, 0) << "of " << want.size() << " outputs, H " << ge.H << " / " << ge.Hkv << ", D " << ge.D
                       << ", capacity " << capacity << ", max_keys " << max_keys;
  // the reference is real attention output, not the poison or zeros
  EXPECT_GT(max_abs(to_double(want)), 0.0);
  EXPECT_TRUE(std::all_of(want.begin(), want.end(), [](uint16_t h) { return std::isfinite(bf16_to_f32(h)); }));
}

TEST(IhipGpuMethod, CompactBlocksOnLanesEqualBlockByBlock) {
  LC_REQUIRE_GPU();
  for (const Geometry& ge : {kGemma3, kGqa128, kSmolLM2}) {
    check_compact_blocks(ge, 0);   // capacity n_kv: about 3 lanes of up to 1264 keys
    check_compact_blocks(ge, -1);  // kLanes lanes
  }
}


// rope=on decode's compacted attention over the fp8 cache (IhipCompactDecode::kv_fp8): a random
// sorted key set ending with the query's own row, gathered from e4m3 K / V (compact_kv dequantises,
// then rotates K at 0..L-1), the query rotated at L - 1, split-KV decode over L keys read from the
// device (entries past L in the bound gathered and ignored). Two checks:
//   - power-of-two scales: every e4m3 * scale is a bf16 value, so the same attention over a bf16
//     pool holding those values writes the same bits (the fp8 path changes the gather only);
//   - the cache's own scales (amax / 448): within bf16 attention error of an fp64 oracle over the
//     dequantised values (q and K rotated in fp64, softmax, V).
struct Fp8Pool {
  std::vector<uint8_t> bytes;
  float scale = 1.f;
  std::vector<double> vals;  // e4m3 * scale
};
Fp8Pool e4m3_pool(size_t n, bool pow2_scale) {
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> x(n);
  float amax = 0.f;
  for (float& v : x) amax = std::max(amax, std::fabs(v = dist(rng())));
  Fp8Pool r;
  r.scale = fp8_scale_for_amax(amax);
  if (pow2_scale) r.scale = std::exp2(std::ceil(std::log2(r.scale)));  // still covers amax
  r.bytes.resize(n);
  r.vals.resize(n);
  for (size_t i = 0; i < n; ++i) {
    r.bytes[i] = f32_to_e4m3(x[i] / r.scale);
    r.vals[i] = double(e4m3_to_f32(r.bytes[i]) * r.scale);  // the kernel's fp32 product
  }
  return r;
}

void check_compact_decode_fp8(const Geometry& ge, bool pow2_scale) {
  const MethodContext m = model(ge);
  const int64_t n_kv = 3000, extra = 37;
  const int group = ge.H / ge.Hkv, half = ge.D / 2;
  const size_t kv_n = size_t(n_kv) * size_t(ge.Hkv) * size_t(ge.D), q_n = size_t(ge.H) * size_t(ge.D);
  const Fp8Pool k8 = e4m3_pool(kv_n, pow2_scale), v8 = e4m3_pool(kv_n, pow2_scale);
  std::vector<double> qv;
  DevBuf q(q_n * 2), o8(q_n * 2), o16(q_n * 2), dk8(kv_n), dv8(kv_n), inv_freq(size_t(half) * 4);
  q.upload(random_bf16(q_n, 1.0, qv));
  dk8.upload(k8.bytes);
  dv8.upload(v8.bytes);
  std::vector<float> f(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) f[size_t(i)] = float(std::pow(10000.0, -2.0 * i / ge.D));
  inv_freq.upload(f);
  std::vector<int32_t> keys;
  for (int64_t j = 0; j + 1 < n_kv; ++j)
    if (std::uniform_real_distribution<double>(0, 1)(rng()) < 0.3) keys.push_back(int32_t(j));
  keys.push_back(int32_t(n_kv - 1));
  const int64_t L = int64_t(keys.size());
  std::vector<int32_t> bounded = keys;
  for (int64_t i = 0; i < extra; ++i) bounded.push_back(int32_t(i));  // past L: gathered, not attended
  const std::vector<int32_t> dev_ints = {int32_t(L), int32_t(L - 1)};  // n_keys, the query's position
  DevBuf dkeys(bounded.size() * 4), ints(8);
  dkeys.upload(bounded);
  ints.upload(dev_ints);
  IhipCompactAttention att;
  att.allocate(m, 64, n_kv, nullptr);
  IhipCompactDecode d{.q = q.p, .o = o8.p, .keys = dkeys.as<int32_t>(), .bound = int64_t(bounded.size()),
                      .n_keys_dev = ints.as<int32_t>(), .q_pos_dev = ints.as<int32_t>() + 1, .k = dk8.p, .v = dv8.p,
                      .inv_freq = inv_freq.as<float>(), .rope_factor = 1.f, .scale = 0.f, .kv_fp8 = true,
                      .k_scale = k8.scale, .v_scale = v8.scale};
  o8.poison();
  att.attend_decode(d, nullptr);
  const auto got = o8.download<uint16_t>(q_n);
  const std::string what = std::string(pow2_scale ? "power-of-two" : "amax / 448") + " scales, H " +
                           std::to_string(ge.H) + " / " + std::to_string(ge.Hkv) + ", D " + std::to_string(ge.D);
  if (pow2_scale) {  // the same values as bf16 rows: the same bits
    std::vector<uint16_t> k16(kv_n), v16(kv_n);
    for (size_t i = 0; i < kv_n; ++i) {
      k16[i] = f32_to_bf16(float(k8.vals[i]));
      v16[i] = f32_to_bf16(float(v8.vals[i]));
      ASSERT_EQ(double(bf16_to_f32(k16[i])), k8.vals[i]);  // exact: the premise of the check
      ASSERT_EQ(double(bf16_to_f32(v16[i])), v8.vals[i]);
    }
    DevBuf dk16(kv_n * 2), dv16(kv_n * 2);
    dk16.upload(k16);
    dv16.upload(v16);
    IhipCompactDecode b = d;
    b.o = o16.p, b.k = dk16.p, b.v = dv16.p, b.kv_fp8 = false, b.k_scale = 1.f, b.v_scale = 1.f;
    o16.poison();
    att.attend_decode(b, nullptr);
    const auto want = o16.download<uint16_t>(q_n);
    int64_t differ = 0;
    for (size_t i = 0; i < q_n; ++i) differ += want[i] != got[i];
    EXPECT_EQ(differ, 0) << "of " << q_n << " outputs, " << what;
  }
  // fp64 oracle: key keys[j] rotated at j, the query at L - 1, softmax over the L keys.
  auto rot = [&](const double* x, int64_t pos, double* out) {
    for (int i = 0; i < half; ++i) {
      const double a = double(pos) * double(f[size_t(i)]), c = std::cos(a), sn = std::sin(a);
      out[i] = x[i] * c - x[i + half] * sn;
      out[i + half] = x[i + half] * c + x[i] * sn;
    }
  };
  std::vector<double> ref(q_n), qr(size_t(ge.D)), kr(size_t(ge.D)), sc(static_cast<size_t>(L));
  const double scale = 1.0 / std::sqrt(double(ge.D));
  for (int h = 0; h < ge.H; ++h) {
    const int g = h / group;
    rot(qv.data() + size_t(h) * size_t(ge.D), L - 1, qr.data());
    double mx = -1e300;
    for (int64_t j = 0; j < L; ++j) {
      rot(k8.vals.data() + (size_t(keys[size_t(j)]) * size_t(ge.Hkv) + size_t(g)) * size_t(ge.D), j, kr.data());
      double s = 0;
      for (int e = 0; e < ge.D; ++e) s += qr[size_t(e)] * kr[size_t(e)];
      sc[size_t(j)] = s * scale;
      mx = std::max(mx, sc[size_t(j)]);
    }
    double den = 0;
    for (double& s : sc) den += (s = std::exp(s - mx));
    for (int64_t j = 0; j < L; ++j) {
      const double* vr = v8.vals.data() + (size_t(keys[size_t(j)]) * size_t(ge.Hkv) + size_t(g)) * size_t(ge.D);
      for (int e = 0; e < ge.D; ++e) ref[size_t(h) * size_t(ge.D) + size_t(e)] += sc[size_t(j)] / den * vr[e];
    }
  }
  // bf16 rotated operands (2^-9 relative each), bf16 probabilities in P.V and a bf16 output.
  constexpr double kAtol = 2e-3, kRtol = 2e-2, kRelL2 = 1e-2;
  const ErrStats e = compare(to_double(got), ref, kAtol * std::max(1.0, max_abs(ref)), kRtol);
  EXPECT_EQ(e.n_bad, 0) << what << ": " << e.str();
  EXPECT_LT(e.rel_l2, kRelL2) << what << ": " << e.str();
  EXPECT_GT(max_abs(ref), 0.0);
}

TEST(IhipGpuMethod, CompactDecodeReadsTheFp8Cache) {
  LC_REQUIRE_GPU();
  for (const Geometry& ge : {kGemma3, kGqa128, kSmolLM2})
    for (const bool pow2 : {true, false}) {
      SCOPED_TRACE(pow2);
      check_compact_decode_fp8(ge, pow2);
    }
}

// rank=local: the GPU method's prefill (offsets kernel, then rope=off's tensor-core scorer with the
// offsets in its accumulators: exact on these small-integer inputs) and decode (offsets kernel
// before each stage's scorer) key sets equal the CPU method's, on the default model's heads (SmolLM2-135M:
// 9 / 3, head_dim 64) and on GQA groups of 4 at head_dim 128.
TEST(IhipGpuMethod, RankLocalHasTheCpuKeySets) {
  LC_REQUIRE_GPU();
  EXPECT_EQ(gpu_method_problem(*make_attention_method("infinitehip=rank=local", model(kSmolLM2)), model(kSmolLM2)), "");
  for (const Geometry ge : {kSmolLM2, kGqa128}) {
    SCOPED_TRACE(ge.D);
    check_prefill_index(ge, ",rank=local");
    check_decode_index(ge, ",rank=local");
  }
}

}  // namespace
}  // namespace longctx::cuda

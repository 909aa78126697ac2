// test_offload_gpu.cpp (CUDA builds only; binary test_kv_offload): the KV offload tier on the GPU.
// - the read-through and the LRU update against the CPU twin (kv/offload_ref.h): reads gathered
//   through the caches (kv_offload_gather) equal the host rows, and after every step the page
//   table, slot_line and last_use equal the twin's, for the K/V cache and the keys cache, with
//   admission after 1 and after 2 steps; the same with hash-map page tables (the table decoded
//   to line -> entry, and its bucket count, equal the twin's), parallel reads with room in the
//   table, and one read per launch with tiny tables that fill up, and with forced collisions;
// - HiP decode with offload on == off: over 12 decode steps (refresh every 4, new token appended
//   each step; the last 6 replayed from one captured CUDA graph) the estimator's selected blocks
//   and ranges and sparse decode's outputs and LSEs are bit-identical to the same kernels over a
//   device-resident cache, with small caches so that both hit and miss paths run (keys cache
//   admission after 1 and 2 steps), with a bf16 and with an fp8 e4m3 cache, with vector-map and
//   hash-map page tables;
// - an offload tier that does not fit fails up front with a message naming host and GPU.
// GPU cases GTEST_SKIP without a Hopper GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/hip_estimate.h"
#include "kernels/cuda/kv_offload.h"
#include "kernels/cuda/runtime.h"
#include "kernels/ref/fp8_e4m3.h"
#include "kernels/cuda/sparse_decode.h"
#include "kv/cuda/kv_scatter.h"
#include "kv/cuda/offload_tier.h"
#include "kv/offload_ref.h"
#include "kv_test_util.h"
#include "util/error.h"
#include "util/half.h"

namespace longctx::kv {
namespace {

using test::uniform;

#define KV_REQUIRE_GPU()                                                                       \
  do {                                                                                         \
    int n_ = 0;                                                                                \
    if (cudaGetDeviceCount(&n_) != cudaSuccess || n_ == 0) GTEST_SKIP() << "no CUDA device";  \
    cudaDeviceProp p_{};                                                                       \
    cudaGetDeviceProperties(&p_, 0);                                                           \
    if (p_.major != 9) GTEST_SKIP() << "not a Hopper GPU: " << p_.name;                        \
  } while (0)

struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t n) : p(cuda::dev_malloc(n)), bytes(n) {}
  ~Buf() { cuda::dev_free(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p); }
  template <class T>
  void up(const std::vector<T>& v) { cuda::copy_h2d(p, v.data(), v.size() * sizeof(T)); }
  template <class T>
  std::vector<T> down(size_t n) const {
    std::vector<T> v(n);
    cuda::copy_d2h(v.data(), p, n * sizeof(T));
    return v;
  }
};

std::vector<uint16_t> random_bf16(size_t n) {
  const std::vector<float> f = test::random_floats(n);
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16(f[i]);
  return h;
}

template <class T>
std::vector<T> download(const T* d, size_t n) {
  std::vector<T> v(n);
  cuda::copy_d2h(v.data(), d, n * sizeof(T));
  return v;
}

// The page table as a line -> entry map [n_kv_head, n_lines]: the vector map as is, the hash
// map decoded from its buckets (each line in at most one live bucket).
std::vector<int32_t> logical_table(const KvOffloadCache& c) {
  if (c.n_buckets == 0) return download(c.table, size_t(c.n_kv_head) * size_t(c.n_lines));
  const auto words = download(reinterpret_cast<const unsigned long long*>(c.table), size_t(c.n_kv_head) * c.n_buckets);
  std::vector<int32_t> t(size_t(c.n_kv_head) * size_t(c.n_lines), kLineAbsent);
  for (int h = 0; h < c.n_kv_head; ++h)
    for (int32_t i = 0; i < c.n_buckets; ++i) {
      const unsigned long long w = words[size_t(h) * c.n_buckets + size_t(i)];
      const uint32_t key = uint32_t(w >> 32);
      if (key == kEmptyKey || key == kTombKey) continue;
      EXPECT_LT(key, uint32_t(c.n_lines)) << "head " << h << " bucket " << i;
      int32_t& e = t[size_t(h) * c.n_lines + key];
      EXPECT_EQ(e, kLineAbsent) << "line " << key << " of head " << h << " in two buckets";
      e = int32_t(uint32_t(w));
    }
  return t;
}

struct TwinCase {
  bool kv = true;            // the K/V cache (else the keys cache)
  int admit = 1;
  int32_t slots = 64;
  int32_t buckets = 0;       // 0: the vector map
  int reads = 40;            // per step
  int spread = 60;           // tokens around a drifting center
  bool one_launch_per_read = false;  // reads in a fixed order: GPU == twin even at a full hash map
  bool collide = false;      // every read from lines whose probe starts at the same bucket
  // Hits expected. Not with admission after 2 steps in a tiny hash map: every step leaves it over
  // half full, so the rebuild drops every mark and no line is ever admitted (by design).
  bool expect_hits = true;
};

void check_twin(const TwinCase& tc) {
  SCOPED_TRACE(testing::Message() << "kv=" << tc.kv << " admit=" << tc.admit << " slots=" << tc.slots
                                  << " buckets=" << tc.buckets << " sequential=" << tc.one_launch_per_read
                                  << " collide=" << tc.collide);
  const int Hkv = 2, d = 128, line = 2;
  const bool kv = tc.kv;
  OffloadSpec spec;
  spec.n_layer = 1;
  spec.n_kv_head = Hkv;
  spec.head_dim = d;
  spec.capacity = 4096;
  spec.line_tokens = line;
  (kv ? spec.kv_slots : spec.keys_slots) = tc.slots;
  (kv ? spec.kv_admit_steps : spec.keys_admit_steps) = tc.admit;
  (kv ? spec.kv_buckets : spec.keys_buckets) = tc.buckets;
  OffloadTier tier(spec);
  const size_t row = size_t(Hkv) * d;
  const auto hk = random_bf16(size_t(spec.capacity) * row), hv = random_bf16(size_t(spec.capacity) * row);
  std::memcpy(tier.host_k(0), hk.data(), hk.size() * 2);
  std::memcpy(tier.host_v(0), hv.data(), hv.size() * 2);
  const KvOffloadCache c = kv ? tier.kv_cache(0) : tier.keys_cache(0);
  ASSERT_TRUE(c.enabled());
  ASSERT_EQ(c.admit_steps, tc.admit);
  ASSERT_EQ(c.n_buckets, tc.buckets);
  KvOffloadLayer layer;
  (kv ? layer.kv : layer.keys) = c;
  OffloadCacheRef twin(Hkv, c.n_lines, tc.slots, line, tc.admit, tc.buckets);
  std::vector<int32_t> colliding;  // lines whose probe starts at bucket 3
  for (int32_t l = 0; tc.collide && l < c.n_lines; ++l)
    if (offload_hash_bucket(l, tc.buckets) == 3) colliding.push_back(l);
  const int n = tc.reads;
  Buf heads(size_t(n) * 4), tokens(size_t(n) * 4), kout(size_t(n) * d * 2), vout(size_t(n) * d * 2);
  int64_t center = spec.capacity / 2;  // drifts: lines come back in later steps (hits, admissions)
  int rebuilds = 0;
  // 40 steps, and with a hash map on until its first rebuild (tombstones and marks pile up at a
  // rate the random reads set: a draw can need more than 40 steps to pass half the buckets).
  constexpr int kSteps = 40, kMaxSteps = 400;
  for (int step = 0; step < kSteps || (tc.buckets > 0 && rebuilds == 0 && step < kMaxSteps); ++step) {
    cuda::kv_offload_begin_step(tier.tick());
    twin.begin_step();
    std::vector<int32_t> hh(static_cast<size_t>(n)), tt(static_cast<size_t>(n));
    center = std::clamp<int64_t>(center + uniform(-40, 40), 0, spec.capacity - 1);
    for (int i = 0; i < n; ++i) {
      hh[size_t(i)] = int32_t(uniform(0, Hkv - 1));
      tt[size_t(i)] = tc.collide ? colliding[size_t(uniform(0, std::min<int64_t>(24, int64_t(colliding.size())) - 1))] * line +
                                       int32_t(uniform(0, line - 1))
                                 : int32_t(std::clamp<int64_t>(center + uniform(-tc.spread, tc.spread), 0, spec.capacity - 1));
      twin.read(hh[size_t(i)], tt[size_t(i)]);
    }
    heads.up(hh);
    tokens.up(tt);
    cuda::KvOffloadGatherParams g;
    g.cache = c;
    g.host = tier.host_view(0);
    g.k_out = kout.p;
    g.v_out = kv ? vout.p : nullptr;
    const int per_launch = tc.one_launch_per_read ? 1 : n;
    for (int i0 = 0; i0 < n; i0 += per_launch) {
      g.heads = heads.as<int32_t>() + i0;
      g.tokens = tokens.as<int32_t>() + i0;
      g.n = per_launch;
      g.k_out = static_cast<char*>(kout.p) + size_t(i0) * d * 2;
      g.v_out = kv ? static_cast<char*>(vout.p) + size_t(i0) * d * 2 : nullptr;
      cuda::kv_offload_gather(g);
    }
    std::vector<int32_t> used_before(static_cast<size_t>(Hkv));
    for (int h = 0; h < Hkv; ++h) used_before[size_t(h)] = twin.hash_used(h);
    cuda::kv_offload_update(layer, tier.host_view(0));
    twin.end_step();
    for (int h = 0; h < Hkv; ++h) rebuilds += twin.hash_used(h) < used_before[size_t(h)];
    cuda::device_sync();
    const auto gk = kout.down<uint16_t>(size_t(n) * d), gv = vout.down<uint16_t>(size_t(n) * d);
    for (int i = 0; i < n; ++i) {
      const size_t src = size_t(tt[size_t(i)]) * row + size_t(hh[size_t(i)]) * d;
      ASSERT_TRUE(std::equal(gk.begin() + i * d, gk.begin() + (i + 1) * d, hk.begin() + long(src)))
          << "K step " << step << " read " << i;
      if (kv) {
        ASSERT_TRUE(std::equal(gv.begin() + i * d, gv.begin() + (i + 1) * d, hv.begin() + long(src)))
            << "V step " << step << " read " << i;
      }
    }
    ASSERT_EQ(logical_table(c), twin.table()) << "step " << step;
    ASSERT_EQ(download(c.slot_line, twin.slot_line().size()), twin.slot_line()) << "step " << step;
    ASSERT_EQ(download(c.last_use, twin.last_use().size()), twin.last_use()) << "step " << step;
    if (tc.buckets > 0) {
      const auto used = download(c.hash_used, size_t(Hkv));
      for (int h = 0; h < Hkv; ++h) ASSERT_EQ(used[size_t(h)], twin.hash_used(h)) << "step " << step << " head " << h;
    }
  }
  const OffloadCounters got = kv ? tier.kv_counters() : tier.keys_counters();
  EXPECT_EQ(got.reads, twin.stats().reads);
  EXPECT_EQ(got.misses, twin.stats().misses);
  EXPECT_EQ(got.inserted, twin.stats().inserted);
  if (tc.expect_hits) {
    EXPECT_GT(got.reads - got.misses, 0u);
  }
  EXPECT_GT(got.misses, 0u);
  if (tc.buckets > 0) {
    EXPECT_GT(rebuilds, 0) << "the hash map was never rebuilt in " << kMaxSteps << " steps";
  }
  std::printf("[ twin ] kv=%d admit=%d slots=%d buckets=%d: %llu reads, %llu misses, %llu inserted, %d rebuilds\n",
              int(kv), tc.admit, tc.slots, tc.buckets, (unsigned long long)got.reads,
              (unsigned long long)got.misses, (unsigned long long)got.inserted, rebuilds);
}

TEST(OffloadGpu, KvCacheReadThroughAndUpdateEqualTheCpuTwin) {
  KV_REQUIRE_GPU();
  check_twin({.kv = true, .admit = 1});
  check_twin({.kv = true, .admit = 2});
}

TEST(OffloadGpu, KeysCacheReadThroughAndUpdateEqualTheCpuTwin) {
  KV_REQUIRE_GPU();
  check_twin({.kv = false, .admit = 1, .slots = 48});
  check_twin({.kv = false, .admit = 2, .slots = 48});
}

// The hash-map page table, parallel reads: fewer insertions per step than the table's room, so the
// GPU (any arrival order) equals the twin exactly; tombstones and admission marks pile up and the
// update's rebuild runs.
TEST(OffloadGpu, HashMapReadThroughAndUpdateEqualTheCpuTwin) {
  KV_REQUIRE_GPU();
  for (const bool kv : {true, false})
    for (const int admit : {1, 2}) check_twin({.kv = kv, .admit = admit, .buckets = offload_hash_buckets(64)});
}

// Tiny hash maps (4 slots, 16 buckets: insertions stop at 12, rebuilt past 8) with one read per
// launch (a fixed order): the table fills within a step, insertions are refused, overflowed lines
// leave tombstones; and with every line starting its probe at the same bucket (forced collisions:
// one long probe chain). GPU == twin exactly throughout.
TEST(OffloadGpu, HashMapFullAndCollidingEqualTheCpuTwin) {
  KV_REQUIRE_GPU();
  for (const int admit : {1, 2}) {
    check_twin({.kv = true, .admit = admit, .slots = 4, .buckets = 16, .reads = 24, .spread = 12,
                .one_launch_per_read = true, .expect_hits = admit == 1});
    check_twin({.kv = true, .admit = admit, .slots = 4, .buckets = 16, .reads = 24, .one_launch_per_read = true,
                .collide = true, .expect_hits = admit == 1});
  }
}

TEST(OffloadGpu, TierThatDoesNotFitNamesHostAndGpu) {
  KV_REQUIRE_GPU();
  OffloadSpec s;
  s.n_layer = 4096;
  s.n_kv_head = 8;
  s.head_dim = 128;
  s.capacity = int64_t(1) << 30;  // 2 PiB of host K/V
  s.kv_slots = 16;
  try {
    OffloadTier t(s);
    FAIL() << "a 2 PiB tier was allocated";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("host memory needs"), std::string::npos) << m;
    EXPECT_NE(m.find("(short)"), std::string::npos) << m;
  }
}

// One layer of HiP decode, baseline (device cache) and offloaded (host tier + caches) side by side.
// fp8: both caches hold e4m3 codes (scales 0.02 / 0.03), the new token is quantized by kv_scatter
// and reaches the resident lines from the host row (kv_offload_append without new rows).
void check_hip_equal(int keys_admit, bool fp8 = false, bool hash = false) {
  SCOPED_TRACE(testing::Message() << "keys_admit=" << keys_admit << " fp8=" << fp8 << " hash=" << hash);
  cuda::HipEstimateConfig cfg;
  cfg.k = 128;
  cfg.window = 64;
  cfg.sinks = 4;
  const int H = 8, Hkv = 2, d = 128, refresh = 4, R = int(cfg.ranges_per_row()), M = int(cfg.budget_blocks());
  const int64_t len0 = 6000, cap = 6200;
  const size_t row = size_t(Hkv) * d;
  OffloadSpec spec;
  spec.n_layer = 1;
  spec.n_kv_head = Hkv;
  spec.head_dim = d;
  spec.capacity = cap;
  spec.line_tokens = cfg.b_k;
  spec.keys_slots = 256;  // small: the estimator's ~1300 reads per head miss and evict
  spec.kv_slots = 512;
  spec.keys_admit_steps = keys_admit;
  if (hash) spec.keys_buckets = offload_hash_buckets(spec.keys_slots), spec.kv_buckets = offload_hash_buckets(spec.kv_slots);
  spec.elem = fp8 ? KvElem::fp8_e4m3 : KvElem::bf16;
  const size_t eb = fp8 ? 1 : 2;
  constexpr float kKScale = 0.02f, kVScale = 0.03f;
  OffloadTier tier(spec);
  const auto hk = random_bf16(size_t(cap) * row), hv = random_bf16(size_t(cap) * row);
  std::vector<uint8_t> ck, cv;  // fp8: the codes of hk / scale, hv / scale
  for (size_t i = 0; fp8 && i < hk.size(); ++i) {
    ck.push_back(f32_to_e4m3(bf16_to_f32(hk[i]) / kKScale));
    cv.push_back(f32_to_e4m3(bf16_to_f32(hv[i]) / kVScale));
  }
  const void* src_k = fp8 ? static_cast<const void*>(ck.data()) : hk.data();
  const void* src_v = fp8 ? static_cast<const void*>(cv.data()) : hv.data();
  std::memcpy(tier.host_k(0), src_k, hk.size() * eb);
  std::memcpy(tier.host_v(0), src_v, hv.size() * eb);
  Buf dk(hk.size() * eb), dv(hv.size() * eb), table(4), dlen(4);
  cuda::copy_h2d(dk.p, src_k, hk.size() * eb);
  cuda::copy_h2d(dv.p, src_v, hv.size() * eb);
  table.up(std::vector<int32_t>{0});
  KvView dev;
  dev.k_pool = dk.p;
  dev.v_pool = dv.p;
  dev.elem = spec.elem;
  if (fp8) dev.k_scale = kKScale, dev.v_scale = kVScale;
  dev.block_table = table.as<int32_t>();
  dev.seq_lens = dlen.as<int32_t>();
  dev.n_seq = 1;
  dev.max_pages_per_seq = 1;
  dev.page_size = int(cap);
  dev.n_pages = 1;
  dev.n_kv_head = Hkv;
  dev.head_dim = d;
  dev.on_device = true;
  KvView host = tier.host_view(0);
  host.k_scale = dev.k_scale;
  host.v_scale = dev.v_scale;

  Buf q(size_t(H) * d * 2), knew(row * 2), vnew(row * 2);
  struct Side {  // one decode path's index and output buffers
    Buf rpos, blocks, rptr, ranges, cptr, o, lse, ws;
    cuda::HipDecodeParams hp;
    cuda::SparseDecodeParams sp;
    Side(int H, int M, int R, size_t ws_bytes)
        : rpos(size_t(H) * 4), blocks(size_t(H) * M * 4), rptr(size_t(H + 1) * 4), ranges(size_t(H) * R * 8),
          cptr(size_t(H + 1) * 4), o(size_t(H) * 128 * 2), lse(size_t(H) * 4), ws(ws_bytes) {}
  };
  auto setup = [&](Side& s, const KvView& kv, const KvOffloadCache& keys, const KvOffloadCache& kvc) {
    cuda::memset_async(s.rpos.p, 0xff, s.rpos.bytes);
    s.hp.cfg = cfg;
    s.hp.refresh = refresh;
    s.hp.q = q.p;
    s.hp.kv = kv;
    s.hp.n_head = H;
    s.hp.refresh_pos = s.rpos.as<int32_t>();
    s.hp.blocks = s.blocks.as<int32_t>();
    s.hp.range_ptr = s.rptr.as<int32_t>();
    s.hp.ranges = s.ranges.as<int32_t>();
    s.hp.col_ptr = s.cptr.as<int32_t>();
    s.hp.offload = keys;
    s.sp.q = q.p;
    s.sp.o = s.o.p;
    s.sp.lse = s.lse.as<float>();
    s.sp.n_head = H;
    s.sp.kv = kv;
    s.sp.index.n_seq = 1;
    s.sp.index.n_index_head = H;
    s.sp.index.range_ptr = s.rptr.as<int32_t>();
    s.sp.index.ranges = s.ranges.as<int32_t>();
    s.sp.index.col_ptr = s.cptr.as<int32_t>();
    s.sp.index.range_capacity = int64_t(H) * R;
    s.sp.index.col_capacity = 0;
    s.sp.index.on_device = true;
    s.sp.max_keys_per_row = cfg.sinks + cfg.k + cfg.window + refresh;
    s.sp.workspace = s.ws.p;
    s.sp.workspace_bytes = s.ws.bytes;
    s.sp.offload = kvc;
    cuda::sparse_decode_workspace_init(s.ws.p, s.ws.bytes);
  };
  cuda::SparseDecodeParams probe;
  probe.n_head = H;
  probe.kv = dev;
  probe.index.n_seq = 1;
  probe.index.n_index_head = H;
  probe.index.range_capacity = int64_t(H) * R;
  probe.max_keys_per_row = cfg.sinks + cfg.k + cfg.window + refresh;
  const size_t ws_bytes = cuda::sparse_decode_workspace_bytes(cuda::sparse_decode_bounds(probe));
  Side base(H, M, R, ws_bytes), off(H, M, R, ws_bytes);
  setup(base, dev, KvOffloadCache{}, KvOffloadCache{});
  setup(off, host, tier.keys_cache(0), tier.kv_cache(0));

  auto append = [&](const KvView& v, cuda::Stream s) {
    KvScatterParams sc;
    sc.view = v;
    sc.k_pool = const_cast<void*>(v.k_pool);
    sc.v_pool = const_cast<void*>(v.v_pool);
    sc.k_new = knew.p;
    sc.v_new = vnew.p;
    sc.n_seq = 1;
    kv_scatter(sc, s);
  };
  auto offload_step = [&](cuda::Stream s) {
    cuda::kv_offload_begin_step(tier.tick(), s);
    append(host, s);
    if (fp8) cuda::kv_offload_append(tier.caches(0), host, nullptr, nullptr, s);  // the quantized row from the host
    else cuda::kv_offload_append(tier.caches(0), host, knew.p, vnew.p, s);
    cuda::hip_estimate_decode(off.hp, s);
    cuda::sparse_decode(off.sp, s);
    cuda::kv_offload_update(tier.caches(0), host, s);
  };
  cuda::Stream st = cuda::stream_create();
  cuda::CudaGraph graph;
  for (int step = 0; step < 12; ++step) {
    const int32_t len = int32_t(len0 + step);
    dlen.up(std::vector<int32_t>{len});
    cuda::copy_h2d(tier.seq_len(), &len, 4);
    q.up(random_bf16(size_t(H) * d));
    knew.up(random_bf16(row));
    vnew.up(random_bf16(row));
    append(dev, st);
    cuda::hip_estimate_decode(base.hp, st);
    cuda::sparse_decode(base.sp, st);
    if (step < 6) {
      offload_step(st);
    } else {
      if (!graph.ready()) {
        graph.begin_capture(st);
        offload_step(st);
        graph.end_capture(st);
      }
      graph.launch(st);
    }
    cuda::stream_sync(st);
    EXPECT_EQ(off.blocks.down<int32_t>(size_t(H) * M), base.blocks.down<int32_t>(size_t(H) * M)) << "step " << step;
    EXPECT_EQ(off.ranges.down<int32_t>(size_t(H) * R * 2), base.ranges.down<int32_t>(size_t(H) * R * 2))
        << "step " << step;
    EXPECT_EQ(off.rpos.down<int32_t>(size_t(H)), base.rpos.down<int32_t>(size_t(H))) << "step " << step;
    EXPECT_EQ(off.o.down<uint16_t>(size_t(H) * d), base.o.down<uint16_t>(size_t(H) * d)) << "step " << step;
    EXPECT_EQ(off.lse.down<uint32_t>(size_t(H)), base.lse.down<uint32_t>(size_t(H))) << "step " << step;
  }
  cuda::stream_destroy(st);
  const OffloadCounters keys = tier.keys_counters(), kvc = tier.kv_counters();
  std::printf("keys cache: %llu reads, %llu misses, %llu inserted; K/V cache: %llu reads, %llu misses, %llu inserted\n",
              (unsigned long long)keys.reads, (unsigned long long)keys.misses, (unsigned long long)keys.inserted,
              (unsigned long long)kvc.reads, (unsigned long long)kvc.misses, (unsigned long long)kvc.inserted);
  EXPECT_GT(keys.misses, 0u);
  if (keys_admit == 1) {  // admit 2 may insert nothing in 3 refreshes
    EXPECT_GT(keys.reads - keys.misses, 0u);
  }
  EXPECT_GT(kvc.misses, 0u);
  EXPECT_GT(kvc.reads - kvc.misses, 0u);
  // The estimator ran on the 3 refresh steps only (0, 4, 8): every key it read was counted.
  EXPECT_GT(keys.reads, 3u * H * 100);
}

TEST(OffloadGpu, HipDecodeWithOffloadIsBitIdenticalToWithout) {
  KV_REQUIRE_GPU();
  check_hip_equal(1);
  check_hip_equal(2);
}

TEST(OffloadGpu, HipDecodeOverFp8WithOffloadIsBitIdenticalToWithout) {
  KV_REQUIRE_GPU();
  check_hip_equal(1, true);
  check_hip_equal(2, true);
}

// Both caches with hash-map page tables (4 buckets a slot): the estimator's and sparse decode's
// in-kernel lookups, the append's and the update's, inside the captured graph too.
TEST(OffloadGpu, HipDecodeThroughHashMapPageTablesIsBitIdenticalToWithout) {
  KV_REQUIRE_GPU();
  check_hip_equal(1, false, true);
  check_hip_equal(2, false, true);
  check_hip_equal(2, true, true);
}

}  // namespace
}  // namespace longctx::kv

// test_kv_gpu.cpp (CUDA builds only): the device pool against the host pool.
// - the host e4m3 encoder against cuda_fp8.h's own conversion (host code: runs without a GPU);
// - DeviceKvCache::scatter (prefill chunks and batched decode, page sizes 1/3/16/64/128, bf16
//   and fp8) leaves the same bytes at the same pool rows as HostKvCache::write_rows of the same
//   bf16 values, and kv_gather_bf16 reads back what kv_gather_f32 reads on the host;
// - a CUDA graph captured over one decode step's scatters writes the right rows on every replay
//   while append + sync_tables change the tables and lengths between replays.
// GPU cases GTEST_SKIP without a Hopper GPU (the kernels are built for sm_90a only).
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "kv/cuda/device_kv_cache.h"
#include "kernels/ref/fp8_e4m3.h"
#include "kv/host_kv_cache.h"
#include "kv/kv_gather.h"
#include "kv_test_util.h"
#include "util/error.h"
#include "util/half.h"

namespace longctx::kv {
namespace {

using test::uniform;

#define KV_REQUIRE_GPU()                                                              \
  do {                                                                                \
    int n_ = 0;                                                                       \
    if (cudaGetDeviceCount(&n_) != cudaSuccess || n_ == 0) GTEST_SKIP() << "no CUDA device"; \
    cudaDeviceProp p_{};                                                              \
    cudaGetDeviceProperties(&p_, 0);                                                  \
    if (p_.major != 9) GTEST_SKIP() << "not a Hopper GPU: " << p_.name;               \
  } while (0)

void ok(cudaError_t e, const char* what) { ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e); }

struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t n) { EXPECT_EQ(cudaMalloc(&p, n), cudaSuccess); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

// n random bf16 values (as bits) and the same values as fp32.
std::vector<uint16_t> random_bf16(size_t n, float sigma, std::vector<float>& as_f32) {
  const std::vector<float> x = test::random_floats(n, sigma);
  std::vector<uint16_t> h(n);
  as_f32.resize(n);
  for (size_t i = 0; i < n; ++i) {
    h[i] = f32_to_bf16(x[i]);
    as_f32[i] = bf16_to_f32(h[i]);
  }
  return h;
}

TEST(Fp8E4m3, HostEncoderMatchesCudaFp8) {
  auto cuda_enc = [](float x) { return uint8_t(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)); };
  for (int c = 0; c < 0x7e; ++c) {  // every tie and its neighbours
    const float mid = 0.5f * (e4m3_to_f32(uint8_t(c)) + e4m3_to_f32(uint8_t(c + 1)));
    for (float x : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f)})
      for (float sx : {x, -x}) ASSERT_EQ(f32_to_e4m3(sx), cuda_enc(sx)) << sx;
  }
  std::uniform_real_distribution<float> ex(-14.f, 10.f);
  for (int i = 0; i < 200000; ++i) {
    const float m = std::exp2(ex(test::rng()));
    const float x = (test::rng()() & 1) ? -m : m;
    ASSERT_EQ(f32_to_e4m3(x), cuda_enc(x)) << x;
  }
  for (float x : {0.f, 448.f, 464.f, 1e30f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity()})
    EXPECT_EQ(f32_to_e4m3(x), cuda_enc(x)) << x;
  for (int c = 0; c < 256; ++c) {  // decoding: e4m3 -> half is exact
    if ((c & 0x7f) == 0x7f) continue;
    const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), __NV_E4M3);
    EXPECT_EQ(e4m3_to_f32(uint8_t(c)), __half2float(__half(h))) << c;
  }
}

TEST(DeviceKvCache, RejectsSpecsTheGpuPoolCannotHold) {
  KvSpec s;
  s.n_layer = 1;
  s.n_kv_head = 1;
  s.head_dim = 12;  // a 12-element row: not a multiple of 8
  s.page_size = 16;
  s.elem = KvElem::bf16;
  s.n_pages = 4;
  s.max_seq_tokens = 64;
  try {
    DeviceKvCache c(s);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "KV cache on the GPU: a token row of 12 elements (1 heads x 12) must be a multiple of 8");
  }
  s.head_dim = 16;
  s.elem = KvElem::f32;
  try {
    DeviceKvCache c(s);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "KV cache on the GPU: element type f32 (the GPU pool holds bf16 or fp8_e4m3)");
  }
}

struct Param {
  KvElem elem;
  int page_size;
};

KvSpec gpu_spec(KvElem elem, int ps) {
  KvSpec s;
  s.n_layer = 2;
  s.n_kv_head = 2;
  s.head_dim = 64;
  s.page_size = ps;
  s.elem = elem;
  s.n_pages = pages_for_tokens(6000, ps);
  s.max_batch = 4;
  s.max_seq_tokens = 2000;
  return s;
}

// The device and host caches after the same operations, compared: same pages, same bytes at
// every cached row, and the device gather equal to the host gather rounded to bf16.
void expect_same_pools(const DeviceKvCache& dev, HostKvCache& host, cudaStream_t st) {
  ok(cudaStreamSynchronize(st), "sync");
  const KvSizes& z = dev.sizes();
  const auto batch = dev.batch();
  std::vector<uint8_t> pool(size_t(z.layer_pool_bytes));
  for (int l = 0; l < dev.spec().n_layer; ++l)
    for (int which = 0; which < 2; ++which) {
      ok(cudaMemcpy(pool.data(), which ? dev.v_pool(l) : dev.k_pool(l), pool.size(), cudaMemcpyDeviceToHost), "d2h");
      const auto* hp = static_cast<const uint8_t*>(which ? host.v_pool(l) : host.k_pool(l));
      for (SeqId s : batch) {
        ASSERT_TRUE(std::equal(dev.pages(s).begin(), dev.pages(s).end(), host.pages(s).begin()));
        for (int64_t t = 0; t < dev.length(s); ++t) {
          const int64_t r = dev.row_of(s, t);
          ASSERT_EQ(std::memcmp(pool.data() + r * z.row_bytes, hp + r * z.row_bytes, size_t(z.row_bytes)), 0)
              << "layer " << l << (which ? " V" : " K") << " sequence " << s << " token " << t << " (pool row " << r
              << ")";
        }
      }
    }
  // gather on the device (bf16 out) vs gather on the host (fp32 out) rounded to bf16
  for (int l = 0; l < dev.spec().n_layer; ++l)
    for (int b = 0; b < int(batch.size()); ++b) {
      const int64_t len = dev.length(batch[size_t(b)]), t0 = len / 3, n = len - t0;
      if (n == 0) continue;
      const int64_t re = z.row_elems;
      DevBuf k(size_t(n * re * 2)), v(size_t(n * re * 2));
      kv_gather_bf16({dev.view(l), b, t0, n, k.p, v.p}, st);
      std::vector<uint16_t> kd(size_t(n * re)), vd(size_t(n * re));
      ok(cudaMemcpyAsync(kd.data(), k.p, kd.size() * 2, cudaMemcpyDeviceToHost, st), "d2h");
      ok(cudaMemcpyAsync(vd.data(), v.p, vd.size() * 2, cudaMemcpyDeviceToHost, st), "d2h");
      ok(cudaStreamSynchronize(st), "sync");
      std::vector<float> kh(size_t(n * re)), vh(size_t(n * re));
      kv_gather_f32(host.view(l), b, t0, n, kh.data(), vh.data());
      for (int64_t i = 0; i < n * re; ++i) {
        ASSERT_EQ(kd[size_t(i)], f32_to_bf16(kh[size_t(i)])) << "K layer " << l << " row " << b << " elem " << i;
        ASSERT_EQ(vd[size_t(i)], f32_to_bf16(vh[size_t(i)])) << "V layer " << l << " row " << b << " elem " << i;
      }
    }
}

class DevicePool : public ::testing::TestWithParam<Param> {};

// Prefill in interleaved chunks (one sequence a scatter, n_new = chunk), then batched decode
// (n_new = 1 for every sequence) after reordering the batch, against the host pool.
TEST_P(DevicePool, ScatterMatchesHostWrites) {
  KV_REQUIRE_GPU();
  const auto [elem, ps] = GetParam();
  const KvSpec spec = gpu_spec(elem, ps);
  DeviceKvCache dev(spec);
  HostKvCache host(spec);
  cudaStream_t st = nullptr;
  ok(cudaStreamCreate(&st), "stream");
  const int64_t re = dev.sizes().row_elems;
  if (elem == KvElem::fp8_e4m3)
    for (int l = 0; l < spec.n_layer; ++l) {
      const float ks = fp8_scale_for_amax(2.5f * float(l + 1)), vs = fp8_scale_for_amax(4.f);
      dev.set_scales(l, ks, vs);
      host.set_scales(l, ks, vs);
    }
  std::vector<SeqId> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(dev.create_sequence());
    ASSERT_EQ(host.create_sequence(), ids.back());
  }
  dev.set_batch(ids);
  host.set_batch(ids);
  DevBuf k_new(size_t(2000 * re * 2)), v_new(size_t(2000 * re * 2));
  for (int chunk = 0; chunk < 2; ++chunk)
    for (int b = 0; b < 4; ++b) {
      const SeqId s = ids[size_t(b)];
      const int64_t T = uniform(1, 300), t0 = dev.length(s);
      dev.append(s, T);
      host.append(s, T);
      dev.sync_tables(st);
      for (int l = 0; l < spec.n_layer; ++l) {
        std::vector<float> kf, vf;
        const auto kb = random_bf16(size_t(T * re), 1.f * float(l + 1), kf);  // fp8: some values past amax (clamped)
        const auto vb = random_bf16(size_t(T * re), 1.5f, vf);
        ok(cudaMemcpyAsync(k_new.p, kb.data(), kb.size() * 2, cudaMemcpyHostToDevice, st), "h2d");
        ok(cudaMemcpyAsync(v_new.p, vb.data(), vb.size() * 2, cudaMemcpyHostToDevice, st), "h2d");
        dev.scatter(l, {k_new.p, v_new.p, b, 1, int(T)}, st);
        ok(cudaStreamSynchronize(st), "sync");  // the host vectors die at the end of this iteration
        host.write_rows(s, l, t0, T, kf.data(), vf.data());
      }
    }
  ASSERT_NO_FATAL_FAILURE(expect_same_pools(dev, host, st));
  const std::vector<SeqId> order = {ids[2], ids[0], ids[3], ids[1]};  // rows move: their tables are re-uploaded
  dev.set_batch(order);
  host.set_batch(order);
  for (int step = 0; step < 40; ++step) {
    for (SeqId s : order) {
      dev.append(s, 1);
      host.append(s, 1);
    }
    dev.sync_tables(st);
    for (int l = 0; l < spec.n_layer; ++l) {
      std::vector<float> kf, vf;
      const auto kb = random_bf16(size_t(4 * re), 1.f, kf);
      const auto vb = random_bf16(size_t(4 * re), 1.f, vf);
      ok(cudaMemcpyAsync(k_new.p, kb.data(), kb.size() * 2, cudaMemcpyHostToDevice, st), "h2d");
      ok(cudaMemcpyAsync(v_new.p, vb.data(), vb.size() * 2, cudaMemcpyHostToDevice, st), "h2d");
      dev.scatter(l, {k_new.p, v_new.p, 0, 4, 1}, st);
      ok(cudaStreamSynchronize(st), "sync");
      for (int b = 0; b < 4; ++b) {
        const SeqId s = order[size_t(b)];
        host.write_rows(s, l, host.length(s) - 1, 1, kf.data() + b * re, vf.data() + b * re);
      }
    }
  }
  ASSERT_NO_FATAL_FAILURE(expect_same_pools(dev, host, st));
  ok(cudaGetLastError(), "kernels");
  cudaStreamDestroy(st);
}

// One decode step (every layer's scatter) captured once, replayed 70 times; between replays the
// host appends a token to each sequence, sync_tables uploads the tables (new pages at page
// boundaries) and the new rows are copied into the same staging buffers.
class DevicePoolGraph : public ::testing::TestWithParam<Param> {};

TEST_P(DevicePoolGraph, ReplayFollowsTheTables) {
  KV_REQUIRE_GPU();
  const auto [elem, ps] = GetParam();
  const KvSpec spec = gpu_spec(elem, ps);
  DeviceKvCache dev(spec);
  HostKvCache host(spec);
  cudaStream_t st = nullptr;
  ok(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
  const int64_t re = dev.sizes().row_elems;
  if (elem == KvElem::fp8_e4m3)
    for (int l = 0; l < spec.n_layer; ++l) {
      dev.set_scales(l, 0.01f, 0.02f);
      host.set_scales(l, 0.01f, 0.02f);
    }
  std::vector<SeqId> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(dev.create_sequence());
    host.create_sequence();
    const int64_t n = uniform(1, 40);  // different lengths; no K/V written for them (compared rows: decode only)
    dev.append(ids.back(), n);
    host.append(ids.back(), n);
  }
  std::vector<int64_t> start;
  for (SeqId s : ids) start.push_back(dev.length(s));
  dev.set_batch(ids);
  host.set_batch(ids);
  DevBuf k_new(size_t(spec.n_layer * 3 * re * 2)), v_new(size_t(spec.n_layer * 3 * re * 2));
  auto* kp = static_cast<char*>(k_new.p);
  auto* vp = static_cast<char*>(v_new.p);
  for (SeqId s : ids) {  // the first step, captured after its append
    dev.append(s, 1);
    host.append(s, 1);
  }
  dev.sync_tables(st);
  const KvView v0 = dev.view(0);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ok(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "begin capture");
  for (int l = 0; l < spec.n_layer; ++l)
    dev.scatter(l, {kp + l * 3 * re * 2, vp + l * 3 * re * 2, 0, 3, 1}, st);
  ok(cudaStreamEndCapture(st, &graph), "end capture");
  ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  for (int step = 0; step < 70; ++step) {
    if (step > 0) {
      for (SeqId s : ids) {
        dev.append(s, 1);
        host.append(s, 1);
      }
      dev.sync_tables(st);
    }
    std::vector<float> kf, vf;
    const auto kb = random_bf16(size_t(spec.n_layer * 3 * re), 1.f, kf);
    const auto vb = random_bf16(size_t(spec.n_layer * 3 * re), 1.f, vf);
    ok(cudaMemcpyAsync(k_new.p, kb.data(), kb.size() * 2, cudaMemcpyHostToDevice, st), "h2d");
    ok(cudaMemcpyAsync(v_new.p, vb.data(), vb.size() * 2, cudaMemcpyHostToDevice, st), "h2d");
    ok(cudaGraphLaunch(exec, st), "launch");
    ok(cudaStreamSynchronize(st), "sync");
    for (int l = 0; l < spec.n_layer; ++l)
      for (int b = 0; b < 3; ++b) {
        const size_t at = size_t((l * 3 + b) * re);
        host.write_rows(ids[size_t(b)], l, host.length(ids[size_t(b)]) - 1, 1, kf.data() + at, vf.data() + at);
      }
  }
  const KvView v1 = dev.view(0);
  EXPECT_EQ(v0.block_table, v1.block_table);  // fixed addresses: what the graph captured
  EXPECT_EQ(v0.seq_lens, v1.seq_lens);
  // compare the decoded rows only (the prompts' rows were never written on either side)
  const KvSizes& z = dev.sizes();
  std::vector<uint8_t> pool(size_t(z.layer_pool_bytes));
  for (int l = 0; l < spec.n_layer; ++l)
    for (int which = 0; which < 2; ++which) {
      ok(cudaMemcpy(pool.data(), which ? dev.v_pool(l) : dev.k_pool(l), pool.size(), cudaMemcpyDeviceToHost), "d2h");
      const auto* hp = static_cast<const uint8_t*>(which ? host.v_pool(l) : host.k_pool(l));
      for (int b = 0; b < 3; ++b)
        for (int64_t t = start[size_t(b)]; t < dev.length(ids[size_t(b)]); ++t) {
          const int64_t r = dev.row_of(ids[size_t(b)], t);
          ASSERT_EQ(std::memcmp(pool.data() + r * z.row_bytes, hp + r * z.row_bytes, size_t(z.row_bytes)), 0)
              << "layer " << l << " sequence " << b << " token " << t;
        }
    }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
}

std::vector<Param> params() {
  std::vector<Param> p;
  for (KvElem e : {KvElem::bf16, KvElem::fp8_e4m3})
    for (int ps : {1, 3, 16, 64, 128}) p.push_back({e, ps});
  return p;
}

std::string param_name(const ::testing::TestParamInfo<Param>& i) {
  return std::string(kv_elem_name(i.param.elem)) + "_page" + std::to_string(i.param.page_size);
}

INSTANTIATE_TEST_SUITE_P(ElemsAndPageSizes, DevicePool, ::testing::ValuesIn(params()), param_name);
INSTANTIATE_TEST_SUITE_P(ElemsAndPageSizes, DevicePoolGraph,
                         ::testing::Values(Param{KvElem::bf16, 1}, Param{KvElem::bf16, 16}, Param{KvElem::fp8_e4m3, 1},
                                           Param{KvElem::fp8_e4m3, 16}),
                         param_name);

}  // namespace
}  // namespace longctx::kv

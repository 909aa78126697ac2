// test_kv_host.cpp: HostKvCache: view addressing (token t of batch row b at the row the view's
// formula gives), and write-then-gather round trips: f32 exact, bf16 and fp8 against the same
// rounding done here (util/half.h, fp8_e4m3.h), for page sizes 1/3/16/64/128.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/ref/fp8_e4m3.h"
#include "kv/host_kv_cache.h"
#include "kv/kv_gather.h"
#include "kv_test_util.h"
#include "util/error.h"
#include "util/half.h"

namespace longctx::kv {
namespace {

using test::random_floats;
using test::uniform;

KvSpec spec_of(KvElem elem, int page_size, int64_t pool_tokens) {
  KvSpec s;
  s.n_layer = 3;
  s.n_kv_head = 2;
  s.head_dim = 16;
  s.page_size = page_size;
  s.elem = elem;
  s.n_pages = pages_for_tokens(pool_tokens, page_size);
  s.max_batch = 4;
  s.max_seq_tokens = pool_tokens;
  return s;
}

// What the pool should return for x after storing it (the host twin of the pool's rounding).
float stored(KvElem elem, float x, float scale) {
  switch (elem) {
    case KvElem::f32: return x;
    case KvElem::bf16: return bf16_to_f32(f32_to_bf16(x));
    case KvElem::fp8_e4m3: return e4m3_to_f32(f32_to_e4m3(x * (1.f / scale))) * scale;
  }
  return 0.f;
}

struct Param {
  KvElem elem;
  int page_size;
};

class HostPool : public ::testing::TestWithParam<Param> {};

// Three sequences grown in interleaved chunks (so their pages interleave in the pool), K/V
// written chunk by chunk per layer, then read back through a batch view in shuffled order.
TEST_P(HostPool, WriteThenGatherRoundTrip) {
  const auto [elem, ps] = GetParam();
  HostKvCache c(spec_of(elem, ps, 3000));
  const KvSpec& s = c.spec();
  const int64_t re = c.sizes().row_elems;
  if (elem == KvElem::fp8_e4m3)
    for (int l = 0; l < s.n_layer; ++l) c.set_scales(l, 0.01f * float(l + 1), 0.02f * float(l + 1));
  const int n_seq = 3;
  std::vector<SeqId> ids;
  // expected[i][l]: K then V values of sequence i, layer l, [len, re] each
  std::vector<std::vector<std::vector<float>>> want_k(n_seq, std::vector<std::vector<float>>(size_t(s.n_layer)));
  auto want_v = want_k;
  for (int i = 0; i < n_seq; ++i) ids.push_back(c.create_sequence());
  for (int round = 0; round < 8; ++round) {
    for (int i = 0; i < n_seq; ++i) {
      const int64_t n = uniform(0, 90), t0 = c.length(ids[size_t(i)]);
      c.append(ids[size_t(i)], n);
      for (int l = 0; l < s.n_layer; ++l) {
        const std::vector<float> k = random_floats(size_t(n * re), 2.f), v = random_floats(size_t(n * re), 3.f);
        c.write_rows(ids[size_t(i)], l, t0, n, k.data(), v.data());
        for (float x : k) want_k[size_t(i)][size_t(l)].push_back(stored(elem, x, c.k_scale(l)));
        for (float x : v) want_v[size_t(i)][size_t(l)].push_back(stored(elem, x, c.v_scale(l)));
      }
    }
  }
  const std::vector<SeqId> order = {ids[2], ids[0], ids[1]};
  c.set_batch(order);
  for (int l = 0; l < s.n_layer; ++l) {
    const KvView v = c.view(l);
    ASSERT_EQ(v.n_seq, 3);
    ASSERT_FALSE(v.on_device);
    for (int b = 0; b < 3; ++b) {
      const int i = b == 0 ? 2 : b - 1;
      const int64_t len = c.length(order[size_t(b)]);
      ASSERT_EQ(v.seq_lens[b], len);
      std::vector<float> k(size_t(len * re)), vv(size_t(len * re));
      kv_gather_f32(v, b, 0, len, k.data(), vv.data());
      ASSERT_EQ(k, want_k[size_t(i)][size_t(l)]) << "layer " << l << " row " << b;
      ASSERT_EQ(vv, want_v[size_t(i)][size_t(l)]) << "layer " << l << " row " << b;
      if (len > 5) {  // a slice from the middle
        std::vector<float> part(size_t(3 * re));
        kv_gather_f32(v, b, 2, 3, part.data(), nullptr);
        ASSERT_TRUE(std::equal(part.begin(), part.end(), want_k[size_t(i)][size_t(l)].begin() + 2 * re));
      }
    }
  }
}

// Token t of batch row b is pool row block_table[b][t / page_size] * page_size + t % page_size:
// f32 values that encode (sequence, layer, K/V, token, element) are found at that row.
class HostPoolF32 : public ::testing::TestWithParam<int> {};

TEST_P(HostPoolF32, ViewAddressing) {
  const int ps = GetParam();
  HostKvCache c(spec_of(KvElem::f32, ps, 1500));
  const KvSpec& s = c.spec();
  const int64_t re = c.sizes().row_elems;
  std::vector<SeqId> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(c.create_sequence());
  // exact in fp32: < 2^17 with steps of 1/64
  auto code = [&](int i, int l, int which, int64_t t, int64_t e) {
    return float(((i * 4 + l) * 2 + which) * 4096 + t) + float(e) / 64.f;
  };
  for (int round = 0; round < 5; ++round)
    for (int i = 0; i < 4; ++i) {
      const SeqId id = ids[size_t(i)];
      const int64_t n = uniform(1, 70), t0 = c.length(id);
      c.append(id, n);
      for (int l = 0; l < s.n_layer; ++l) {
        std::vector<float> k(size_t(n * re)), v(size_t(n * re));
        for (int64_t t = 0; t < n; ++t)
          for (int64_t e = 0; e < re; ++e) {
            k[size_t(t * re + e)] = code(i, l, 0, t0 + t, e);
            v[size_t(t * re + e)] = code(i, l, 1, t0 + t, e);
          }
        c.write_rows(id, l, t0, n, k.data(), v.data());
      }
    }
  const std::vector<SeqId> order = {ids[3], ids[1], ids[0], ids[2]};
  const int idx[] = {3, 1, 0, 2};
  c.set_batch(order);
  for (int l = 0; l < s.n_layer; ++l) {
    const KvView v = c.view(l);
    EXPECT_EQ(v.k_pool, c.k_pool(l));
    EXPECT_EQ(v.page_size, ps);
    EXPECT_EQ(v.max_pages_per_seq, c.sizes().max_pages_per_seq);
    EXPECT_EQ(v.n_pages, s.n_pages);
    const auto* kp = static_cast<const float*>(v.k_pool);
    const auto* vp = static_cast<const float*>(v.v_pool);
    for (int b = 0; b < 4; ++b)
      for (int64_t t = 0; t < v.seq_lens[b]; ++t) {
        const int64_t row =
            int64_t(v.block_table[int64_t(b) * v.max_pages_per_seq + t / ps]) * ps + t % ps;  // the documented formula
        ASSERT_EQ(row, v.row(b, t));
        ASSERT_EQ(row, c.row_of(order[size_t(b)], t));
        for (int64_t e = 0; e < re; e += 7) {
          ASSERT_EQ(kp[row * re + e], code(idx[b], l, 0, t, e)) << "row " << b << " token " << t;
          ASSERT_EQ(vp[row * re + e], code(idx[b], l, 1, t, e));
        }
      }
  }
}

TEST_P(HostPool, WriteErrors) {
  const auto [elem, ps] = GetParam();
  HostKvCache c(spec_of(elem, ps, 300));
  const SeqId a = c.create_sequence();
  c.reserve(a, 100);
  c.append(a, 10);
  std::vector<float> x(size_t(20 * c.sizes().row_elems), 1.f);
  auto msg = [&](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(msg([&] { c.write_rows(a, 0, 5, 6, x.data(), x.data()); }),
            "KV cache write_rows: tokens [5, 11) of sequence 0 are outside its length 10 (append them first)");
  EXPECT_EQ(msg([&] { c.write_rows(a, 3, 0, 1, x.data(), x.data()); }),
            "KV cache write_rows: layer 3 (the cache has 3)");
  if (elem == KvElem::fp8_e4m3) {
    EXPECT_EQ(msg([&] { c.write_rows(a, 1, 0, 1, x.data(), x.data()); }),
              "KV cache write_rows: the fp8 scales of layer 1 are not set (set_scales first)");
  }
  const SeqId one[] = {a};
  c.set_batch(one);
  std::vector<float> out(size_t(20 * c.sizes().row_elems));
  EXPECT_EQ(msg([&] { kv_gather_f32(c.view(0), 0, 8, 3, out.data(), nullptr); }),
            "kv_gather_f32: tokens [8, 11) of batch row 0 are outside its length 10");
  EXPECT_EQ(msg([&] { kv_gather_f32(c.view(0), 1, 0, 1, out.data(), nullptr); }),
            "kv_gather_f32: batch row 1 of a view of 1 sequences");
}

INSTANTIATE_TEST_SUITE_P(PageSizes, HostPoolF32, ::testing::Values(1, 3, 16, 64, 128));

std::vector<Param> params() {
  std::vector<Param> p;
  for (KvElem e : {KvElem::f32, KvElem::bf16, KvElem::fp8_e4m3})
    for (int ps : {1, 3, 16, 64, 128}) p.push_back({e, ps});
  return p;
}

INSTANTIATE_TEST_SUITE_P(ElemsAndPageSizes, HostPool, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<Param>& i) {
                           return std::string(kv_elem_name(i.param.elem)) + "_page" + std::to_string(i.param.page_size);
                         });

}  // namespace
}  // namespace longctx::kv

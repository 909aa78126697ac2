// test_attention.cpp (tests/cuda): prefill, decode and merge-states kernels vs an fp64 CPU twin.
//
// Inputs are fresh random bf16 (never zeros); the reference computes in fp64 on the same
// bf16-rounded values. Outputs are poisoned (NaN) before each launch, so an unwritten element
// fails. Tolerances follow the kernel's precision: P is rounded to bf16 before P V (relative
// error <= 2^-9 per weight) and O is rounded to bf16 (2^-9), so per element
// |err| <= 1e-2 |ref| + 5e-3 max|V| with ample margin, and rel_l2 must stay under 1e-2;
// the LSE is fp32 throughout (abs 2e-3).
// Run: build-gpu/tests/cuda/test_cuda --gtest_filter='Attn*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_sm90.h"
#include "test_util.h"

namespace longctx::cuda::test {
namespace {

struct Shape {
  int64_t n_q, n_kv, q_pos0;
  int n_head, n_kv_head, d;
  bool causal;
  int64_t window = 0;  // > 0: the query at position p sees keys (p - window, p]
};

// fp64 attention for the query rows in `rows` (all rows when empty). o: [n_q, n_head, d],
// lse: [n_head, n_q]; rows not in `rows` are left NaN.
void ref_attention(const Shape& s, const std::vector<double>& q, const std::vector<double>& k,
                   const std::vector<double>& v, double scale, const std::vector<int64_t>& rows,
                   std::vector<double>& o, std::vector<double>& lse) {
  const int d = s.d, group = s.n_head / s.n_kv_head;
  o.assign(size_t(s.n_q) * s.n_head * d, std::nan(""));
  lse.assign(size_t(s.n_head) * s.n_q, std::nan(""));
  std::vector<int64_t> all;
  const std::vector<int64_t>* rs = &rows;
  if (rows.empty()) {
    for (int64_t i = 0; i < s.n_q; ++i) all.push_back(i);
    rs = &all;
  }
  std::vector<double> sc(s.n_kv);
  for (int h = 0; h < s.n_head; ++h) {
    const int kvh = h / group;
    for (int64_t i : *rs) {
      const int64_t last = s.causal ? std::min(s.n_kv - 1, s.q_pos0 + i) : s.n_kv - 1;
      const int64_t first = s.window > 0 ? std::max<int64_t>(0, s.q_pos0 + i - s.window + 1) : 0;
      const double* qi = &q[(i * s.n_head + h) * d];
      double mx = -INFINITY;
      for (int64_t j = first; j <= last; ++j) {
        const double* kj = &k[(j * s.n_kv_head + kvh) * d];
        double acc = 0;
        for (int e = 0; e < d; ++e) acc += qi[e] * kj[e];
        sc[j] = acc * scale;
        mx = std::max(mx, sc[j]);
      }
      double l = 0;
      for (int64_t j = first; j <= last; ++j) l += (sc[j] = std::exp(sc[j] - mx));
      double* oi = &o[(i * s.n_head + h) * d];
      for (int e = 0; e < d; ++e) oi[e] = 0;
      for (int64_t j = first; j <= last; ++j) {
        const double* vj = &v[(j * s.n_kv_head + kvh) * d];
        const double p = sc[j] / l;
        for (int e = 0; e < d; ++e) oi[e] += p * vj[e];
      }
      lse[size_t(h) * s.n_q + i] = mx + std::log(l);
    }
  }
}

std::vector<double> pick_rows_o(const std::vector<double>& o, const Shape& s, const std::vector<int64_t>& rows) {
  std::vector<double> r;
  for (int64_t i : rows)
    for (int64_t e = 0; e < int64_t(s.n_head) * s.d; ++e) r.push_back(o[i * s.n_head * s.d + e]);
  return r;
}
std::vector<double> pick_rows_lse(const std::vector<double>& lse, const Shape& s, const std::vector<int64_t>& rows) {
  std::vector<double> r;
  for (int h = 0; h < s.n_head; ++h)
    for (int64_t i : rows) r.push_back(lse[size_t(h) * s.n_q + i]);
  return r;
}

// One case: fresh inputs and the fp64 reference once, then every kernel that applies (the FA2
// mma.sync kernel; for head_dim 128 and 256 each Hopper variant x ring depth), each on poisoned
// outputs.
// page_size > 0: K/V go to a paged pool (pages in random order, spare rows filled with NaN,
// which the kernels must never let through).
void run_prefill_case(const Shape& s, double q_scale, int n_check_rows = 0, int page_size = 0) {
  SCOPED_TRACE(::testing::Message() << "prefill page_size=" << page_size << " n_q=" << s.n_q << " n_kv=" << s.n_kv << " q_pos0=" << s.q_pos0
                                    << " heads=" << s.n_head << "/" << s.n_kv_head << " d=" << s.d
                                    << " causal=" << s.causal << " window=" << s.window);
  std::vector<double> qd, kd, vd;
  auto qh = random_bf16(size_t(s.n_q) * s.n_head * s.d, q_scale, qd);
  auto kh = random_bf16(size_t(s.n_kv) * s.n_kv_head * s.d, 1.0, kd);
  auto vh = random_bf16(size_t(s.n_kv) * s.n_kv_head * s.d, 1.0, vd);
  std::vector<int32_t> table;
  int64_t pool_rows = s.n_kv;
  if (page_size > 0) {
    const int n_pages = int((s.n_kv + page_size - 1) / page_size);
    const int n_pool_pages = n_pages + 2;
    std::vector<int32_t> perm(n_pool_pages);
    for (int i = 0; i < n_pool_pages; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng());
    table.assign(perm.begin(), perm.begin() + n_pages);
    pool_rows = int64_t(n_pool_pages) * page_size;
    const size_t row = size_t(s.n_kv_head) * s.d;
    std::vector<uint16_t> kp(size_t(pool_rows) * row, 0xffff), vp(size_t(pool_rows) * row, 0xffff);  // NaN
    for (int64_t j = 0; j < s.n_kv; ++j) {
      const size_t dst = (size_t(table[j / page_size]) * page_size + j % page_size) * row;
      std::copy(kh.begin() + j * row, kh.begin() + (j + 1) * row, kp.begin() + dst);
      std::copy(vh.begin() + j * row, vh.begin() + (j + 1) * row, vp.begin() + dst);
    }
    kh.swap(kp);
    vh.swap(vp);
  }
  DevBuf q(qh.size() * 2), k(kh.size() * 2), v(vh.size() * 2), o(qh.size() * 2),
      lse(size_t(s.n_head) * s.n_q * 4), tb(std::max<size_t>(1, table.size()) * 4);
  q.upload(qh);
  k.upload(kh);
  v.upload(vh);
  if (!table.empty()) tb.upload(table);

  std::vector<int64_t> rows;  // all rows, or a sample that always holds the first and last
  if (n_check_rows > 0 && n_check_rows < s.n_q) {
    std::uniform_int_distribution<int64_t> pick(0, s.n_q - 1);
    rows = {0, s.n_q - 1};
    while (int(rows.size()) < n_check_rows) rows.push_back(pick(rng()));
  } else {
    for (int64_t i = 0; i < s.n_q; ++i) rows.push_back(i);
  }
  std::vector<double> o_ref, lse_ref;
  ref_attention(s, qd, kd, vd, 1.0 / std::sqrt(double(s.d)), rows, o_ref, lse_ref);
  const auto o_ref_rows = pick_rows_o(o_ref, s, rows);
  const auto lse_ref_rows = pick_rows_lse(lse_ref, s, rows);
  const double vmax = max_abs(vd);

  // Every kernel that applies: FA2; the Hopper kernel at head_dim 128 (stages 2, 3; pages of 128
  // keys) or 256 (stages 2; tiles of 64 keys, or 80 without paging; pages of 64), each variant.
  struct Kind {
    bool sm90;
    int variant, stages, block_n;
  };
  std::vector<Kind> kinds = {{false, 0, 0, 0}};
  if (s.window == 0 && ((s.d == 128 && page_size % 128 == 0) || (s.d == 256 && page_size % 64 == 0))) {
    const std::vector<int> block_ns = s.d == 128 ? std::vector<int>{128} : page_size ? std::vector<int>{64}
                                                                                     : std::vector<int>{64, 80};
    for (int stages = 2; stages <= sm90_max_stages(s.d); ++stages)
      for (int bn : block_ns)
        for (int variant = 0; variant < 3; ++variant) kinds.push_back({true, variant, stages, bn});
  }
  for (const Kind& kind : kinds) {
    char name[40];
    if (!kind.sm90)
      std::snprintf(name, sizeof name, "fa2");
    else
      std::snprintf(name, sizeof name, "sm90/%s/%d/n%d",
                    kind.variant == 0 ? "simple" : kind.variant == 1 ? "overlap" : "pingpong", kind.stages, kind.block_n);
    SCOPED_TRACE(name);
    o.poison();
    lse.poison();
    PrefillParams p;
    p.q = q.p;
    p.k = k.p;
    p.v = v.p;
    p.o = o.p;
    p.lse = lse.as<float>();
    p.n_q = s.n_q;
    p.n_kv = s.n_kv;
    p.q_pos0 = s.q_pos0;
    p.n_head = s.n_head;
    p.n_kv_head = s.n_kv_head;
    p.head_dim = s.d;
    p.causal = s.causal;
    p.window = s.window;
    if (page_size > 0) {
      p.page_table = tb.as<int32_t>();
      p.page_size = page_size;
      p.kv_pool_rows = pool_rows;
    }
    if (!kind.sm90) {
      p.impl = PrefillImpl::fa2_mma_sync;
      attention_prefill(p);
    } else {
      attention_prefill_sm90(p, nullptr, Sm90Variant(kind.variant), kind.stages, kind.block_n);
    }
    device_sync();
    const auto o_got_all = to_double(o.download<uint16_t>(qh.size()));
    auto lse_f = lse.download<float>(size_t(s.n_head) * s.n_q);
    std::vector<double> lse_got_all(lse_f.begin(), lse_f.end());
    // Every element must be written (NaN poison) even where not compared.
    int64_t n_nan = 0;
    for (double x : o_got_all) n_nan += !std::isfinite(x);
    for (double x : lse_got_all) n_nan += !std::isfinite(x);
    EXPECT_EQ(n_nan, 0) << "unwritten or non-finite outputs";
    const auto eo = compare(pick_rows_o(o_got_all, s, rows), o_ref_rows, 5e-3 * vmax, 1e-2);
    const auto el = compare(pick_rows_lse(lse_got_all, s, rows), lse_ref_rows, 2e-3, 1e-5);
    std::printf("  prefill %-16s page=%d n_q=%lld n_kv=%lld q_pos0=%lld h=%d/%d d=%d causal=%d window=%lld: O %s | LSE %s\n",
                name, page_size, (long long)s.n_q, (long long)s.n_kv, (long long)s.q_pos0, s.n_head, s.n_kv_head, s.d,
                int(s.causal), (long long)s.window, eo.str().c_str(), el.str().c_str());
    EXPECT_EQ(eo.n_bad + eo.n_nan, 0) << eo.str();
    EXPECT_LT(eo.rel_l2, 1e-2) << eo.str();
    EXPECT_EQ(el.n_bad + el.n_nan, 0) << el.str();
  }
}

TEST(AttnPrefillSmall, CausalD128Gqa) {
  LC_REQUIRE_GPU();
  run_prefill_case({300, 300, 0, 32, 8, 128, true}, 1.0);
}
TEST(AttnPrefillSmall, CausalD64ChunkedPrefix) {
  LC_REQUIRE_GPU();
  run_prefill_case({77, 527, 450, 8, 2, 64, true}, 2.0);
}
TEST(AttnPrefillSmall, CausalD128ChunkedPeaky) {
  LC_REQUIRE_GPU();
  run_prefill_case({200, 1000, 800, 4, 1, 128, true}, 3.0);  // sharp softmax: large q
}
TEST(AttnPrefillSmall, NonCausalD128) {
  LC_REQUIRE_GPU();
  run_prefill_case({65, 1000, 0, 8, 1, 128, false}, 1.0);
}
TEST(AttnPrefillSmall, TinyShapes) {
  LC_REQUIRE_GPU();
  run_prefill_case({1, 1, 0, 2, 1, 64, true}, 1.0);
  run_prefill_case({1, 130, 129, 4, 2, 128, true}, 1.0);
  run_prefill_case({129, 129, 0, 2, 2, 128, true}, 1.0);
}
TEST(AttnPrefillSmall, PagedKvWithNanSpareRows) {
  LC_REQUIRE_GPU();
  run_prefill_case({150, 1000, 850, 8, 2, 128, true}, 1.0, 0, 128);  // chunk against a paged prefix
  run_prefill_case({300, 300, 0, 4, 1, 128, true}, 1.0, 0, 256);
  run_prefill_case({100, 700, 600, 8, 2, 64, true}, 1.0, 0, 64);     // FA2 kernel only
  run_prefill_case({64, 500, 0, 4, 2, 128, false}, 1.0, 0, 128);     // non-causal: every key seen
}

// Gemma 3's head_dim: the FA2 kernel (Q read from shared memory per tile) and the Hopper kernel
// (64-key tiles, O as two 128-column accumulators).
TEST(AttnPrefillSmall, HeadDim256) {
  LC_REQUIRE_GPU();
  run_prefill_case({300, 300, 0, 8, 1, 256, true}, 1.0);
  run_prefill_case({77, 600, 523, 4, 1, 256, true}, 2.0);   // chunk over a cached prefix
  run_prefill_case({65, 400, 0, 4, 2, 256, false}, 1.0);    // non-causal
  run_prefill_case({100, 700, 600, 4, 1, 256, true}, 1.0, 0, 64);  // paged
  run_prefill_case({200, 1000, 800, 4, 2, 256, true}, 3.0);        // sharp softmax: large q
  run_prefill_case({1, 1, 0, 2, 1, 256, true}, 1.0);               // one key
  run_prefill_case({129, 129, 0, 2, 2, 256, true}, 1.0);           // one row past a query block
  run_prefill_case({64, 500, 0, 4, 2, 256, false}, 1.0, 0, 128);   // paged, non-causal: every key
  run_prefill_case({150, 1000, 850, 16, 8, 256, true}, 1.0, 0, 64);  // Gemma 3 12B's heads, paged
}

// Sliding windows (Gemma 3's local layers): windows inside one tile, across tiles, past a
// cached prefix, of one key, wider than the context; and the tiny test models' head dims.
TEST(AttnPrefillSmall, SlidingWindow) {
  LC_REQUIRE_GPU();
  run_prefill_case({300, 300, 0, 8, 2, 128, true, 100}, 1.0);
  run_prefill_case({77, 1000, 923, 4, 1, 256, true, 512}, 2.0);
  run_prefill_case({200, 900, 700, 4, 2, 64, true, 64}, 1.5);
  run_prefill_case({129, 129, 0, 2, 1, 64, true, 1}, 1.0);
  run_prefill_case({50, 50, 0, 2, 1, 128, true, 4096}, 1.0);
  run_prefill_case({150, 1000, 850, 8, 2, 128, true, 300}, 1.0, 0, 128);  // paged
  run_prefill_case({80, 80, 0, 4, 2, 16, true, 16}, 1.0);
  run_prefill_case({80, 100, 20, 4, 2, 32, true}, 1.0);
}

TEST(AttnPrefill, Causal4KSampledRows) {
  LC_REQUIRE_GPU();
  run_prefill_case({4096, 4096, 0, 32, 8, 128, true}, 1.0, 48);
  run_prefill_case({3000, 3000, 0, 16, 4, 64, true}, 1.5, 48);
  run_prefill_case({4096, 4096, 0, 16, 8, 256, true}, 1.0, 48);
}

void run_decode_case(int n_seq, int64_t n_kv, int n_head, int n_kv_head, int d, int n_splits, double q_scale,
                     int64_t window = 0) {
  SCOPED_TRACE(::testing::Message() << "decode n_seq=" << n_seq << " n_kv=" << n_kv << " heads=" << n_head << "/"
                                    << n_kv_head << " d=" << d << " splits=" << n_splits << " window=" << window);
  std::vector<double> qd, kd, vd;
  auto qh = random_bf16(size_t(n_seq) * n_head * d, q_scale, qd);
  auto kh = random_bf16(size_t(n_seq) * n_kv * n_kv_head * d, 1.0, kd);
  auto vh = random_bf16(size_t(n_seq) * n_kv * n_kv_head * d, 1.0, vd);
  DevBuf q(qh.size() * 2), k(kh.size() * 2), v(vh.size() * 2), o(qh.size() * 2), lse(size_t(n_seq) * n_head * 4);
  const size_t ws_bytes = decode_workspace_bytes(n_seq, n_head, d, n_kv);
  DevBuf ws(ws_bytes);
  decode_workspace_init(ws.p, ws_bytes);
  q.upload(qh);
  k.upload(kh);
  v.upload(vh);
  o.poison();
  lse.poison();
  DecodeParams p;
  p.q = q.p;
  p.k = k.p;
  p.v = v.p;
  p.o = o.p;
  p.lse = lse.as<float>();
  p.n_seq = n_seq;
  p.n_kv = n_kv;
  p.n_head = n_head;
  p.n_kv_head = n_kv_head;
  p.head_dim = d;
  p.n_splits = n_splits;
  p.window = window;
  p.workspace = ws.p;
  p.workspace_bytes = ws_bytes;
  const int used_splits = decode_num_splits(p);
  attention_decode(p);
  device_sync();
  const auto o_got = to_double(o.download<uint16_t>(qh.size()));
  const auto lse_f = lse.download<float>(size_t(n_seq) * n_head);

  std::vector<double> o_ref_all, lse_ref_all;
  for (int b = 0; b < n_seq; ++b) {
    Shape s{1, n_kv, n_kv - 1, n_head, n_kv_head, d, true, window};
    std::vector<double> qb(qd.begin() + size_t(b) * n_head * d, qd.begin() + size_t(b + 1) * n_head * d);
    const size_t kv_n = size_t(n_kv) * n_kv_head * d;
    std::vector<double> kb(kd.begin() + b * kv_n, kd.begin() + (b + 1) * kv_n);
    std::vector<double> vb(vd.begin() + b * kv_n, vd.begin() + (b + 1) * kv_n);
    std::vector<double> o_ref, lse_ref;
    ref_attention(s, qb, kb, vb, 1.0 / std::sqrt(double(d)), {}, o_ref, lse_ref);
    o_ref_all.insert(o_ref_all.end(), o_ref.begin(), o_ref.end());
    lse_ref_all.insert(lse_ref_all.end(), lse_ref.begin(), lse_ref.end());  // [n_head] per seq
  }
  const auto eo = compare(o_got, o_ref_all, 5e-3 * max_abs(vd), 1e-2);
  const auto el = compare(std::vector<double>(lse_f.begin(), lse_f.end()), lse_ref_all, 2e-3, 1e-5);
  std::printf("  decode n_seq=%d n_kv=%lld h=%d/%d d=%d splits=%d window=%lld: O %s | LSE %s\n", n_seq,
              (long long)n_kv, n_head, n_kv_head, d, used_splits, (long long)window, eo.str().c_str(), el.str().c_str());
  EXPECT_EQ(eo.n_bad + eo.n_nan, 0) << eo.str();
  EXPECT_LT(eo.rel_l2, 1e-2) << eo.str();
  EXPECT_EQ(el.n_bad + el.n_nan, 0) << el.str();
}

TEST(AttnDecodeSmall, AutoSplitsD128) {
  LC_REQUIRE_GPU();
  run_decode_case(2, 5000, 32, 8, 128, 0, 1.0);
}
TEST(AttnDecodeSmall, ForcedSplitsD64Group7) {
  LC_REQUIRE_GPU();
  run_decode_case(1, 777, 14, 2, 64, 5, 2.0);
  run_decode_case(1, 777, 14, 2, 64, 1, 2.0);
}
TEST(AttnDecodeSmall, Group16AndOneKey) {
  LC_REQUIRE_GPU();
  run_decode_case(3, 300, 32, 2, 128, 0, 3.0);
  run_decode_case(1, 1, 8, 8, 128, 0, 1.0);
}
TEST(AttnDecodeSmall, HeadDim256) {
  LC_REQUIRE_GPU();
  run_decode_case(2, 5000, 8, 1, 256, 0, 1.0);
  run_decode_case(1, 777, 4, 1, 256, 3, 2.0);
}

// Sliding window: each row streams only its last `window` keys' tiles (split plan included).
TEST(AttnDecodeSmall, SlidingWindow) {
  LC_REQUIRE_GPU();
  run_decode_case(2, 5000, 8, 2, 128, 0, 1.0, 512);
  run_decode_case(1, 777, 4, 1, 256, 0, 1.5, 100);
  run_decode_case(1, 777, 4, 1, 256, 2, 1.5, 200);
  run_decode_case(1, 50, 4, 2, 64, 0, 1.0, 100);  // window wider than the context
  run_decode_case(1, 300, 4, 2, 64, 0, 1.0, 1);   // the last key only
  run_decode_case(2, 80, 4, 2, 16, 0, 1.0, 16);   // tiny test models' head dims
  run_decode_case(1, 200, 4, 2, 32, 3, 1.0);
}

TEST(AttnDecode, Long64K) {
  LC_REQUIRE_GPU();
  run_decode_case(1, 65536 + 17, 32, 8, 128, 0, 1.5);
}

// Paged KV cache with per-sequence lengths: pages scattered at random in a shared pool.
void run_decode_paged(int page_size, const std::vector<int32_t>& lens, int n_head, int n_kv_head, int d,
                      int64_t window = 0) {
  SCOPED_TRACE(::testing::Message() << "paged decode page_size=" << page_size << " n_seq=" << lens.size()
                                    << " window=" << window);
  const int n_seq = int(lens.size());
  const int64_t n_kv_max = *std::max_element(lens.begin(), lens.end());
  const int max_pages = int((n_kv_max + page_size - 1) / page_size);
  const int n_pages = n_seq * max_pages + 3;  // a few pages nobody uses
  std::vector<int32_t> perm(n_pages);
  for (int i = 0; i < n_pages; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng());
  std::vector<int32_t> table(size_t(n_seq) * max_pages);
  for (size_t i = 0; i < table.size(); ++i) table[i] = perm[i];
  const size_t row = size_t(n_kv_head) * d;
  std::vector<double> qd, kpool_d, vpool_d;
  auto qh = random_bf16(size_t(n_seq) * n_head * d, 1.5, qd);
  auto kh = random_bf16(size_t(n_pages) * page_size * row, 1.0, kpool_d);
  auto vh = random_bf16(size_t(n_pages) * page_size * row, 1.0, vpool_d);
  DevBuf q(qh.size() * 2), k(kh.size() * 2), v(vh.size() * 2), o(qh.size() * 2), lse(size_t(n_seq) * n_head * 4),
      tb(table.size() * 4), ln(lens.size() * 4);
  const size_t ws_bytes = decode_workspace_bytes(n_seq, n_head, d, n_kv_max);
  DevBuf ws(ws_bytes);
  decode_workspace_init(ws.p, ws_bytes);
  q.upload(qh);
  k.upload(kh);
  v.upload(vh);
  tb.upload(table);
  ln.upload(lens);
  o.poison();
  lse.poison();
  DecodeParams p;
  p.q = q.p;
  p.k = k.p;
  p.v = v.p;
  p.o = o.p;
  p.lse = lse.as<float>();
  p.n_seq = n_seq;
  p.n_kv = n_kv_max;
  p.kv_lens = ln.as<int32_t>();
  p.page_table = tb.as<int32_t>();
  p.page_size = page_size;
  p.max_pages_per_seq = max_pages;
  p.n_head = n_head;
  p.n_kv_head = n_kv_head;
  p.head_dim = d;
  p.window = window;
  p.workspace = ws.p;
  p.workspace_bytes = ws_bytes;
  attention_decode(p);
  device_sync();
  const auto o_got = to_double(o.download<uint16_t>(qh.size()));
  const auto lse_f = lse.download<float>(size_t(n_seq) * n_head);
  std::vector<double> o_ref_all, lse_ref_all;
  for (int b = 0; b < n_seq; ++b) {
    const int64_t n_kv = lens[b];
    std::vector<double> kb(size_t(n_kv) * row), vb(size_t(n_kv) * row);
    for (int64_t j = 0; j < n_kv; ++j) {
      const size_t src = (size_t(table[size_t(b) * max_pages + j / page_size]) * page_size + j % page_size) * row;
      std::copy(kpool_d.begin() + src, kpool_d.begin() + src + row, kb.begin() + j * row);
      std::copy(vpool_d.begin() + src, vpool_d.begin() + src + row, vb.begin() + j * row);
    }
    std::vector<double> qb(qd.begin() + size_t(b) * n_head * d, qd.begin() + size_t(b + 1) * n_head * d);
    Shape s{1, n_kv, n_kv - 1, n_head, n_kv_head, d, true, window};
    std::vector<double> o_ref, lse_ref;
    ref_attention(s, qb, kb, vb, 1.0 / std::sqrt(double(d)), {}, o_ref, lse_ref);
    o_ref_all.insert(o_ref_all.end(), o_ref.begin(), o_ref.end());
    lse_ref_all.insert(lse_ref_all.end(), lse_ref.begin(), lse_ref.end());
  }
  const auto eo = compare(o_got, o_ref_all, 5e-3 * max_abs(vpool_d), 1e-2);
  const auto el = compare(std::vector<double>(lse_f.begin(), lse_f.end()), lse_ref_all, 2e-3, 1e-5);
  std::printf("  paged decode page=%d n_seq=%d n_kv_max=%lld h=%d/%d d=%d: O %s | LSE %s\n", page_size, n_seq,
              (long long)n_kv_max, n_head, n_kv_head, d, eo.str().c_str(), el.str().c_str());
  EXPECT_EQ(eo.n_bad + eo.n_nan, 0) << eo.str();
  EXPECT_LT(eo.rel_l2, 1e-2) << eo.str();
  EXPECT_EQ(el.n_bad + el.n_nan, 0) << el.str();
}

TEST(AttnDecodeSmall, PagedVariableLengths) {
  LC_REQUIRE_GPU();
  run_decode_paged(128, {5000, 1234, 64, 1}, 32, 8, 128);
  run_decode_paged(64, {777, 3000}, 16, 4, 64);
  run_decode_paged(128, {5000, 600, 64, 1}, 8, 1, 256, 512);  // Gemma 3 local layers: window, d 256
}

// fp8 e4m3 (OCP FN variant: no infinities, max 448), round to nearest even, saturating.
uint8_t f32_to_e4m3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  double a = std::fabs(double(x));
  if (a >= 448.0) return sign | 0x7e;
  if (a < std::ldexp(1.0, -6)) {  // subnormal: m * 2^-9
    const double q = std::nearbyint(a / std::ldexp(1.0, -9));  // default rounding: to nearest even
    return sign | uint8_t(q);                                  // q == 8 is the smallest normal, 0x08
  }
  int e = std::ilogb(a);
  double q = std::nearbyint((a / std::ldexp(1.0, e) - 1.0) * 8.0);
  if (q == 8) {
    q = 0;
    ++e;
  }
  if (e > 8 || (e == 8 && q > 6)) return sign | 0x7e;
  return sign | uint8_t(((e + 7) << 3) | int(q));
}
double e4m3_to_f64(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (b & 0x80) ? -v : v;
}

void run_decode_fp8(int n_seq, int64_t n_kv, int n_head, int n_kv_head, int d) {
  SCOPED_TRACE(::testing::Message() << "fp8 decode n_seq=" << n_seq << " n_kv=" << n_kv << " d=" << d);
  std::vector<double> qd, kd, vd;
  auto qh = random_bf16(size_t(n_seq) * n_head * d, 1.5, qd);
  (void)random_bf16(size_t(n_seq) * n_kv * n_kv_head * d, 1.0, kd);
  (void)random_bf16(size_t(n_seq) * n_kv * n_kv_head * d, 2.0, vd);
  const double k_scale = max_abs(kd) / 448.0, v_scale = max_abs(vd) / 448.0;
  std::vector<uint8_t> k8(kd.size()), v8(vd.size());
  for (size_t i = 0; i < kd.size(); ++i) {
    k8[i] = f32_to_e4m3(float(kd[i] / k_scale));
    kd[i] = e4m3_to_f64(k8[i]) * k_scale;  // the reference sees the dequantised cache
    v8[i] = f32_to_e4m3(float(vd[i] / v_scale));
    vd[i] = e4m3_to_f64(v8[i]) * v_scale;
  }
  DevBuf q(qh.size() * 2), k(k8.size()), v(v8.size()), o(qh.size() * 2), lse(size_t(n_seq) * n_head * 4);
  const size_t ws_bytes = decode_workspace_bytes(n_seq, n_head, d, n_kv);
  DevBuf ws(ws_bytes);
  decode_workspace_init(ws.p, ws_bytes);
  q.upload(qh);
  k.upload(k8);
  v.upload(v8);
  o.poison();
  lse.poison();
  DecodeParams p;
  p.q = q.p;
  p.k = k.p;
  p.v = v.p;
  p.kv_dtype = KvDtype::fp8_e4m3;
  p.k_scale = float(k_scale);
  p.v_scale = float(v_scale);
  p.o = o.p;
  p.lse = lse.as<float>();
  p.n_seq = n_seq;
  p.n_kv = n_kv;
  p.n_head = n_head;
  p.n_kv_head = n_kv_head;
  p.head_dim = d;
  p.workspace = ws.p;
  p.workspace_bytes = ws_bytes;
  attention_decode(p);
  device_sync();
  const auto o_got = to_double(o.download<uint16_t>(qh.size()));
  const auto lse_f = lse.download<float>(size_t(n_seq) * n_head);
  std::vector<double> o_ref_all, lse_ref_all;
  const size_t kv_n = size_t(n_kv) * n_kv_head * d;
  for (int b = 0; b < n_seq; ++b) {
    Shape s{1, n_kv, n_kv - 1, n_head, n_kv_head, d, true};
    std::vector<double> qb(qd.begin() + size_t(b) * n_head * d, qd.begin() + size_t(b + 1) * n_head * d);
    std::vector<double> kb(kd.begin() + b * kv_n, kd.begin() + (b + 1) * kv_n);
    std::vector<double> vb(vd.begin() + b * kv_n, vd.begin() + (b + 1) * kv_n);
    std::vector<double> o_ref, lse_ref;
    ref_attention(s, qb, kb, vb, 1.0 / std::sqrt(double(d)), {}, o_ref, lse_ref);
    o_ref_all.insert(o_ref_all.end(), o_ref.begin(), o_ref.end());
    lse_ref_all.insert(lse_ref_all.end(), lse_ref.begin(), lse_ref.end());
  }
  const auto eo = compare(o_got, o_ref_all, 5e-3 * max_abs(vd), 1e-2);
  const auto el = compare(std::vector<double>(lse_f.begin(), lse_f.end()), lse_ref_all, 2e-3, 1e-5);
  std::printf("  fp8 decode n_seq=%d n_kv=%lld h=%d/%d d=%d: O %s | LSE %s\n", n_seq, (long long)n_kv, n_head,
              n_kv_head, d, eo.str().c_str(), el.str().c_str());
  EXPECT_EQ(eo.n_bad + eo.n_nan, 0) << eo.str();
  EXPECT_LT(eo.rel_l2, 1e-2) << eo.str();
  EXPECT_EQ(el.n_bad + el.n_nan, 0) << el.str();
}

TEST(AttnDecodeSmall, Fp8E4m3Kv) {
  LC_REQUIRE_GPU();
  run_decode_fp8(2, 5000, 32, 8, 128);
  run_decode_fp8(1, 777, 14, 2, 64);
  run_decode_fp8(1, 3000, 8, 1, 256);
}

TEST(AttnDecodeSmall, OneWorkspaceManyLengths) {
  LC_REQUIRE_GPU();
  // A decode loop's pattern: one workspace (sized for the longest context, zeroed once) while
  // n_kv and with it the split count change from call to call.
  const int n_head = 32, n_kv_head = 8, d = 128;
  const int64_t n_max = 4000;
  std::vector<double> qd, kd, vd;
  auto qh = random_bf16(size_t(n_head) * d, 1.0, qd);
  auto kh = random_bf16(size_t(n_max) * n_kv_head * d, 1.0, kd);
  auto vh = random_bf16(size_t(n_max) * n_kv_head * d, 1.0, vd);
  DevBuf q(qh.size() * 2), k(kh.size() * 2), v(vh.size() * 2), o(qh.size() * 2), lse(n_head * 4);
  const size_t ws_bytes = decode_workspace_bytes(1, n_head, d, n_max);
  DevBuf ws(ws_bytes);
  decode_workspace_init(ws.p, ws_bytes);
  q.upload(qh);
  k.upload(kh);
  v.upload(vh);
  for (int64_t n_kv : {n_max, int64_t(130), int64_t(2500), int64_t(64), n_max, int64_t(1)}) {
    SCOPED_TRACE(n_kv);
    o.poison();
    DecodeParams p;
    p.q = q.p;
    p.k = k.p;
    p.v = v.p;
    p.o = o.p;
    p.lse = lse.as<float>();
    p.n_kv = n_kv;
    p.n_head = n_head;
    p.n_kv_head = n_kv_head;
    p.head_dim = d;
    p.workspace = ws.p;
    p.workspace_bytes = ws_bytes;
    attention_decode(p);
    device_sync();
    Shape s{1, n_kv, n_kv - 1, n_head, n_kv_head, d, true};
    std::vector<double> o_ref, lse_ref;
    ref_attention(s, qd, kd, vd, 1.0 / std::sqrt(double(d)), {}, o_ref, lse_ref);
    const auto eo = compare(to_double(o.download<uint16_t>(qh.size())), o_ref, 5e-3 * max_abs(vd), 1e-2);
    EXPECT_EQ(eo.n_bad + eo.n_nan, 0) << eo.str();
  }
}

TEST(AttnDecodeSmall, GraphReplayMatchesEager) {
  LC_REQUIRE_GPU();
  // A decode step captured once and replayed after the query changed in place: the replay must
  // give exactly what an eager call on the new query gives.
  const int n_head = 32, n_kv_head = 8, d = 128;
  const int64_t n_kv = 3000;
  std::vector<double> tmp;
  auto q1 = random_bf16(size_t(n_head) * d, 1.0, tmp);
  auto q2 = random_bf16(size_t(n_head) * d, 1.0, tmp);
  auto kh = random_bf16(size_t(n_kv) * n_kv_head * d, 1.0, tmp);
  auto vh = random_bf16(size_t(n_kv) * n_kv_head * d, 1.0, tmp);
  DevBuf q(q1.size() * 2), k(kh.size() * 2), v(vh.size() * 2), o(q1.size() * 2);
  const size_t ws_bytes = decode_workspace_bytes(1, n_head, d, n_kv);
  DevBuf ws(ws_bytes);
  decode_workspace_init(ws.p, ws_bytes);
  q.upload(q1);
  k.upload(kh);
  v.upload(vh);
  Stream st = stream_create();
  DecodeParams p;
  p.q = q.p;
  p.k = k.p;
  p.v = v.p;
  p.o = o.p;
  p.n_kv = n_kv;
  p.n_head = n_head;
  p.n_kv_head = n_kv_head;
  p.head_dim = d;
  p.workspace = ws.p;
  p.workspace_bytes = ws_bytes;
  attention_decode(p, st);  // eager first: one-time kernel setup happens outside the capture
  stream_sync(st);
  const auto o_eager1 = o.download<uint16_t>(q1.size());
  CudaGraph graph;
  graph.begin_capture(st);
  attention_decode(p, st);
  graph.end_capture(st);
  copy_h2d(q.p, q2.data(), q2.size() * 2);
  o.poison();
  graph.launch(st);
  stream_sync(st);
  const auto o_graph = o.download<uint16_t>(q1.size());
  attention_decode(p, st);
  stream_sync(st);
  const auto o_eager2 = o.download<uint16_t>(q1.size());
  EXPECT_EQ(o_graph, o_eager2);
  EXPECT_NE(o_graph, o_eager1);
  stream_destroy(st);
}

TEST(AttnMergeSmall, RandomPartsWithEmptyPart) {
  LC_REQUIRE_GPU();
  const int64_t rows = 37;
  const int parts = 5, d = 128;
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> o(size_t(rows) * parts * d), lse(size_t(rows) * parts);
  for (auto& x : o) x = nd(rng());
  for (auto& x : lse) x = 3.f * nd(rng());
  for (int64_t r = 0; r < rows; r += 3) lse[r * parts + 2] = -INFINITY;  // a part with no keys
  DevBuf od(o.size() * 4), ld(lse.size() * 4), out(size_t(rows) * d * 2), out_lse(size_t(rows) * 4);
  od.upload(o);
  ld.upload(lse);
  out.poison();
  out_lse.poison();
  MergeParams p;
  p.o_part = od.as<float>();
  p.lse_part = ld.as<float>();
  p.o_row_stride = int64_t(parts) * d;
  p.o_part_stride = d;
  p.lse_row_stride = parts;
  p.lse_part_stride = 1;
  p.o = out.p;
  p.lse = out_lse.as<float>();
  p.n_rows = rows;
  p.n_parts = parts;
  p.head_dim = d;
  merge_attention_states(p);
  device_sync();
  std::vector<double> o_ref(size_t(rows) * d), lse_ref(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY;
    for (int j = 0; j < parts; ++j) m = std::max(m, double(lse[r * parts + j]));
    double l = 0;
    for (int j = 0; j < parts; ++j) l += std::exp(double(lse[r * parts + j]) - m);
    lse_ref[r] = m + std::log(l);
    for (int e = 0; e < d; ++e) {
      double acc = 0;
      for (int j = 0; j < parts; ++j)
        acc += std::exp(double(lse[r * parts + j]) - lse_ref[r]) * o[(r * parts + j) * d + e];
      o_ref[r * d + e] = acc;
    }
  }
  const auto eo = compare(to_double(out.download<uint16_t>(size_t(rows) * d)), o_ref, 1e-3, 8e-3);
  const auto lf = out_lse.download<float>(rows);
  const auto el = compare(std::vector<double>(lf.begin(), lf.end()), lse_ref, 1e-4, 1e-5);
  std::printf("  merge rows=%lld parts=%d: O %s | LSE %s\n", (long long)rows, parts, eo.str().c_str(),
              el.str().c_str());
  EXPECT_EQ(eo.n_bad + eo.n_nan, 0) << eo.str();
  EXPECT_EQ(el.n_bad + el.n_nan, 0) << el.str();
}

TEST(AttnPrefillSmall, AutomaticChoiceMatches) {
  LC_REQUIRE_GPU();
  // The default path (attention_prefill with impl = automatic) on a chunked-prefill shape.
  Shape s{150, 700, 550, 8, 2, 128, true};
  std::vector<double> qd, kd, vd;
  auto qh = random_bf16(size_t(s.n_q) * s.n_head * s.d, 1.0, qd);
  auto kh = random_bf16(size_t(s.n_kv) * s.n_kv_head * s.d, 1.0, kd);
  auto vh = random_bf16(size_t(s.n_kv) * s.n_kv_head * s.d, 1.0, vd);
  DevBuf q(qh.size() * 2), k(kh.size() * 2), v(vh.size() * 2), o(qh.size() * 2);
  q.upload(qh);
  k.upload(kh);
  v.upload(vh);
  o.poison();
  PrefillParams p;
  p.q = q.p;
  p.k = k.p;
  p.v = v.p;
  p.o = o.p;
  p.n_q = s.n_q;
  p.n_kv = s.n_kv;
  p.q_pos0 = s.q_pos0;
  p.n_head = s.n_head;
  p.n_kv_head = s.n_kv_head;
  p.head_dim = s.d;
  attention_prefill(p);  // no LSE requested
  device_sync();
  std::vector<double> o_ref, lse_ref;
  ref_attention(s, qd, kd, vd, 1.0 / std::sqrt(128.0), {}, o_ref, lse_ref);
  const auto eo = compare(to_double(o.download<uint16_t>(qh.size())), o_ref, 5e-3 * max_abs(vd), 1e-2);
  EXPECT_EQ(eo.n_bad + eo.n_nan, 0) << eo.str();
}

TEST(AttnArgs, RejectsBadShapes) {
  LC_REQUIRE_GPU();
  PrefillParams p;
  alignas(16) static int dummy[4] = {};
  p.q = p.k = p.v = dummy;
  p.o = dummy;
  p.n_q = 4;
  p.n_kv = 4;
  p.n_head = 4;
  p.n_kv_head = 4;
  p.head_dim = 96;
  EXPECT_THROW(attention_prefill(p), std::exception);  // unsupported head_dim
  p.head_dim = 64;
  p.causal = false;
  p.window = 8;
  EXPECT_THROW(attention_prefill(p), std::exception);  // a window needs causal attention
  p.causal = true;
  p.window = 0;
  p.head_dim = 64;
  p.n_kv_head = 3;
  EXPECT_THROW(attention_prefill(p), std::exception);  // 4 % 3 != 0
  p.n_kv_head = 4;
  p.n_kv = 2;
  EXPECT_THROW(attention_prefill(p), std::exception);  // causal queries past the keys
}

}  // namespace
}  // namespace longctx::cuda::test

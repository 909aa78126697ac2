// test_sparse_decode.cpp (tests/cuda): cuda::sparse_decode against the fp64 "dense attention with
// the same mask" oracle (tests/common/sparse_decode_cases.h) on fresh random paged caches and
// adversarial indices; CUDA-graph replay with changed index contents and lengths; the sinks +
// window index (build_sink_window_index) against dense cuda::attention_decode.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "../common/sparse_decode_cases.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/sparse_decode.h"
#include "test_util.h"
#include "util/error.h"

namespace longctx::cuda::test {
namespace {

using longctx::test::DecodeCase;
using longctx::test::DecodeCaseShape;

// A case's arrays on the device and the params that read them.
struct GpuCase {
  std::unique_ptr<DevBuf> k, v, table, lens, q, o, lse, range_ptr, ranges, col_ptr, cols, ws;
  SparseDecodeParams p;

  explicit GpuCase(const DecodeCase& c, int64_t max_keys = 0, int n_splits = 0) {
    const auto& sh = c.shape;
    const size_t pool_bytes = size_t(c.pool_rows() * c.row_elems()) * kv_elem_bytes(sh.elem);
    k = std::make_unique<DevBuf>(pool_bytes);
    v = std::make_unique<DevBuf>(pool_bytes);
    copy_h2d(k->p, c.k_pool(), pool_bytes);
    copy_h2d(v->p, c.v_pool(), pool_bytes);
    table = up(c.block_table);
    lens = up(sh.lens);
    q = up(c.q_bf16);
    o = std::make_unique<DevBuf>(c.q_bf16.size() * 2);
    lse = std::make_unique<DevBuf>(size_t(c.n_seq) * sh.n_head * 4);
    range_ptr = up(c.range_ptr);
    ranges = up(c.ranges);
    col_ptr = up(c.col_ptr);
    cols = up(c.cols);
    p.q = q->p;
    p.o = o->p;
    p.lse = lse->as<float>();
    p.n_head = sh.n_head;
    p.kv = c.host_view();
    p.kv.k_pool = k->p;
    p.kv.v_pool = v->p;
    p.kv.block_table = table->as<int32_t>();
    p.kv.seq_lens = lens->as<int32_t>();
    p.kv.on_device = true;
    p.index = c.host_index();
    p.index.range_ptr = range_ptr->as<int32_t>();
    p.index.ranges = ranges->as<int32_t>();
    p.index.col_ptr = col_ptr->as<int32_t>();
    p.index.cols = cols->as<int32_t>();
    p.index.on_device = true;
    p.max_keys_per_row = max_keys;
    p.n_splits = n_splits;
    const size_t ws_bytes = sparse_decode_workspace_bytes(sparse_decode_bounds(p));
    ws = std::make_unique<DevBuf>(ws_bytes);
    sparse_decode_workspace_init(ws->p, ws_bytes);
    p.workspace = ws->p;
    p.workspace_bytes = ws_bytes;
  }
  template <class T>
  static std::unique_ptr<DevBuf> up(const std::vector<T>& h) {
    auto b = std::make_unique<DevBuf>(std::max<size_t>(h.size() * sizeof(T), 4));
    if (!h.empty()) b->upload(h);
    return b;
  }
  std::vector<uint16_t> o_bits(const DecodeCase& c) const { return o->download<uint16_t>(c.q_bf16.size()); }
  std::vector<float> lse_vals(const DecodeCase& c) const {
    return lse->download<float>(size_t(c.n_seq) * c.shape.n_head);
  }
};

// Checks O and LSE against the oracle; empty rows must be exactly O = +0, LSE = -inf.
void expect_matches_oracle(const DecodeCase& c, const std::vector<uint16_t>& o_bits, const std::vector<float>& lse_f,
                           const char* what) {
  std::vector<double> o_ref, lse_ref;
  longctx::test::oracle(c, o_ref, lse_ref);
  const auto o_got = to_double(o_bits);
  // bf16 output, bf16 (fp16 for fp8 KV) probabilities in the P V product: as the dense decode test.
  const double vmax = longctx::test::max_abs_v(c);
  const auto eo = compare(o_got, o_ref, 5e-3 * vmax, 1e-2);
  std::vector<double> lse_got(lse_f.begin(), lse_f.end());
  const auto el = compare(lse_got, lse_ref, 2e-3, 1e-5);
  int64_t empty = 0, empty_bad = 0;
  for (size_t i = 0; i < lse_ref.size(); ++i) {
    if (!std::isinf(lse_ref[i])) continue;
    ++empty;
    const int D = c.shape.head_dim;
    bool zero = std::isinf(lse_f[i]) && lse_f[i] < 0;
    for (int d = 0; d < D; ++d) zero = zero && o_bits[i * D + d] == 0;
    empty_bad += !zero;
  }
  std::printf("  %s n_seq=%d h=%d/%d ih=%d d=%d page=%d elem=%d: O %s | LSE %s | %lld empty heads\n", what, c.n_seq,
              c.shape.n_head, c.shape.n_kv_head, c.shape.n_index_head, c.shape.head_dim, c.shape.page_size,
              int(c.shape.elem), eo.str().c_str(), el.str().c_str(), (long long)empty);
  EXPECT_EQ(eo.n_bad + eo.n_nan, 0) << eo.str();
  EXPECT_EQ(el.n_bad + el.n_nan, 0) << el.str();
  EXPECT_EQ(empty_bad, 0) << "empty rows must give O = 0 (+0 bits) and LSE = -inf";
}

void run_case(const DecodeCaseShape& shape, int n_splits = 0, bool exact_max_keys = false) {
  SCOPED_TRACE(::testing::Message() << "n_seq=" << shape.lens.size() << " heads=" << shape.n_head << "/"
                                    << shape.n_kv_head << " ih=" << shape.n_index_head << " d=" << shape.head_dim
                                    << " page=" << shape.page_size << " elem=" << int(shape.elem)
                                    << " splits=" << n_splits);
  const DecodeCase c = longctx::test::make_case(shape, rng());
  int64_t max_keys = 0;
  if (exact_max_keys)
    for (int32_t len : shape.lens) max_keys = std::max<int64_t>(max_keys, len);
  GpuCase g(c, max_keys, n_splits);
  g.o->poison();
  g.lse->poison();
  sparse_decode(g.p);
  device_sync();
  char what[64];
  std::snprintf(what, sizeof what, "sparse decode splits=%d", sparse_decode_num_splits(g.p));
  expect_matches_oracle(c, g.o_bits(c), g.lse_vals(c), what);
}

std::vector<int32_t> mixed_lens(int n, int lo, int hi) {
  std::uniform_int_distribution<int> u(lo, hi);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng());
  return v;
}

TEST(SparseDecodeSmall, Gqa32x8IndexHeadsSharedPerKvPerQuery) {
  LC_REQUIRE_GPU();
  for (int ih : {1, 8, 32}) run_case({mixed_lens(3, 1, 3000), 32, 8, ih, 128, 16, KvElem::bf16});
}

TEST(SparseDecodeSmall, Gqa4x1D64Page1Fp8) {
  LC_REQUIRE_GPU();
  for (int ih : {1, 4}) run_case({mixed_lens(4, 1, 2000), 4, 1, ih, 64, 1, KvElem::fp8_e4m3});
}

TEST(SparseDecodeSmall, PageSizes1_16_64Bf16AndFp8) {
  LC_REQUIRE_GPU();
  for (int ps : {1, 16, 64})
    for (KvElem e : {KvElem::bf16, KvElem::fp8_e4m3}) run_case({mixed_lens(2, 100, 2500), 32, 8, 8, 128, ps, e});
}

TEST(SparseDecodeSmall, Batch32MixedLengths) {
  LC_REQUIRE_GPU();
  run_case({mixed_lens(32, 1, 1500), 32, 8, 8, 128, 16, KvElem::bf16});
  run_case({mixed_lens(32, 1, 1500), 16, 4, 1, 64, 64, KvElem::fp8_e4m3}, 0, true);
  run_case({mixed_lens(32, 1, 600), 8, 2, 8, 128, 1, KvElem::bf16});
}

TEST(SparseDecodeSmall, ForcedSplitsAndPeakyScores) {
  LC_REQUIRE_GPU();
  DecodeCaseShape s{mixed_lens(3, 500, 3000), 32, 8, 8, 128, 16, KvElem::bf16};
  s.q_scale = 3.0;
  for (int splits : {1, 3, 512}) run_case(s, splits);
  run_case(s, 0, true);
}

// Gemma 3's global layers: head_dim 256 (two warps per key group in the split kernel), GQA 16/8
// (12B) and 4/1 (1B), index heads shared / per KV head / per query head, pages of 1, 16 and 64
// keys, bf16 and fp8, forced splits.
TEST(SparseDecodeSmall, HeadDim256) {
  LC_REQUIRE_GPU();
  for (int ih : {1, 8, 16}) run_case({mixed_lens(3, 1, 3000), 16, 8, ih, 256, 16, KvElem::bf16});
  for (int ps : {1, 64})
    for (KvElem e : {KvElem::bf16, KvElem::fp8_e4m3}) run_case({mixed_lens(2, 100, 2500), 4, 1, 4, 256, ps, e});
  DecodeCaseShape s{mixed_lens(3, 500, 3000), 16, 8, 8, 256, 16, KvElem::bf16};
  s.q_scale = 3.0;
  for (int splits : {1, 3, 512}) run_case(s, splits);
}

TEST(SparseDecode, LongSequences) {
  LC_REQUIRE_GPU();
  run_case({{70000, 33000}, 32, 8, 8, 128, 64, KvElem::bf16});
  run_case({{50000}, 32, 8, 1, 128, 16, KvElem::fp8_e4m3});
}

// One decode step captured in a graph, then replayed after the index contents (same capacity) and
// the sequence lengths changed in place: the replay must equal an eager call on the new inputs.
TEST(SparseDecodeSmall, GraphReplayFollowsIndexAndLengths) {
  LC_REQUIRE_GPU();
  const std::vector<int32_t> lens = {900, 2000, 37, 1500};
  DecodeCaseShape s{lens, 32, 8, 8, 128, 16, KvElem::bf16};
  s.extra_capacity = 4000;  // room for the second index
  const DecodeCase c1 = longctx::test::make_case(s, rng());
  // Second problem over the same cache: other lengths (within the block tables), another index.
  DecodeCase c2 = c1;
  c2.shape.lens = {901, 1200, 40, 1500};
  {
    DecodeCase fresh = longctx::test::make_case(c2.shape, rng());
    c2.range_ptr = fresh.range_ptr;
    c2.col_ptr = fresh.col_ptr;
    const int64_t nr = fresh.range_ptr.back(), nc = fresh.col_ptr.back();
    ASSERT_LE(nr, c1.range_capacity);
    ASSERT_LE(nc, c1.col_capacity);
    std::copy(fresh.ranges.begin(), fresh.ranges.begin() + 2 * nr, c2.ranges.begin());
    std::copy(fresh.cols.begin(), fresh.cols.begin() + nc, c2.cols.begin());
    // Slots 900 of sequence 0 and 37..39 of sequence 2 were NaN padding in c1's pool: give them values.
    for (int sq : {0, 2})
      for (int64_t t = lens[sq]; t < c2.shape.lens[sq]; ++t) {
        const int64_t row = int64_t(c1.block_table[size_t(sq) * c1.max_pages + t / 16]) * 16 + t % 16;
        for (int64_t e = 0; e < c2.row_elems(); ++e) {
          const size_t i = size_t(row * c2.row_elems() + e);
          c2.k_bf16[i] = f32_to_bf16(0.01f * float(e % 97) - 0.4f);
          c2.v_bf16[i] = f32_to_bf16(0.02f * float(e % 89) - 0.8f);
          c2.k_f32[i] = bf16_to_f32(c2.k_bf16[i]);
          c2.v_f32[i] = bf16_to_f32(c2.v_bf16[i]);
        }
      }
  }
  GpuCase g(c1);
  const size_t pool_bytes = c2.k_bf16.size() * 2;
  copy_h2d(g.k->p, c2.k_bf16.data(), pool_bytes);  // the pool holds both problems' keys
  copy_h2d(g.v->p, c2.v_bf16.data(), pool_bytes);
  Stream st = stream_create();
  sparse_decode(g.p, st);  // eager first: one-time kernel setup happens outside the capture
  stream_sync(st);
  const auto o1 = g.o_bits(c1);
  CudaGraph graph;
  graph.begin_capture(st);
  sparse_decode(g.p, st);
  graph.end_capture(st);
  // New contents, same buffers.
  copy_h2d(g.lens->p, c2.shape.lens.data(), c2.shape.lens.size() * 4);
  copy_h2d(g.range_ptr->p, c2.range_ptr.data(), c2.range_ptr.size() * 4);
  copy_h2d(g.ranges->p, c2.ranges.data(), c2.ranges.size() * 4);
  copy_h2d(g.col_ptr->p, c2.col_ptr.data(), c2.col_ptr.size() * 4);
  copy_h2d(g.cols->p, c2.cols.data(), c2.cols.size() * 4);
  g.o->poison();
  graph.launch(st);
  stream_sync(st);
  const auto o_graph = g.o_bits(c2);
  const auto lse_graph = g.lse_vals(c2);
  sparse_decode(g.p, st);
  stream_sync(st);
  const auto o_eager = g.o_bits(c2);
  const auto lse_eager = g.lse_vals(c2);
  EXPECT_EQ(o_graph, o_eager);
  EXPECT_EQ(0, std::memcmp(lse_graph.data(), lse_eager.data(), lse_graph.size() * 4));
  EXPECT_NE(o_graph, o1);
  expect_matches_oracle(c2, o_graph, lse_graph, "graph replay");
  stream_destroy(st);
}

// Sinks + window covering the whole sequence attends every key in order, so the sparse kernel
// runs dense decode's exact computation when both use the same splits: bit-identical outputs.
TEST(SparseDecodeSmall, SinkWindowCoveringAllEqualsDenseDecode) {
  LC_REQUIRE_GPU();
  for (KvElem e : {KvElem::bf16, KvElem::fp8_e4m3}) {
    const int len = 64 * 40 - 17;  // 40 tiles; 8 splits of 5 tiles in both kernels
    DecodeCaseShape s{{len}, 32, 8, 1, 128, 64, e};
    const DecodeCase c = longctx::test::make_case(s, rng());
    GpuCase g(c, len, 8);
    SinkWindowIndexParams ip;
    ip.seq_lens = g.lens->as<int32_t>();
    ip.n_seq = 1;
    ip.sinks = 128;
    ip.window = 4096;
    DevBuf rp(8), rg(16), cp(8);
    ip.range_ptr = rp.as<int32_t>();
    ip.ranges = rg.as<int32_t>();
    ip.col_ptr = cp.as<int32_t>();
    build_sink_window_index(ip);
    g.p.index = sink_window_index_view(ip);
    // The replaced index has other capacities: size the workspace again.
    const size_t ws_bytes = sparse_decode_workspace_bytes(sparse_decode_bounds(g.p));
    DevBuf ws(ws_bytes);
    sparse_decode_workspace_init(ws.p, ws_bytes);
    g.p.workspace = ws.p;
    g.p.workspace_bytes = ws_bytes;
    sparse_decode(g.p);
    EXPECT_EQ(rg.download<int32_t>(4), (std::vector<int32_t>{0, 128, 0, len}));
    DecodeParams d;
    d.q = g.q->p;
    d.k = g.k->p;
    d.v = g.v->p;
    d.kv_dtype = e == KvElem::bf16 ? KvDtype::bf16 : KvDtype::fp8_e4m3;
    d.k_scale = c.k_scale;
    d.v_scale = c.v_scale;
    DevBuf o(c.q_bf16.size() * 2), lse(32 * 4);
    d.o = o.p;
    d.lse = lse.as<float>();
    d.n_kv = len;
    d.kv_lens = g.lens->as<int32_t>();
    d.page_table = g.table->as<int32_t>();
    d.page_size = 64;
    d.max_pages_per_seq = c.max_pages;
    d.n_head = 32;
    d.n_kv_head = 8;
    d.head_dim = 128;
    d.n_splits = 8;
    const size_t dws_bytes = decode_workspace_bytes(1, 32, 128, len);
    DevBuf dws(dws_bytes);
    decode_workspace_init(dws.p, dws_bytes);
    d.workspace = dws.p;
    d.workspace_bytes = dws_bytes;
    attention_decode(d);
    device_sync();
    EXPECT_EQ(sparse_decode_num_splits(g.p), decode_num_splits(d));
    EXPECT_EQ(g.o_bits(c), o.download<uint16_t>(c.q_bf16.size())) << "elem " << int(e);
    const auto l1 = g.lse_vals(c), l2 = lse.download<float>(32);
    EXPECT_EQ(0, std::memcmp(l1.data(), l2.data(), 32 * 4));
  }
}

// A batch of mixed lengths with sinks + window (the A-shape decode index) against the oracle, the
// window covering some sequences entirely and others not.
TEST(SparseDecodeSmall, SinkWindowBatchMatchesOracle) {
  LC_REQUIRE_GPU();
  DecodeCaseShape s{mixed_lens(16, 1, 3000), 32, 8, 1, 128, 16, KvElem::bf16};
  DecodeCase c = longctx::test::make_case(s, rng());
  const int sinks = 16, window = 1000;
  c.range_ptr = {0};
  c.col_ptr = {0};
  c.ranges.clear();
  for (int b = 0; b < c.n_seq; ++b) {
    const int len = s.lens[b];
    c.ranges.insert(c.ranges.end(), {0, std::min(sinks, len), std::max(len - window, 0), len});
    c.range_ptr.push_back(2 * (b + 1));
    c.col_ptr.push_back(0);
  }
  c.range_capacity = 2 * c.n_seq;
  c.cols.assign(1, 0);
  c.col_capacity = 0;
  GpuCase g(c);
  SinkWindowIndexParams ip;
  ip.seq_lens = g.lens->as<int32_t>();
  ip.n_seq = c.n_seq;
  ip.sinks = sinks;
  ip.window = window;
  ip.range_ptr = g.range_ptr->as<int32_t>();
  ip.ranges = g.ranges->as<int32_t>();
  ip.col_ptr = g.col_ptr->as<int32_t>();
  g.ranges->poison();
  build_sink_window_index(ip);
  EXPECT_EQ(g.ranges->download<int32_t>(c.ranges.size()), c.ranges);
  g.p.index = sink_window_index_view(ip);
  sparse_decode(g.p);
  device_sync();
  expect_matches_oracle(c, g.o_bits(c), g.lse_vals(c), "sink+window batch");
}

TEST(SparseDecodeArgs, RejectsBadShapes) {
  LC_REQUIRE_GPU();
  const DecodeCase c = longctx::test::make_case({{100}, 8, 2, 2, 64, 16, KvElem::bf16}, rng());
  GpuCase g(c);
  auto bad = [&](auto edit) {
    SparseDecodeParams p = g.p;
    edit(p);
    EXPECT_THROW(sparse_decode(p), Error);
  };
  bad([](SparseDecodeParams& p) { p.kv.head_dim = 96; });
  bad([](SparseDecodeParams& p) { p.index.n_index_head = 3; });
  bad([](SparseDecodeParams& p) { p.kv.on_device = false; });
  bad([](SparseDecodeParams& p) { p.kv.elem = KvElem::f32; });
  bad([](SparseDecodeParams& p) { p.workspace_bytes /= 2; });
  bad([](SparseDecodeParams& p) { p.index.n_seq = 2; });
}

}  // namespace
}  // namespace longctx::cuda::test

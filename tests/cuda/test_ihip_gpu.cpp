// test_ihip_gpu.cpp: InfiniteHiP's GPU pruning stage (kernels/cuda/ihip_prune.h) against the CPU
// reference (kernels/ref/ihip_prune.h): for every RoPE mode (none, relative, chunk-indexed),
// three chained decode stages over a paged, shuffled bf16 cache with two sequences of different
// lengths, the chunk scores are bit-equal and the surviving lists equal (ties included: a
// sequence whose keys are all equal keeps its earliest chunks); the paper's 3K preset at 70K
// keys with Llama-3-8B's 32/8 heads; head_dim 256 (gemma-3's 4/1 heads, and 8/2 with ties);
// head_dim 64 (SmolLM2-135M's 9/3 heads, and ties); the fp8 cache's e4m3 keys against the CPU
// twin reading the same bytes (every head_dim and RoPE mode, the 3K preset, ties);
// query groups of 3 and 16 (the decode scorer takes 4 heads at a time); the decode index (sinks,
// one range per kept chunk, pads, anchored window) matches the key set. Prefill (every 64-row
// block of a chunk at once): per RoPE mode and GQA shape (groups of 4, and 16 = over one
// shared-memory query tile), at head_dim 64, 128 and 256, each stage's chunk scores (max over KV
// heads) bit-equal and lists equal to the CPU reference per block (RoPE none, scored on tensor
// cores, on small-integer inputs whose dots are exact), the index's key sets equal sinks +
// survivors + window, and cuda::sparse_attention over that index equal to an fp64 dense
// attention restricted to the same key sets (RoPE modes on the fp32 FMA scorer:
// rope_tensor_cores off); the tensor-core scores on random inputs against an fp64 replay of the
// bisection (both halves followed at near ties), at head_dim 256, 128 and 64 with RoPE none (the
// wgmma scorer, the default, and the mma.sync one), and with
// RoPE relative and chunk-indexed (operands rotated as the kernel does, then rounded to bf16) at
// head_dim 64, 128 and 256. rank=local (IhipGpuRankLocal*): the offsets kernels' outputs bit-equal
// to the CPU twin's; the chunk scores and the lists bit-equal to the CPU twin with
// IhipStageInput::offset in decode and on the prefill FMA scorer (and RoPE none's tensor cores on
// small-integer inputs); the prefill tensor-core scores (every RoPE mode, wgmma and mma.sync) on
// random inputs against the fp64 bisection replay minus the offsets; the routing (tensor cores
// where the paper's rule takes them).
// Run: build-gpu/tests/cuda/test_ihip_gpu (skips without a Hopper GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <random>

#include "kernels/cuda/ihip_prune.h"
#include "kernels/cuda/sparse_attention.h"
#include "kernels/ref/fp8_e4m3.h"
#include "kernels/ref/ihip_prune.h"
#include "test_util.h"

namespace longctx::cuda {
namespace {
using namespace test;

constexpr int kD = 128;

struct ChainCase {
  int H = 8, Hkv = 2, page = 64, D = 128;  // D: head_dim
  std::vector<int32_t> lens;
  int64_t n_sink = 256, n_stream = 1024;
  std::vector<IhipStage> stages;
  bool equal_keys_seq1 = false;  // sequence 1's keys all equal (every score ties)
  bool fp8 = false;  // keys in e4m3 with one scale (the fp8 KV cache), the CPU twin reading the same bytes
  bool local = false;  // rank=local: the offsets (ihip_offsets_decode vs ihip_local_offsets) bit-equal too
};

// Keys of the fp8 cache: the random values quantized with its rule (scale = amax / 448).
struct Fp8Pool {
  std::vector<uint8_t> bytes;
  float scale = 1.f;
};
Fp8Pool quantize_keys(const std::vector<double>& vals) {
  float amax = 0.f;
  for (const double v : vals) amax = std::max(amax, std::fabs(float(v)));
  Fp8Pool r;
  r.scale = fp8_scale_for_amax(amax);
  r.bytes.resize(vals.size());
  for (size_t i = 0; i < vals.size(); ++i) r.bytes[i] = f32_to_e4m3(float(vals[i]) / r.scale);
  return r;
}

std::vector<float> inv_freq(double base, int d = kD) {
  std::vector<float> f(size_t(d / 2));
  for (int i = 0; i < d / 2; ++i) f[size_t(i)] = float(std::pow(base, -2.0 * i / d));
  return f;
}

void check_chain(const ChainCase& su, int mode) {
  const int n_seq = int(su.lens.size()), H = su.H, Hkv = su.Hkv, page = su.page, D = su.D;
  const int64_t cap = *std::max_element(su.lens.begin(), su.lens.end());
  const int max_pages = int((cap + page - 1) / page);
  const int64_t n_pages = int64_t(n_seq) * max_pages;
  std::vector<int32_t> tab(static_cast<size_t>(n_pages));
  std::iota(tab.begin(), tab.end(), 0);
  std::shuffle(tab.begin(), tab.end(), std::mt19937_64(5));
  std::vector<double> tmp;
  auto hk = random_bf16(size_t(n_pages * page * Hkv * D), 1.0, tmp);
  Fp8Pool hk8 = su.fp8 ? quantize_keys(tmp) : Fp8Pool{};
  const size_t eb = su.fp8 ? 1 : 2;  // bytes an element
  char* pool = su.fp8 ? reinterpret_cast<char*>(hk8.bytes.data()) : reinterpret_cast<char*>(hk.data());
  if (su.equal_keys_seq1)
    for (int64_t t = 0; t < cap; ++t) {
      const int64_t row = int64_t(tab[size_t(max_pages + t / page)]) * page + t % page;
      const int64_t row0 = int64_t(tab[size_t(max_pages)]) * page;
      std::memcpy(pool + size_t(row * Hkv * D) * eb, pool + size_t(row0 * Hkv * D) * eb, size_t(Hkv * D) * eb);
    }
  const auto hq = random_bf16(size_t(n_seq * H * D), 1.0, tmp);
  const auto inv = inv_freq(500000.0, D);
  int64_t max_chunks0 = (cap + su.stages[0].l_c - 1) / su.stages[0].l_c;
  const IhipRopeTable table = ihip_rope_table(inv.data(), D, su.n_stream + 2 + cap);
  DevBuf kp(hk.size() * eb), dtab(tab.size() * 4), dlens(size_t(n_seq) * 4), q(hq.size() * 2),
      cosb(table.cos.size() * 4), sinb(table.sin.size() * 4), win(size_t(n_seq) * 4), offb(size_t(n_seq * H) * 4);
  if (su.fp8)
    kp.upload(hk8.bytes);
  else
    kp.upload(hk);
  dtab.upload(tab);
  dlens.upload(su.lens);
  q.upload(hq);
  cosb.upload(table.cos);
  sinb.upload(table.sin);
  KvView kv;
  kv.k_pool = kv.v_pool = kp.p;
  kv.elem = su.fp8 ? KvElem::fp8_e4m3 : KvElem::bf16;
  kv.k_scale = su.fp8 ? hk8.scale : 1.f;
  kv.block_table = dtab.as<int32_t>();
  kv.seq_lens = dlens.as<int32_t>();
  kv.n_seq = n_seq;
  kv.max_pages_per_seq = max_pages;
  kv.page_size = page;
  kv.n_pages = n_pages;
  kv.n_kv_head = Hkv;
  kv.head_dim = D;
  kv.on_device = true;
  // CPU side: each sequence's keys in logical order (fp32 values, or the same e4m3 bytes), its query.
  std::vector<std::vector<float>> fk(static_cast<size_t>(n_seq));
  std::vector<std::vector<uint8_t>> fk8(static_cast<size_t>(n_seq));
  std::vector<std::vector<int32_t>> cand(static_cast<size_t>(n_seq));
  for (int s = 0; s < n_seq; ++s) {
    const size_t n_el = size_t(su.lens[size_t(s)]) * Hkv * D;
    if (su.fp8)
      fk8[size_t(s)].resize(n_el);
    else
      fk[size_t(s)].resize(n_el);
    for (int64_t t = 0; t < su.lens[size_t(s)]; ++t) {
      const int64_t row = int64_t(tab[size_t(s * max_pages + t / page)]) * page + t % page;
      for (int64_t e = 0; e < Hkv * D; ++e) {
        if (su.fp8)
          fk8[size_t(s)][size_t(t * Hkv * D + e)] = hk8.bytes[size_t(row * Hkv * D + e)];
        else
          fk[size_t(s)][size_t(t * Hkv * D + e)] = bf16_to_f32(hk[size_t(row * Hkv * D + e)]);
      }
    }
    const int64_t pos = su.lens[size_t(s)] - 1, end = std::max(su.n_sink, pos - su.n_stream + 1);
    for (int64_t j = su.n_sink; j < end; ++j) cand[size_t(s)].push_back(int32_t(j));
  }
  std::vector<float> fq(hq.size());
  for (size_t i = 0; i < hq.size(); ++i) fq[i] = bf16_to_f32(hq[i]);

  std::unique_ptr<DevBuf> prev_out, prev_len;
  int64_t prev_cap = 0, pruned = 0;
  for (size_t i = 0; i < su.stages.size(); ++i) {
    const IhipStage st = su.stages[i];
    const int64_t max_chunks = i == 0 ? max_chunks0 : (prev_cap + st.l_c - 1) / st.l_c;
    auto out = std::make_unique<DevBuf>(size_t(n_seq * st.k) * 4), olen = std::make_unique<DevBuf>(size_t(n_seq) * 4);
    DevBuf scores(size_t(n_seq * max_chunks) * 4);
    scores.poison();
    IhipStageGpuParams p;
    p.l_c = st.l_c;
    p.k = st.k;
    p.rope_mode = mode;
    p.n_sink = su.n_sink;
    p.n_stream = su.n_stream;
    p.q = q.p;
    p.kv = kv;
    p.n_head = H;
    p.rope_cos = cosb.as<float>();
    p.rope_sin = sinb.as<float>();
    p.rope_n_pos = table.n_pos;
    p.in = i ? prev_out->as<int32_t>() : nullptr;
    p.in_len = i ? prev_len->as<int32_t>() : nullptr;
    p.in_cap = prev_cap;
    p.out = out->as<int32_t>();
    p.out_len = olen->as<int32_t>();
    p.out_cap = st.k;
    p.scores = scores.as<float>();
    p.max_chunks = max_chunks;
    p.win_begin = i == 0 ? win.as<int32_t>() : nullptr;
    p.offset = su.local ? offb.as<float>() : nullptr;
    ihip_prune_stage_decode(p);
    device_sync();
    const auto got_off = su.local ? offb.download<float>(size_t(n_seq * H)) : std::vector<float>{};
    const auto got = out->download<int32_t>(size_t(n_seq * st.k));
    const auto got_len = olen->download<int32_t>(size_t(n_seq));
    const auto got_sc = scores.download<float>(size_t(n_seq * max_chunks));
    for (int s = 0; s < n_seq; ++s) {
      const int64_t pos = su.lens[size_t(s)] - 1, n_chunk = (int64_t(cand[size_t(s)].size()) + st.l_c - 1) / st.l_c;
      std::vector<float> qp;
      ihip_pack_queries(fq.data() + s * H * D, H, Hkv, D, 0, 1, pos, IhipRopeMode(mode), &table, n_chunk,
                        su.n_stream, qp);
      IhipStageInput in{.q = qp.data(), .n_qs = H / Hkv, .k = fk[size_t(s)].data(), .k_stride = Hkv * D,
                        .k_fp8 = su.fp8 ? fk8[size_t(s)].data() : nullptr, .k_scale = kv.k_scale,
                        .n_kv_head = Hkv, .head_dim = D, .rope = IhipRopeMode(mode), .table = &table};
      std::vector<float> off;
      if (su.local && n_chunk > st.keep_chunks()) {
        ihip_local_offsets(in, {.rows = 1, .pos0 = pos, .n_sink = su.n_sink,
                                .win_begin = std::max(su.n_sink, pos - su.n_stream + 1), .n_chunk = n_chunk}, off);
        in.offset = off.data();
        EXPECT_EQ(std::memcmp(off.data(), got_off.data() + s * H, size_t(H) * 4), 0)
            << "offsets, mode " << mode << " stage " << i << " seq " << s;
      }
      std::vector<int32_t> want;
      ihip_prune_stage(st, in, cand[size_t(s)], want);
      if (n_chunk > st.keep_chunks()) {
        ++pruned;
        const auto sc = ihip_chunk_scores(st, in, cand[size_t(s)]);
        EXPECT_EQ(std::memcmp(sc.data(), got_sc.data() + s * max_chunks, sc.size() * 4), 0)
            << "scores, mode " << mode << " stage " << i << " seq " << s;
      }
      ASSERT_EQ(got_len[size_t(s)], int32_t(want.size())) << "mode " << mode << " stage " << i << " seq " << s;
      EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + s * st.k))
          << "mode " << mode << " stage " << i << " seq " << s;
      if (su.equal_keys_seq1 && s == 1 && n_chunk > st.keep_chunks()) {  // ties: the earliest chunks
        EXPECT_TRUE(std::equal(want.begin(), want.end(), cand[size_t(s)].begin()));
      }
      cand[size_t(s)] = want;
    }
    if (i == 0) {
      const auto w = win.download<int32_t>(size_t(n_seq));
      for (int s = 0; s < n_seq; ++s)
        EXPECT_EQ(w[size_t(s)], std::max<int64_t>(su.n_sink, su.lens[size_t(s)] - su.n_stream));
    }
    prev_out = std::move(out);
    prev_len = std::move(olen);
    prev_cap = st.k;
  }
  EXPECT_GT(pruned, 0);
  // The decode index of the last stage: sinks, one range per kept chunk, pads, the window.
  const IhipStage last = su.stages.back();
  IhipIndexGpuParams ip;
  ip.sel = prev_out->as<int32_t>();
  ip.sel_len = prev_len->as<int32_t>();
  ip.sel_cap = last.k;
  ip.l_c = last.l_c;
  ip.n_sink = su.n_sink;
  ip.win_begin = win.as<int32_t>();
  ip.n_seq = n_seq;
  const int64_t R = ip.ranges_per_seq();
  DevBuf rptr(size_t(n_seq + 1) * 4), rg(size_t(n_seq * R) * 8), cptr(size_t(n_seq + 1) * 4);
  ip.range_ptr = rptr.as<int32_t>();
  ip.ranges = rg.as<int32_t>();
  ip.col_ptr = cptr.as<int32_t>();
  ihip_decode_index(ip);
  device_sync();
  const auto r = rg.download<int32_t>(size_t(n_seq * R * 2));
  const auto rp = rptr.download<int32_t>(size_t(n_seq + 1));
  for (int s = 0; s < n_seq; ++s) {
    EXPECT_EQ(rp[size_t(s + 1)], (s + 1) * R);
    std::vector<int32_t> keys;  // the ranges' keys, clipped to the length
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = r[size_t(2 * (s * R + i))]; j < std::min<int64_t>(r[size_t(2 * (s * R + i) + 1)], su.lens[size_t(s)]); ++j)
        keys.push_back(int32_t(j));
    std::vector<int32_t> want;
    for (int64_t j = 0; j < su.n_sink; ++j) want.push_back(int32_t(j));
    want.insert(want.end(), cand[size_t(s)].begin(), cand[size_t(s)].end());
    for (int64_t j = std::max<int64_t>(su.n_sink, su.lens[size_t(s)] - su.n_stream); j < su.lens[size_t(s)]; ++j)
      want.push_back(int32_t(j));
    EXPECT_EQ(keys, want) << "seq " << s;
  }
}

TEST(IhipGpu, StagesEqualTheCpuReferenceInEveryRopeMode) {
  LC_REQUIRE_GPU();
  ChainCase su;
  su.lens = {20000, 9001};
  su.stages = {{256, 4096}, {32, 1024}, {8, 256}};
  for (int mode : {0, 1, 2}) {
    SCOPED_TRACE(mode);
    check_chain(su, mode);
  }
}

TEST(IhipGpu, TiesKeepTheEarliestChunks) {
  LC_REQUIRE_GPU();
  ChainCase su;
  su.lens = {12000, 12000};
  su.stages = {{64, 2048}, {16, 512}};
  su.equal_keys_seq1 = true;
  check_chain(su, 1);
}

TEST(IhipGpu, PaperPreset3KAt70KWithLlama3Heads) {
  LC_REQUIRE_GPU();
  ChainCase su;
  su.H = 32;
  su.Hkv = 8;
  su.lens = {70000};
  su.stages = {{256, 32768}, {32, 8192}, {8, 2048}};
  check_chain(su, 1);
  check_chain(su, 2);
}

// head_dim 256 (gemma-3's 4 query heads on 1 KV head, and 2 KV heads), every RoPE mode, with a
// tie-only sequence: the lane's four 16-byte chunks and their rotate-half pairs (c, c + 2).
TEST(IhipGpu, HeadDim256StagesEqualTheCpuReference) {
  LC_REQUIRE_GPU();
  ChainCase su;
  su.D = 256;
  su.H = 4;
  su.Hkv = 1;
  su.lens = {20000, 9001};
  su.stages = {{256, 4096}, {32, 1024}, {8, 256}};
  for (int mode : {0, 1, 2}) {
    SCOPED_TRACE(mode);
    check_chain(su, mode);
  }
  ChainCase ties = su;
  ties.H = 8;
  ties.Hkv = 2;
  ties.lens = {12000, 12000};
  ties.stages = {{64, 2048}, {16, 512}};
  ties.equal_keys_seq1 = true;
  check_chain(ties, 1);
}

// Query groups that are not a multiple of the 4 heads a probe pair scores at once (3), and 16
// heads on one KV head (4 passes of 4).
TEST(IhipGpu, OddAndWideQueryGroups) {
  LC_REQUIRE_GPU();
  ChainCase su;
  su.H = 6;
  su.Hkv = 2;
  su.lens = {20000, 9001};
  su.stages = {{256, 4096}, {32, 1024}, {8, 256}};
  check_chain(su, 0);
  check_chain(su, 1);
  su.H = 16;
  su.Hkv = 1;
  check_chain(su, 2);
}

// head_dim 64 with SmolLM2-135M's 9 query heads on 3 KV heads (groups of 3; a score CTA scores
// 10 chunks, 2 of its 32 items idle), every RoPE mode (the rotate-half pairs (i, i + 32) sit in
// lanes l and l + 4 of a dot: one shuffle), and a tie-only sequence.
TEST(IhipGpu, HeadDim64SmolLM2HeadsEqualTheCpuReference) {
  LC_REQUIRE_GPU();
  ChainCase su;
  su.D = 64;
  su.H = 9;
  su.Hkv = 3;
  su.lens = {20000, 9001};
  su.stages = {{256, 4096}, {32, 1024}, {8, 256}};
  for (int mode : {0, 1, 2}) {
    SCOPED_TRACE(mode);
    check_chain(su, mode);
  }
  ChainCase ties = su;
  ties.lens = {12000, 12000};
  ties.stages = {{64, 2048}, {16, 512}};
  ties.equal_keys_seq1 = true;
  check_chain(ties, 1);
}

// The fp8 KV cache (--kv-cache fp8): e4m3 keys with one scale; the CPU twin reads the same bytes
// (IhipStageInput::k_fp8): scores bit-equal and lists equal at head_dim 128, 64 and 256 in every
// RoPE mode, the paper's preset with Llama-3's heads, and a tie-only sequence.
TEST(IhipGpu, Fp8KeysEqualTheCpuTwinInEveryRopeMode) {
  LC_REQUIRE_GPU();
  ChainCase su;
  su.fp8 = true;
  su.lens = {20000, 9001};
  su.stages = {{256, 4096}, {32, 1024}, {8, 256}};
  for (int mode : {0, 1, 2}) {
    SCOPED_TRACE(mode);
    check_chain(su, mode);
  }
  ChainCase d64 = su;
  d64.D = 64, d64.H = 9, d64.Hkv = 3;
  ChainCase d256 = su;
  d256.D = 256, d256.H = 4, d256.Hkv = 1;
  for (int mode : {0, 1, 2}) {
    SCOPED_TRACE(mode);
    check_chain(d64, mode);
    check_chain(d256, mode);
  }
}

TEST(IhipGpu, Fp8KeysPaperPresetAndTies) {
  LC_REQUIRE_GPU();
  ChainCase su;
  su.fp8 = true;
  su.H = 32;
  su.Hkv = 8;
  su.lens = {70000};
  su.stages = {{256, 32768}, {32, 8192}, {8, 2048}};
  check_chain(su, 0);
  ChainCase ties;
  ties.fp8 = true;
  ties.lens = {12000, 12000};
  ties.stages = {{64, 2048}, {16, 512}};
  ties.equal_keys_seq1 = true;
  check_chain(ties, 1);
}

// ---- Prefill: a chunk of n_q queries at q_pos0.. against keys 0..q_pos0 + n_q - 1.
struct PrefillCase {
  int H = 8, Hkv = 2, D = 128;  // D: head_dim
  int64_t n_q = 200, q_pos0 = 20000;
  int64_t n_sink = 256, n_stream = 1024;
  std::vector<IhipStage> stages{{256, 4096}, {32, 1024}, {8, 256}};
  bool prunes = true;  // whether some stage of some block has more chunks than it keeps
  bool local = false;  // rank=local: offsets bit-equal to ihip_local_offsets, scored on the FMA path
  bool wgmma = true;   // IhipPrefillGpuParams::wgmma_scorer (RoPE none's tensor-core scorer)
};

// fp64 softmax attention of each row over its block's key set (keys <= the row's position).
std::vector<double> masked_attention(const std::vector<float>& q, const std::vector<float>& k,
                                     const std::vector<float>& v, const PrefillCase& su,
                                     const std::vector<std::vector<int32_t>>& keys) {
  const int H = su.H, Hkv = su.Hkv, group = H / Hkv, D = su.D;
  std::vector<double> o(size_t(su.n_q * H * D), 0.0);
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> w;
  for (int64_t i = 0; i < su.n_q; ++i) {
    const auto& ks = keys[size_t(i / 64)];
    const int64_t pos = su.q_pos0 + i;
    for (int h = 0; h < H; ++h) {
      const float* qi = q.data() + (i * H + h) * D;
      const int g = h / group;
      w.assign(ks.size(), -INFINITY);
      double m = -INFINITY;
      for (size_t t = 0; t < ks.size(); ++t) {
        if (ks[t] > pos) continue;
        const float* kj = k.data() + (int64_t(ks[t]) * Hkv + g) * D;
        double d = 0;
        for (int e = 0; e < D; ++e) d += double(qi[e]) * kj[e];
        w[t] = d * scale;
        m = std::max(m, w[t]);
      }
      double den = 0;
      for (double& x : w) den += (x = x == -INFINITY ? 0.0 : std::exp(x - m));
      double* oi = o.data() + (i * H + h) * D;
      for (size_t t = 0; t < ks.size(); ++t) {
        if (w[t] == 0.0) continue;
        const float* vj = v.data() + (int64_t(ks[t]) * Hkv + g) * D;
        for (int e = 0; e < D; ++e) oi[e] += w[t] / den * vj[e];
      }
    }
  }
  return o;
}

// Small integers in [-2, 2] (exact in bf16): every dot product is an exact integer in fp32 however
// it is summed, so the tensor-core scorer (RoPE none) is bit-equal to the CPU reference's FMA
// order; many scores tie, so the tie rules (right half in the bisection, earlier chunk) decide.
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

// RoPE none scores on tensor cores (small-integer inputs: bit-equal); the other modes on random inputs.
void check_prefill(const PrefillCase& su, int mode) {
  const int H = su.H, Hkv = su.Hkv, group = H / Hkv, D = su.D;
  const int64_t n_kv = su.q_pos0 + su.n_q, n_blk = (su.n_q + 63) / 64;
  std::vector<double> tmp;
  const auto hq = mode == 0 ? small_int_bf16(size_t(su.n_q * H * D), 21) : random_bf16(size_t(su.n_q * H * D), 1.0, tmp);
  const auto hk = mode == 0 ? small_int_bf16(size_t(n_kv * Hkv * D), 22) : random_bf16(size_t(n_kv * Hkv * D), 1.0, tmp);
  const auto hv = random_bf16(size_t(n_kv * Hkv * D), 1.0, tmp);
  std::vector<float> fq(hq.size()), fk(hk.size()), fv(hv.size());
  for (size_t i = 0; i < hq.size(); ++i) fq[i] = bf16_to_f32(hq[i]);
  for (size_t i = 0; i < hk.size(); ++i) fk[i] = bf16_to_f32(hk[i]), fv[i] = bf16_to_f32(hv[i]);
  const auto inv = inv_freq(500000.0, D);
  const IhipRopeTable table = ihip_rope_table(inv.data(), D, su.n_stream + 2 + n_kv);
  DevBuf q(hq.size() * 2), k(hk.size() * 2), v(hv.size() * 2), cosb(table.cos.size() * 4), sinb(table.sin.size() * 4);
  q.upload(hq);
  k.upload(hk);
  v.upload(hv);
  cosb.upload(table.cos);
  sinb.upload(table.sin);
  IhipPrefillGpuParams p;
  p.q = q.p;
  p.k = k.p;
  p.n_q = su.n_q;
  p.n_kv = n_kv;
  p.q_pos0 = su.q_pos0;
  p.n_head = H;
  p.n_kv_head = Hkv;
  p.head_dim = D;
  p.rope_mode = mode;
  p.rope_tensor_cores = false;  // RoPE modes on the FMA scorer, bit-equal (tensor cores: check_mma_near_ties)
  p.wgmma_scorer = su.wgmma;
  p.n_sink = su.n_sink;
  p.n_stream = su.n_stream;
  p.rope_cos = cosb.as<float>();
  p.rope_sin = sinb.as<float>();
  p.rope_n_pos = table.n_pos;
  DevBuf offb(size_t(n_blk * H * 64) * 4);
  p.offset = su.local ? offb.as<float>() : nullptr;
  // CPU: each block's candidates, stage by stage.
  std::vector<std::vector<int32_t>> cand(static_cast<size_t>(n_blk));
  for (int64_t b = 0; b < n_blk; ++b) {
    const int64_t q_last = su.q_pos0 + std::min(su.n_q, (b + 1) * 64) - 1;
    for (int64_t j = su.n_sink; j < std::max(su.n_sink, q_last - su.n_stream + 1); ++j) cand[size_t(b)].push_back(int32_t(j));
  }
  std::unique_ptr<DevBuf> prev_out, prev_len;
  int64_t prev_cap = 0, pruned = 0, n_cand = int64_t(cand.back().size());
  for (size_t i = 0; i < su.stages.size(); ++i) {
    const IhipStage st = su.stages[i];
    const int64_t max_chunks = std::max<int64_t>(1, (n_cand + st.l_c - 1) / st.l_c);
    auto out = std::make_unique<DevBuf>(size_t(n_blk * st.k) * 4), olen = std::make_unique<DevBuf>(size_t(n_blk) * 4);
    DevBuf scores(size_t(n_blk * Hkv * max_chunks) * 4);
    scores.poison();
    IhipPrefillStage ps;
    ps.l_c = st.l_c;
    ps.k = st.k;
    ps.in = i ? prev_out->as<int32_t>() : nullptr;
    ps.in_len = i ? prev_len->as<int32_t>() : nullptr;
    ps.in_cap = prev_cap;
    ps.out = out->as<int32_t>();
    ps.out_len = olen->as<int32_t>();
    ps.out_cap = st.k;
    ps.scores = scores.as<float>();
    ps.max_chunks = max_chunks;
    ihip_prune_stage_prefill(p, ps);
    device_sync();
    const auto got = out->download<int32_t>(size_t(n_blk * st.k));
    const auto got_len = olen->download<int32_t>(size_t(n_blk));
    const auto got_sc = scores.download<float>(size_t(n_blk * Hkv * max_chunks));
    const auto got_off = su.local ? offb.download<float>(size_t(n_blk * H * 64)) : std::vector<float>{};
    for (int64_t b = 0; b < n_blk; ++b) {
      const int64_t row0 = b * 64, rows = std::min<int64_t>(64, su.n_q - row0);
      auto& cb = cand[size_t(b)];
      const int64_t n_chunk = (int64_t(cb.size()) + st.l_c - 1) / st.l_c;
      std::vector<float> qp;
      ihip_pack_queries(fq.data(), H, Hkv, D, row0, rows, su.q_pos0 + row0, IhipRopeMode(mode), &table, n_chunk,
                        su.n_stream, qp);
      IhipStageInput in{.q = qp.data(), .n_qs = int(group * rows), .k = fk.data(), .k_stride = Hkv * D,
                        .n_kv_head = Hkv, .head_dim = D, .rope = IhipRopeMode(mode), .table = &table};
      std::vector<float> off;
      if (su.local && n_chunk > st.keep_chunks()) {
        const int64_t q_last = su.q_pos0 + row0 + rows - 1;
        ihip_local_offsets(in, {.rows = rows, .pos0 = su.q_pos0 + row0, .n_sink = su.n_sink,
                                .win_begin = std::max(su.n_sink, q_last - su.n_stream + 1), .n_chunk = n_chunk}, off);
        in.offset = off.data();
        for (int g = 0; g < Hkv; ++g)
          ASSERT_EQ(std::memcmp(off.data() + g * in.n_qs, got_off.data() + (b * Hkv + g) * group * 64,
                                size_t(in.n_qs) * 4), 0)
              << "offsets, mode " << mode << " stage " << i << " block " << b << " KV head " << g;
      }
      std::vector<int32_t> want;
      ihip_prune_stage(st, in, cb, want);
      if (n_chunk > st.keep_chunks()) {
        ++pruned;
        const auto sc = ihip_chunk_scores(st, in, cb);
        for (int64_t j = 0; j < n_chunk; ++j) {
          float m = -INFINITY;  // the select kernel's chunk score: max over KV heads
          for (int g = 0; g < Hkv; ++g) m = std::max(m, got_sc[size_t((b * Hkv + g) * max_chunks + j)]);
          ASSERT_EQ(std::memcmp(&m, &sc[size_t(j)], 4), 0)
              << "score of chunk " << j << ", mode " << mode << " stage " << i << " block " << b << ": " << m
              << " vs " << sc[size_t(j)];
        }
      }
      ASSERT_EQ(got_len[size_t(b)], int32_t(want.size())) << "mode " << mode << " stage " << i << " block " << b;
      EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + b * st.k))
          << "mode " << mode << " stage " << i << " block " << b;
      cb = want;
    }
    prev_out = std::move(out);
    prev_len = std::move(olen);
    prev_cap = st.k;
    n_cand = std::min(n_cand, st.k);
  }
  EXPECT_EQ(pruned > 0, su.prunes);
  // The index: sinks + survivors + window per block; the attention over it vs fp64.
  const IhipStage last = su.stages.back();
  IhipPrefillIndexParams ip;
  ip.sel = prev_out->as<int32_t>();
  ip.sel_len = prev_len->as<int32_t>();
  ip.sel_cap = last.k;
  ip.l_c = last.l_c;
  ip.n_q = su.n_q;
  ip.q_pos0 = su.q_pos0;
  ip.n_sink = su.n_sink;
  ip.n_stream = su.n_stream;
  const int64_t R = ip.ranges_per_blk();
  DevBuf rptr(size_t(n_blk + 1) * 8), rg(size_t(n_blk * R) * 8), cptr(size_t(n_blk + 1) * 8);
  ip.range_ptr = rptr.as<int64_t>();
  ip.ranges = rg.as<int32_t>();
  ip.col_ptr = cptr.as<int64_t>();
  ihip_prefill_index(ip);
  device_sync();
  const auto r = rg.download<int32_t>(size_t(n_blk * R * 2));
  const auto rp = rptr.download<int64_t>(size_t(n_blk + 1));
  std::vector<std::vector<int32_t>> keys(static_cast<size_t>(n_blk));
  for (int64_t b = 0; b < n_blk; ++b) {
    const int64_t q_last = su.q_pos0 + std::min(su.n_q, (b + 1) * 64) - 1;
    EXPECT_EQ(rp[size_t(b + 1)], (b + 1) * R);
    std::vector<int32_t> got;
    for (int64_t i = 0; i < R; ++i) {
      const int32_t a = r[size_t(2 * (b * R + i))], e = r[size_t(2 * (b * R + i) + 1)];
      ASSERT_LE(a, e) << "block " << b << " range " << i;
      if (i) {
        ASSERT_LE(r[size_t(2 * (b * R + i - 1))], a) << "ranges sorted by start, block " << b;
      }
      for (int32_t j = a; j < e; ++j) got.push_back(j);
    }
    auto& want = keys[size_t(b)];
    for (int64_t j = 0; j < std::min(su.n_sink, q_last + 1); ++j) want.push_back(int32_t(j));
    want.insert(want.end(), cand[size_t(b)].begin(), cand[size_t(b)].end());
    for (int64_t j = std::max(su.n_sink, q_last - su.n_stream + 1); j <= q_last; ++j) want.push_back(int32_t(j));
    EXPECT_EQ(got, want) << "block " << b;
  }
  DeviceSparseIndex di;
  di.n_index_head = 1;
  di.n_qblk = n_blk;
  di.range_ptr = rptr.as<int64_t>();
  di.ranges = rg.as<int32_t>();
  di.col_ptr = cptr.as<int64_t>();
  di.n_ranges = n_blk * R;
  DevBuf o(size_t(su.n_q * H * D) * 2), ws(sparse_attention_workspace_bytes(di) + 16);
  SparseAttnParams sp;
  sp.q = q.p;
  sp.k = k.p;
  sp.v = v.p;
  sp.o = o.p;
  sp.n_q = su.n_q;
  sp.n_kv = n_kv;
  sp.n_head = H;
  sp.n_kv_head = Hkv;
  sp.head_dim = D;
  sp.q_pos0 = su.q_pos0;
  sp.index = di;
  sp.workspace = ws.p;
  sp.workspace_bytes = ws.bytes;
  sparse_attention(sp);
  device_sync();
  const auto got_o = to_double(o.download<uint16_t>(size_t(su.n_q * H * D)));
  std::vector<double> vd(fv.begin(), fv.end());
  const auto ref = masked_attention(fq, fk, fv, su, keys);
  const auto err = compare(got_o, ref, 5e-3 * max_abs(vd), 1e-2);
  EXPECT_EQ(err.n_bad, 0) << err.str();
  EXPECT_EQ(err.n_nan, 0) << err.str();
}

TEST(IhipGpuPrefill, StagesIndexAndAttentionEqualTheCpuReferenceInEveryRopeMode) {
  LC_REQUIRE_GPU();
  PrefillCase su;
  for (int mode : {0, 1, 2}) {
    SCOPED_TRACE(mode);
    check_prefill(su, mode);
  }
}

TEST(IhipGpuPrefill, Llama3HeadsFillOneQueryTile) {  // 32 / 8 heads: 4 x 64 = 256 queries per KV head
  LC_REQUIRE_GPU();
  PrefillCase su;
  su.H = 32;
  su.Hkv = 8;
  su.n_q = 130;
  su.q_pos0 = 40000;
  su.stages = {{256, 8192}, {32, 2048}, {8, 512}};
  check_prefill(su, 0);
  check_prefill(su, 1);
}

TEST(IhipGpuPrefill, WideGroupsSpanSeveralQueryTiles) {  // 16 heads on 1 KV head: 1024 queries per probe
  LC_REQUIRE_GPU();
  PrefillCase su;
  su.H = 16;
  su.Hkv = 1;
  su.n_q = 100;
  su.q_pos0 = 12000;
  su.stages = {{64, 2048}, {16, 512}};
  check_prefill(su, 0);
  check_prefill(su, 2);
}

TEST(IhipGpuPrefill, ChunkAtTheStartKeepsEverything) {  // few candidates: every stage keeps them all
  LC_REQUIRE_GPU();
  PrefillCase su;
  su.n_q = 1500;
  su.q_pos0 = 0;
  su.prunes = false;
  check_prefill(su, 0);
}

// head_dim 256: gemma-3's 4 query heads on 1 KV head (RoPE none on tensor cores, the other modes
// over two 128-query fp32 tiles), and 16 heads on 1 KV head (eight tiles).
TEST(IhipGpuPrefill, HeadDim256InEveryRopeMode) {
  LC_REQUIRE_GPU();
  PrefillCase su;
  su.D = 256;
  su.H = 4;
  su.Hkv = 1;
  su.n_q = 150;
  su.q_pos0 = 16000;
  for (int mode : {0, 1, 2}) {
    SCOPED_TRACE(mode);
    check_prefill(su, mode);
  }
  su.H = 16;
  su.n_q = 100;
  su.q_pos0 = 12000;
  su.stages = {{64, 2048}, {16, 512}};
  check_prefill(su, 0);
}

// head_dim 64: SmolLM2-135M's 9 query heads on 3 KV heads (RoPE none on tensor cores, 192 queries
// a tile; the other modes on the fp32 path, the rotate-half pairs exchanged by a shuffle), and 9
// heads on 1 KV head (RoPE none over three fp32 query tiles).
TEST(IhipGpuPrefill, HeadDim64SmolLM2HeadsInEveryRopeMode) {
  LC_REQUIRE_GPU();
  PrefillCase su;
  su.D = 64;
  su.H = 9;
  su.Hkv = 3;
  su.n_q = 150;
  su.q_pos0 = 16000;
  for (int mode : {0, 1, 2}) {
    SCOPED_TRACE(mode);
    check_prefill(su, mode);
  }
  su.Hkv = 1;
  su.n_q = 100;
  su.q_pos0 = 12000;
  su.stages = {{64, 2048}, {16, 512}};
  check_prefill(su, 0);
}

// Tensor-core scores (RoPE none) on random inputs, judged against an fp64 oracle: per (block, KV
// head, chunk) the bisection is replayed in fp64, following both halves where left and right are
// within the fp32 summation bound (a near tie: either choice is right), and the GPU's score must
// match, within that bound, the fp64 score (the largest probe) of one of those paths. The
// kept list must be the top-K of the GPU's own scores by the reference's rule (score desc, earlier
// chunk), entries in position order.
struct MmaCase {  // a prefill chunk of n_q queries after q_pos0 keys, one pruning stage
  int H, Hkv, D;
  int64_t n_q = 130, q_pos0 = 16000;
  IhipStage st{64, 2048};
  int mode = 0;  // IhipRopeMode: with RoPE the oracle's operands are rotated in fp32, then rounded to bf16
  bool wgmma = true;  // IhipPrefillGpuParams::wgmma_scorer (RoPE none)
  // IhipPrefillGpuParams::l2_prefetch; on (not the default) the scores are also compared bit for
  // bit with the default's on the same inputs (the same probes and dot order).
  bool prefetch = false;
  // rank=local (IhipPrefillGpuParams::offset): the offsets bit-equal to ihip_local_offsets (on the
  // fp32 rotated operands, as the CPU), and the oracle's probe is its fp64 dot minus the row's offset.
  bool local = false;
};
void check_mma_near_ties(const MmaCase& mc) {
  const int H = mc.H, Hkv = mc.Hkv, D = mc.D, group = H / Hkv;
  const int64_t n_q = mc.n_q, q_pos0 = mc.q_pos0, n_sink = 256, n_stream = 1024, n_kv = q_pos0 + n_q;
  const int64_t n_blk = (n_q + 63) / 64;
  const IhipStage st = mc.st;
  std::vector<double> tmp;
  const auto hq = random_bf16(size_t(n_q * H * D), 1.0, tmp);
  const auto hk = random_bf16(size_t(n_kv * Hkv * D), 1.0, tmp);
  std::vector<float> fq(hq.size()), fk(hk.size());
  for (size_t i = 0; i < hq.size(); ++i) fq[i] = bf16_to_f32(hq[i]);
  for (size_t i = 0; i < hk.size(); ++i) fk[i] = bf16_to_f32(hk[i]);
  DevBuf q(hq.size() * 2), k(hk.size() * 2);
  const IhipRopeMode mode = IhipRopeMode(mc.mode);
  const auto inv = inv_freq(500000.0, D);
  const IhipRopeTable table = ihip_rope_table(inv.data(), D, n_stream + 2 + n_kv);
  DevBuf cosb(table.cos.size() * 4), sinb(table.sin.size() * 4);
  q.upload(hq);
  k.upload(hk);
  cosb.upload(table.cos);
  sinb.upload(table.sin);
  IhipPrefillGpuParams p;
  p.q = q.p;
  p.k = k.p;
  p.n_q = n_q;
  p.n_kv = n_kv;
  p.q_pos0 = q_pos0;
  p.n_head = H;
  p.n_kv_head = Hkv;
  p.head_dim = D;
  p.rope_mode = mc.mode;
  p.wgmma_scorer = mc.wgmma;
  p.l2_prefetch = mc.prefetch;
  p.n_sink = n_sink;
  p.n_stream = n_stream;
  p.rope_cos = cosb.as<float>();
  p.rope_sin = sinb.as<float>();
  p.rope_n_pos = table.n_pos;
  DevBuf offb(size_t(n_blk * H * 64) * 4);
  p.offset = mc.local ? offb.as<float>() : nullptr;
  const int64_t max_chunks = (n_kv + st.l_c - 1) / st.l_c;
  DevBuf out(size_t(n_blk * st.k) * 4), olen(size_t(n_blk) * 4), scores(size_t(n_blk * Hkv * max_chunks) * 4);
  scores.poison();
  IhipPrefillStage ps;
  ps.l_c = st.l_c;
  ps.k = st.k;
  ps.out = out.as<int32_t>();
  ps.out_len = olen.as<int32_t>();
  ps.out_cap = st.k;
  ps.scores = scores.as<float>();
  ps.max_chunks = max_chunks;
  ihip_prune_stage_prefill(p, ps);
  device_sync();
  const auto got = out.download<int32_t>(size_t(n_blk * st.k));
  const auto got_len = olen.download<int32_t>(size_t(n_blk));
  const auto got_sc = scores.download<float>(size_t(n_blk * Hkv * max_chunks));
  const auto got_off = mc.local ? offb.download<float>(size_t(n_blk * H * 64)) : std::vector<float>{};
  if (mc.prefetch) {  // the default (no prefetch) on the same inputs: the same bits
    IhipPrefillGpuParams p2 = p;
    p2.l2_prefetch = false;
    DevBuf scores2(size_t(n_blk * Hkv * max_chunks) * 4);
    scores2.poison();
    IhipPrefillStage ps2 = ps;
    ps2.scores = scores2.as<float>();
    ihip_score_prefill(p2, ps2);
    device_sync();
    const auto want_sc = scores2.download<float>(got_sc.size());
    ASSERT_EQ(0, std::memcmp(want_sc.data(), got_sc.data(), got_sc.size() * 4))
        << "l2_prefetch on: scores differ from the default's";
  }
  int64_t near_ties = 0, judged = 0;
  for (int64_t b = 0; b < n_blk; ++b) {
    const int64_t row0 = b * 64, rows = std::min<int64_t>(64, n_q - row0), q_last = q_pos0 + row0 + rows - 1;
    const int64_t first = n_sink, n_cand = std::max(n_sink, q_last - n_stream + 1) - n_sink;
    const int64_t n_chunk = (n_cand + st.l_c - 1) / st.l_c;
    ASSERT_GT(n_chunk, st.keep_chunks());
    std::vector<float> chunk_score(static_cast<size_t>(n_chunk), -INFINITY);
    // The tensor cores' operands: the queries rotated at their mode's position (ihip_pack_queries:
    // [g][t = h' * rows + r][D]) and rounded to bf16 (RoPE none: as stored).
    std::vector<float> qr;
    ihip_pack_queries(fq.data(), H, Hkv, D, row0, rows, q_pos0 + row0, mode, &table, n_chunk, n_stream, qr);
    // rank=local: the CPU's offsets [g][t] (fp32 operands), which the GPU's must equal bit for bit.
    std::vector<float> off;
    if (mc.local) {
      IhipStageInput in;
      in.q = qr.data();
      in.n_qs = int(group * rows);
      in.k = fk.data();
      in.k_stride = int64_t(Hkv) * D;
      in.n_kv_head = Hkv;
      in.head_dim = D;
      in.rope = mode;
      in.table = &table;
      ihip_local_offsets(in, {.rows = rows, .pos0 = q_pos0 + row0, .n_sink = n_sink,
                              .win_begin = std::max(n_sink, q_last - n_stream + 1), .n_chunk = n_chunk}, off);
      for (int g = 0; g < Hkv; ++g)
        ASSERT_EQ(0, std::memcmp(off.data() + g * group * rows, got_off.data() + (b * Hkv + g) * group * 64,
                                 size_t(group * rows) * 4))
            << "offsets, block " << b << " KV head " << g;
    }
    for (float& x : qr) x = bf16_to_f32(f32_to_bf16(x));
    for (int g = 0; g < Hkv; ++g) {
      // fp64 score of key e rotated at kpos (max over the group's heads x the block's rows; rank=local:
      // each dot minus its row's offset) and its |q|.|k| (+ |offset|) bound.
      std::map<std::pair<int64_t, int64_t>, std::pair<double, double>> memo;  // (key, kpos) -> (score, bound)
      std::vector<float> kr(static_cast<size_t>(D));
      auto oracle = [&](int64_t e, int64_t kpos, double& bound) {
        if (const auto it = memo.find({e, kpos}); it != memo.end())
          return bound = it->second.second, it->second.first;
        double best = -INFINITY;
        bound = 0;
        const float* kk = fk.data() + (e * Hkv + g) * D;
        if (mode != IhipRopeMode::none) {
          ihip_rotate(kk, kr.data(), D, table, kpos);
          for (float& x : kr) x = bf16_to_f32(f32_to_bf16(x));
          kk = kr.data();
        }
        for (int64_t t = 0; t < group * rows; ++t) {
          const float* qq = qr.data() + (g * group * rows + t) * D;
          double d = 0, a = 0;
          for (int i = 0; i < D; ++i) d += double(qq[i]) * kk[i], a += std::fabs(double(qq[i]) * kk[i]);
          if (mc.local) {
            const double o = off[size_t(g * group * rows + t)];
            d -= o;
            a += std::fabs(o);
          }
          best = std::max(best, d);
          bound = std::max(bound, a);
        }
        memo[{e, kpos}] = {best, bound};
        return best;
      };
      // fp32 sums of D exact products: |error| <= D * 2^-24 * sum |q_i k_i|; twice that as the margin.
      const auto tol = [D](double bound) { return 2.0 * D * std::ldexp(1.0, -24) * bound; };
      for (int64_t j = 0; j < n_chunk; ++j) {
        const int64_t c0 = first + j * st.l_c, len = std::min<int64_t>(st.l_c, n_cand - j * st.l_c);
        const float gpu = got_sc[size_t((b * Hkv + g) * max_chunks + j)];
        const int64_t pos_left = ihip_key_pos(mode, 0, j), pos_right = ihip_key_pos(mode, 1, j);
        bool ok = false;
        // best: the path's largest fp64 probe so far; err: the largest tolerance of its probes (the
        // fp32 max of the probes is within it of the fp64 max).
        std::function<void(int64_t, int64_t, double, double)> walk = [&](int64_t lo, int64_t hi, double best,
                                                                          double err) {
          if (ok) return;
          if (hi - lo <= 1) {
            // the representative at both positions (relative RoPE), or a one-entry chunk's own probe
            for (const int64_t kpos : {pos_right, pos_left})
              if (pos_left != pos_right || (len == 1 && kpos == pos_right)) {
                double bound;
                best = std::max(best, oracle(c0 + lo, kpos, bound));
                err = std::max(err, tol(bound));
              }
            ok = std::fabs(double(gpu) - best) <= err;
            return;
          }
          // ihip_select_rep: the middle key of each half; the left half only when left > right.
          const int64_t mid = lo + (hi - lo) / 2;
          double bl, br;
          const double left = oracle(c0 + lo + (mid - lo) / 2, pos_left, bl);
          const double right = oracle(c0 + mid + (hi - mid) / 2, pos_right, br);
          const double margin = tol(bl) + tol(br);
          best = std::max(best, std::max(left, right));
          err = std::max(err, std::max(tol(bl), tol(br)));
          if (left - right >= -margin) walk(lo, mid, best, err);  // left > right, or a near tie
          if (right - left >= -margin) {
            if (std::fabs(left - right) <= margin) ++near_ties;
            walk(mid, hi, best, err);
          }
        };
        walk(0, len, -INFINITY, 0.0);
        ++judged;
        ASSERT_TRUE(ok) << "block " << b << " KV head " << g << " chunk " << j << ": GPU score " << gpu
                        << " is no fp64 bisection outcome";
        chunk_score[size_t(j)] = std::max(chunk_score[size_t(j)], gpu);
      }
    }
    // The list: the top-K chunks of the GPU's scores (score desc, earlier chunk), in position order.
    std::vector<int64_t> order(static_cast<size_t>(n_chunk));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t x, int64_t y) { return chunk_score[size_t(x)] > chunk_score[size_t(y)]; });
    order.resize(size_t(st.keep_chunks()));
    std::sort(order.begin(), order.end());
    std::vector<int32_t> want;
    for (int64_t j : order)
      for (int64_t e = j * st.l_c; e < std::min(n_cand, (j + 1) * st.l_c); ++e) want.push_back(int32_t(first + e));
    ASSERT_EQ(got_len[size_t(b)], int32_t(want.size())) << "block " << b;
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + b * st.k)) << "block " << b;
  }
  std::printf("[ihip mma d=%d rope %d %s prefetch %d rank %s] %lld chunk scores judged, %lld near-tie branches "
              "followed\n",
              D, mc.mode, mc.mode == 0 && mc.wgmma ? "wgmma" : "mma.sync", int(mc.prefetch), mc.local ? "local" : "paper",
              (long long)judged, (long long)near_ties);
}

TEST(IhipGpuPrefill, TensorCoreScoresFollowTheFp64BisectionUpToNearTies) {
  LC_REQUIRE_GPU();
  check_mma_near_ties({32, 8, 128});  // Llama-3-8B's heads
  check_mma_near_ties({9, 3, 64});    // SmolLM2-135M's
}

// Enough (block, KV head) pairs (40 x 16 = 640, over 4 CTAs per SM of an H100's 132) that each
// score CTA loops over several 32-chunk groups (74 to 230 chunks of 16 per block) with the query
// fragments it loaded once.
TEST(IhipGpuPrefill, TensorCoreCtasLoopOverChunkGroups) {
  LC_REQUIRE_GPU();
  check_mma_near_ties({16, 16, 64, 64 * 40, 2400, {16, 512}});
}

// RoPE relative and chunk-indexed on tensor cores (rope_tensor_cores, the default where a KV head's
// block queries fit one tile): gemma-3's 4 / 1 heads at head_dim 256, Llama-3-8B's 32 / 8 at 128,
// SmolLM2-135M's 9 / 3 at 64 (the key's rotate-half partners in the other half of its 8 gather
// lanes), each judged against the fp64 bisection replay on the same bf16-rounded rotated operands.
// Bit-equal lists on exact-dot inputs do not carry over: rotated values are not small integers.
TEST(IhipGpuPrefill, TensorCoreRopeScoresFollowTheFp64BisectionUpToNearTies) {
  LC_REQUIRE_GPU();
  for (const int mode : {1, 2}) {
    SCOPED_TRACE(mode);
    check_mma_near_ties({4, 1, 256, 130, 16000, {64, 2048}, mode});
    check_mma_near_ties({32, 8, 128, 130, 16000, {64, 2048}, mode});
    check_mma_near_ties({9, 3, 64, 130, 16000, {64, 2048}, mode});
  }
}

// Chunks of 16 after a short prefix (chunk-indexed key positions 0 .. 57 over two 32-chunk
// groups, the last chunk short), and a one-entry last chunk (321 candidates) in the relative mode
// (its representative probed at both positions).
TEST(IhipGpuPrefill, TensorCoreRopeShortChunksAndOneEntryChunk) {
  LC_REQUIRE_GPU();
  check_mma_near_ties({4, 1, 256, 100, 2100, {16, 256}, 2});
  check_mma_near_ties({4, 1, 128, 64, 1537, {16, 128}, 1});  // q_last 1600: 1600 - 1024 + 1 - 256 = 321
}

// The pipelined RoPE-none scorer's lane bookkeeping: 640 (block, KV head) pairs, one CTA each,
// walking 3 to 8 chunk groups in two lanes (odd counts leave one lane stepping alone at the end),
// every block's last chunk one entry long (q_pos0 2401: 1185 + 64 b candidates, 1 mod 16), so
// the group holding it takes the extra representative step while the other lane bisects; and
// one group only (the second lane idle from the start) with a one-entry chunk at head_dim 128.
TEST(IhipGpuPrefill, TensorCorePipelineLanesAndOneEntryChunks) {
  LC_REQUIRE_GPU();
  check_mma_near_ties({16, 16, 64, 64 * 40, 2401, {16, 512}});
  check_mma_near_ties({4, 1, 128, 64, 1537, {16, 128}});  // 321 candidates: 21 chunks, the last one entry
}

// The pipelined RoPE-none scorers with the L2 prefetch on (IhipPrefillGpuParams::l2_prefetch, off
// by default), judged against the fp64 replay and bit-equal to the default's scores on the same
// inputs: wgmma at head_dim 128 (32 / 8 heads: every row of the tile a query, and a 2-row last
// block), 256 and 64, one group with a one-entry chunk, and mma.sync at 128.
TEST(IhipGpuPrefill, TensorCorePipelineWithL2PrefetchEqualsWithout) {
  LC_REQUIRE_GPU();
  MmaCase sync{32, 8, 128};
  sync.wgmma = false;
  for (MmaCase mc : {MmaCase{32, 8, 128}, MmaCase{4, 1, 256}, MmaCase{9, 3, 64}, MmaCase{4, 1, 128, 64, 1537, {16, 128}},
                     sync}) {
    mc.prefetch = true;
    check_mma_near_ties(mc);
  }
}

// ---- rank=local (IhipStageGpuParams / IhipPrefillGpuParams::offset): each stage's offsets
// bit-equal to ihip_local_offsets, then the chunk scores bit-equal and the lists equal to the CPU
// twin with IhipStageInput::offset, in every RoPE mode.

// Decode: two sequences (with RoPE none and relative one of all-equal keys: ties; chunk-indexed
// rotates chunk j's keys at j, so equal keys do not tie there), head_dim 128, 64 and 256, bf16 and
// fp8 keys.
TEST(IhipGpuRankLocal, DecodeOffsetsScoresAndListsEqualTheCpuTwin) {
  LC_REQUIRE_GPU();
  for (const int D : {128, 64, 256})
    for (const bool fp8 : {false, true}) {
      ChainCase su;
      su.D = D;
      su.H = D == 64 ? 9 : 8;
      su.Hkv = D == 64 ? 3 : 2;
      su.lens = {9000, 6100};
      su.stages = {{64, 2048}, {16, 512}, {4, 128}};
      su.fp8 = fp8;
      su.local = true;
      for (const int mode : {0, 1, 2}) {
        SCOPED_TRACE(testing::Message() << "D " << D << " fp8 " << fp8 << " mode " << mode);
        su.equal_keys_seq1 = mode != 2;
        check_chain(su, mode);
      }
    }
}

// Prefill: the FMA scorer with offsets (RoPE modes with rope_tensor_cores off; 16 heads on one
// KV head: several query tiles), RoPE none on the tensor cores (small-integer inputs: exact dots and
// offsets, so bit-equal), every RoPE mode; groups of 4 (one query tile) and 16; head_dim 64 and 256.
TEST(IhipGpuRankLocal, PrefillOffsetsScoresListsAndAttentionEqualTheCpuTwin) {
  LC_REQUIRE_GPU();
  PrefillCase su;
  su.local = true;
  for (const int mode : {0, 1, 2}) {
    SCOPED_TRACE(mode);
    check_prefill(su, mode);
  }
  PrefillCase wide = su;
  wide.H = 16, wide.Hkv = 1, wide.n_q = 100, wide.q_pos0 = 12000, wide.stages = {{64, 2048}, {16, 512}};
  check_prefill(wide, 0);
  check_prefill(wide, 2);
  PrefillCase d64 = su;
  d64.D = 64, d64.H = 9, d64.Hkv = 3;
  check_prefill(d64, 1);
  PrefillCase d256 = su;
  d256.D = 256, d256.H = 4, d256.Hkv = 1;
  check_prefill(d256, 2);
}

// rank=local routes as the paper's rule: tensor cores where a KV head's block queries fit one tile
// (the engine's default model, SmolLM2-135M's 9 / 3 heads, and groups of 4), in RoPE none and
// (rope_tensor_cores) the RoPE modes; the FMA scorer for groups of 16 or rope_tensor_cores off.
TEST(IhipGpuRankLocal, RoutesToTheTensorCoresAsThePaperRule) {
  float workspace = 0.f;  // never read: the routing looks at the pointer only
  for (const bool local : {false, true}) {
    SCOPED_TRACE(local ? "rank=local" : "paper");
    IhipPrefillGpuParams p;
    p.offset = local ? &workspace : nullptr;
    for (const int mode : {0, 1, 2}) {
      p.rope_mode = mode;
      p.n_head = 9, p.n_kv_head = 3;
      EXPECT_TRUE(prefill_uses_mma(p)) << "mode " << mode;
      p.n_head = 32, p.n_kv_head = 8;
      EXPECT_TRUE(prefill_uses_mma(p)) << "mode " << mode;
      p.n_head = 16, p.n_kv_head = 1;
      EXPECT_FALSE(prefill_uses_mma(p)) << "mode " << mode;
      p.n_head = 9, p.n_kv_head = 3, p.rope_tensor_cores = false;
      EXPECT_EQ(prefill_uses_mma(p), mode == 0) << "mode " << mode;
      p.rope_tensor_cores = true;
    }
  }
}

// rank=local on the tensor cores (each row's accumulators start at minus its offset), random
// inputs judged against the fp64 replay minus the CPU's offsets (the GPU's bit-equal to them):
// RoPE relative and chunk-indexed (the engine's rope=on; mma.sync on rotated bf16 operands) and
// none (wgmma and mma.sync), at head_dim 64 / 128 / 256 with groups of 3 / 4 (one query tile;
// larger groups score on the FMA path: IhipGpuRankLocal.PrefillOffsets...), a 2-row last block,
// CTAs looping over chunk groups, and a one-entry last chunk.
TEST(IhipGpuRankLocal, TensorCoreScoresFollowTheFp64BisectionUpToNearTies) {
  LC_REQUIRE_GPU();
  for (const int mode : {1, 2, 0})
    for (const bool wgmma : {true, false}) {
      if (mode != 0 && !wgmma) continue;  // wgmma_scorer is RoPE none's switch
      SCOPED_TRACE(testing::Message() << "mode " << mode << (wgmma ? " wgmma" : " mma.sync"));
      for (MmaCase mc : {MmaCase{9, 3, 64}, MmaCase{32, 8, 128}, MmaCase{4, 1, 256}, MmaCase{4, 1, 128, 64, 1537, {16, 128}},
                         MmaCase{16, 16, 64, 64 * 40, 2401, {16, 512}}}) {
        if (mc.n_q > 130 && mode != 0) continue;  // the pipelined scorer's lanes (the CPU offsets cost ~1 s a mode)
        mc.mode = mode;
        mc.wgmma = wgmma;
        mc.local = true;
        check_mma_near_ties(mc);
      }
    }
}

// The wgmma scorer (RoPE none's default: a warpgroup's 128 queries against each probe key read
// once) and the mma.sync one it replaces (wgmma_scorer off) on the same cases: random inputs judged
// against the fp64 replay at head_dim 256 / 128 / 64, with groups that fill the tile (4 / 1, 32 / 8),
// leave warpgroup 1 without rows (8 / 8: 64 queries a KV head) or half of them (9 / 3: 192), and a
// 2-row last block (n_q 130); and the exact-dot inputs, where both are bit-equal to the CPU
// reference. wgmma sums a dot's products in another fp32 order than mma.sync, so on random inputs
// the two kernels' scores may differ in the last bits: the judged tests allow either.
TEST(IhipGpuPrefill, TensorCoreWgmmaAndMmaSyncScorersAtEveryHeadDim) {
  LC_REQUIRE_GPU();
  for (const bool wgmma : {true, false}) {
    SCOPED_TRACE(wgmma ? "wgmma" : "mma.sync");
    for (MmaCase mc : {MmaCase{4, 1, 256}, MmaCase{32, 8, 128}, MmaCase{8, 8, 128}, MmaCase{9, 3, 64}}) {
      mc.wgmma = wgmma;
      check_mma_near_ties(mc);
    }
    PrefillCase su;
    su.wgmma = wgmma;
    su.H = 32, su.Hkv = 8, su.n_q = 130, su.q_pos0 = 40000;
    su.stages = {{256, 8192}, {32, 2048}, {8, 512}};
    check_prefill(su, 0);
    su = PrefillCase{};
    su.wgmma = wgmma;
    su.D = 256, su.H = 4, su.Hkv = 1, su.n_q = 150, su.q_pos0 = 16000;
    check_prefill(su, 0);
    su.D = 64, su.H = 9, su.Hkv = 3;
    check_prefill(su, 0);
  }
}

}  // namespace
}  // namespace longctx::cuda

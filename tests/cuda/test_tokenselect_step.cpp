// test_tokenselect_step.cpp (tests/cuda): TokenSelect's GPU step (methods/tokenselect/
// tokenselect_gpu.h) against the CPU method on the same bf16 inputs, fresh random data per run:
//   - compact_kv equals gather + kernels/ref rope_apply_ref (K rotated at 0..L-1, V copied);
//   - selection_query equals the CPU's rotated mean of the chunk's queries;
//   - the step's key set equals TokenSelectMethod::select_keys (fp64 votes decide near-ties at
//     the k-th place, where fp32 may order either way), for prefill chunks and decode steps,
//     and the whole context when it fits the budget;
//   - its output equals attend_compacted_ref (the CPU's dense attention over the same gathered,
//     re-rotated keys), within bf16 tolerance;
//   - the selection cache's cosine (kernels/cuda/selection_cache.h) equals an fp64 oracle;
//   - the same at head_dim 256 (Gemma 3's global layers: 4 query / 1 KV head), and over an fp8
//     e4m3 pool (the fp8 KV cache: one K and one V scale) against the CPU method over the
//     dequantized keys and values (stored * scale, exact in fp32);
//   - fp16 scores (TokenSelectGpuShape::scores): the key set vs fp64 up to fp16's near-ties, and
//     its overlap with the fp32 scores' set (printed, >= 90%).
// Needs a Hopper GPU (skips otherwise); links longctx_methods_gpu.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "kernels/cuda/compact_kv.h"
#include "kernels/cuda/selection_cache.h"
#include "kernels/ref/fp8_e4m3.h"
#include "kernels/ref/ops.h"
#include "methods/run_cpu.h"
#include "methods/tokenselect/tokenselect_gpu.h"
#include "methods/tokenselect/tokenselect_method.h"
#include "test_util.h"
#include "util/thread_pool.h"

namespace longctx::cuda::test {
namespace {

// One layer's cache: a shuffled pool read through a page-size-1 slot table, plus the chunk's
// queries; every tensor as bf16 for the device (or the pools as e4m3 with one scale each: the
// fp8 cache) and as the same values in fp32 for the CPU.
struct Layer {
  int H = 0, Hkv = 0, D = 0;
  int64_t n_kv = 0, C = 0;
  bool fp8 = false;
  std::vector<uint16_t> q_b, k_b, v_b;   // q [C, H, D]; pools [n_kv, Hkv, D] (row = slot)
  std::vector<uint8_t> k_8, v_8;         // fp8: the pools as e4m3 (real = stored * k_scale / v_scale)
  float k_scale = 1.f, v_scale = 1.f;
  std::vector<float> q, k_pos, v_pos;    // q, and K/V by position [n_kv, Hkv, D]
  std::vector<int32_t> slots;            // position -> pool row
  std::vector<float> inv_freq;           // [D / 2]
};

std::vector<float> as_float(const std::vector<double>& d) { return {d.begin(), d.end()}; }

// x ~ N(0, 1) stored as e4m3 with the fp8 cache's rule (scale = amax / 448, gpu/kv_fp8.h); vals
// gets the dequantized values (stored * scale), the ones both sides must use.
std::vector<uint8_t> random_e4m3(size_t n, float& scale, std::vector<double>& vals) {
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> x(n);
  float amax = 0.f;
  for (auto& v : x) amax = std::max(amax, std::fabs(v = dist(rng())));
  scale = fp8_scale_for_amax(amax);
  std::vector<uint8_t> b(n);
  vals.resize(n);
  for (size_t i = 0; i < n; ++i) {
    b[i] = f32_to_e4m3(x[i] / scale);
    vals[i] = double(e4m3_to_f32(b[i])) * scale;
  }
  return b;
}

Layer make_layer(int H, int Hkv, int D, int64_t n_kv, int64_t C, bool fp8 = false) {
  Layer l;
  l.H = H, l.Hkv = Hkv, l.D = D, l.n_kv = n_kv, l.C = C, l.fp8 = fp8;
  std::vector<double> qd, kd, vd;
  l.q_b = random_bf16(size_t(C * H * D), 1.0, qd);
  if (fp8) {
    l.k_8 = random_e4m3(size_t(n_kv * Hkv * D), l.k_scale, kd);
    l.v_8 = random_e4m3(size_t(n_kv * Hkv * D), l.v_scale, vd);
  } else {
    l.k_b = random_bf16(size_t(n_kv * Hkv * D), 1.0, kd);
    l.v_b = random_bf16(size_t(n_kv * Hkv * D), 1.0, vd);
  }
  l.q = as_float(qd);
  l.slots.resize(size_t(n_kv));
  std::iota(l.slots.begin(), l.slots.end(), 0);
  std::shuffle(l.slots.begin(), l.slots.end(), rng());
  const int64_t W = int64_t(Hkv) * D;
  l.k_pos.resize(size_t(n_kv * W));
  l.v_pos.resize(size_t(n_kv * W));
  for (int64_t p = 0; p < n_kv; ++p)
    for (int64_t e = 0; e < W; ++e) {
      l.k_pos[size_t(p * W + e)] = float(kd[size_t(l.slots[size_t(p)] * W + e)]);
      l.v_pos[size_t(p * W + e)] = float(vd[size_t(l.slots[size_t(p)] * W + e)]);
    }
  l.inv_freq.resize(size_t(D / 2));
  for (int i = 0; i < D / 2; ++i) l.inv_freq[size_t(i)] = 1.f / std::pow(500000.f, float(2 * i) / float(D));
  return l;
}

struct DevLayer {
  DevBuf q, k, v, slots, inv_freq, o;
  explicit DevLayer(const Layer& l)
      : q(l.q_b.size() * 2), k(l.fp8 ? l.k_8.size() : l.k_b.size() * 2), v(l.fp8 ? l.v_8.size() : l.v_b.size() * 2),
        slots(l.slots.size() * 4), inv_freq(l.inv_freq.size() * 4), o(l.q_b.size() * 2) {
    q.upload(l.q_b);
    if (l.fp8) {
      k.upload(l.k_8);
      v.upload(l.v_8);
    } else {
      k.upload(l.k_b);
      v.upload(l.v_b);
    }
    slots.upload(l.slots);
    inv_freq.upload(l.inv_freq);
  }
  TokenSelectGpuInput input(const Layer& l) const {
    return {.q = q.p, .n_rows = l.C, .n_kv = l.n_kv, .k_pool = k.p, .v_pool = v.p, .slots = slots.as<int32_t>(),
            .inv_freq = inv_freq.as<float>(), .o = o.p, .pool_fp8 = l.fp8, .k_scale = l.k_scale,
            .v_scale = l.v_scale};
  }
};

AttnParams cpu_params(const Layer& l, std::vector<float>& o) {
  o.assign(l.q.size(), 0.f);
  AttnParams p;
  p.q = l.q.data();
  p.k = l.k_pos.data();
  p.v = l.v_pos.data();
  p.o = o.data();
  p.n_q = l.C;
  p.n_kv = l.n_kv;
  p.n_head = l.H;
  p.n_kv_head = l.Hkv;
  p.head_dim = l.D;
  p.q_pos0 = l.n_kv - l.C;
  p.scale = 1.f / std::sqrt(float(l.D));
  p.layer = 0;
  return p;
}

TEST(TokenSelectCompactKv, EqualsGatherThenRope) {
  LC_REQUIRE_GPU();
  ThreadPool pool(2);
  for (bool fp8 : {false, true})
    for (int D : {64, 128, 256}) {
      const Layer l = make_layer(8, 2, D, 3000, 1, fp8);
      const DevLayer d(l);
      std::vector<int32_t> keys(700);
      std::uniform_int_distribution<int32_t> pick(0, int32_t(l.n_kv - 1));
      for (auto& x : keys) x = pick(rng());
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
      const int64_t L = int64_t(keys.size()), W = int64_t(l.Hkv) * D;
      DevBuf dkeys(keys.size() * 4), ko(size_t(L * W) * 2), vo(size_t(L * W) * 2);
      dkeys.upload(keys);
      compact_kv({.k_pool = d.k.p, .v_pool = d.v.p, .slots = d.slots.as<int32_t>(), .keys = dkeys.as<int32_t>(),
                  .n_keys = L, .k_out = ko.p, .v_out = vo.p, .inv_freq = d.inv_freq.as<float>(), .n_kv_head = l.Hkv,
                  .head_dim = D, .fp8 = fp8, .k_scale = l.k_scale, .v_scale = l.v_scale});
      std::vector<float> k_ref(size_t(L * W)), v_ref(size_t(L * W));
      for (int64_t j = 0; j < L; ++j)
        for (int64_t e = 0; e < W; ++e) {
          k_ref[size_t(j * W + e)] = l.k_pos[size_t(keys[size_t(j)] * W + e)];
          v_ref[size_t(j * W + e)] = l.v_pos[size_t(keys[size_t(j)] * W + e)];
        }
      rope_apply_ref(k_ref.data(), L, l.Hkv, D, 0, l.inv_freq.data(), pool);
      // K: fp32 rotation rounded to bf16 once (half an ulp, 2^-9 relative), plus sincos differences.
      const auto ek = compare(to_double(ko.download<uint16_t>(size_t(L * W))),
                              std::vector<double>(k_ref.begin(), k_ref.end()), 1e-5, 5e-3);
      EXPECT_EQ(ek.n_bad, 0) << "K, D " << D << (fp8 ? " fp8" : "") << ": " << ek.str();
      const auto v_got = to_double(vo.download<uint16_t>(size_t(L * W)));
      if (!fp8) {
        EXPECT_EQ(v_got, std::vector<double>(v_ref.begin(), v_ref.end())) << "V is copied bit for bit, D " << D;
      } else {  // stored * scale (fp32) rounded to bf16 once: at most half an ulp, 2^-8 of the value
        const auto ev = compare(v_got, std::vector<double>(v_ref.begin(), v_ref.end()), 0.0, 1.0 / 256 + 1e-6);
        EXPECT_EQ(ev.n_bad, 0) << "V widened from e4m3, D " << D << ": " << ev.str();
      }
    }
}

TEST(TokenSelectSelectionCache, CosineEqualsFp64) {
  LC_REQUIRE_GPU();
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t n : {int64_t(1), int64_t(300), int64_t(32 * 128)}) {
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    for (size_t i = 0; i < a.size(); ++i) a[i] = nd(rng()), b[i] = 0.7f * a[i] + 0.3f * nd(rng());  // correlated
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < a.size(); ++i) ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
    DevBuf da(a.size() * 4), db(b.size() * 4), out(4);
    da.upload(a);
    db.upload(b);
    cosine({.a = da.as<float>(), .b = db.as<float>(), .n = n, .out = out.as<float>()});
    EXPECT_NEAR(out.download<float>(1)[0], ab / std::sqrt(aa * bb), 1e-6) << "n " << n;  // fp64 sums, one fp32 rounding
    std::vector<float> zero(static_cast<size_t>(n), 0.f);
    db.upload(zero);
    cosine({.a = da.as<float>(), .b = db.as<float>(), .n = n, .out = out.as<float>()});
    EXPECT_EQ(out.download<float>(1)[0], 0.f) << "a zero vector: 0, as the CPU";
  }
}

TEST(TokenSelectSelectionQuery, EqualsRotatedMean) {
  LC_REQUIRE_GPU();
  ThreadPool pool(2);
  for (int64_t C : {int64_t(1), int64_t(64), int64_t(512)}) {
    const Layer l = make_layer(32, 8, 128, C, C);
    const DevLayer d(l);
    DevBuf out(size_t(l.H * l.D) * 4);
    const int64_t pos0 = 512;
    selection_query({.q = d.q.p, .n_rows = C, .pos0 = pos0, .inv_freq = d.inv_freq.as<float>(), .n_head = l.H,
                     .head_dim = l.D, .out = out.as<float>()});
    std::vector<float> rows = l.q;
    rope_apply_ref(rows.data(), C, l.H, l.D, pos0, l.inv_freq.data(), pool);
    std::vector<double> want(size_t(l.H * l.D), 0.0);
    for (int64_t i = 0; i < C; ++i)
      for (size_t e = 0; e < want.size(); ++e) want[e] += rows[size_t(i) * want.size() + e];
    for (double& x : want) x /= double(C);
    const auto got = out.download<float>(want.size());
    const auto e = compare(std::vector<double>(got.begin(), got.end()), want, 2e-5, 1e-4);
    EXPECT_EQ(e.n_bad, 0) << "C " << C << ": " << e.str();
  }
}

// fp64 soft votes of the candidates for the CPU's selection query (TokenSelectMethod::plan:
// the chunk's rows rotated at n_local + i, averaged), to judge near-ties at the k-th place.
// max_score: the largest |score| (fp16 scores round each by up to 2^-11 of it).
std::vector<double> fp64_votes(const Layer& l, const TokenSelectParams& t, ThreadPool& pool, double* max_score) {
  std::vector<float> rows = l.q;
  rope_apply_ref(rows.data(), l.C, l.H, l.D, t.n_local, l.inv_freq.data(), pool);
  const int64_t Q = int64_t(l.H) * l.D, M = l.n_kv - t.n_init - t.n_local, g = l.H / l.Hkv;
  std::vector<double> qs(size_t(Q), 0.0), vote(size_t(M), 0.0);
  for (int64_t i = 0; i < l.C; ++i)
    for (int64_t e = 0; e < Q; ++e) qs[size_t(e)] += rows[size_t(i * Q + e)];
  for (double& x : qs) x /= double(l.C);
  std::vector<double> s(static_cast<size_t>(M));
  for (int h = 0; h < l.H; ++h) {
    for (int64_t j = 0; j < M; ++j) {
      const float* kr = l.k_pos.data() + ((t.n_init + j) * l.Hkv + h / g) * l.D;
      double acc = 0;
      for (int e = 0; e < l.D; ++e) acc += qs[size_t(h * l.D + e)] * kr[e];
      s[size_t(j)] = acc;
      *max_score = std::max(*max_score, std::abs(acc));
    }
    const double mx = *std::max_element(s.begin(), s.end());
    double z = 0;
    for (double x : s) z += std::exp(x - mx);
    for (int64_t j = 0; j < M; ++j) vote[size_t(j)] += std::exp(s[size_t(j)] - mx) / z;
  }
  return vote;
}

// The pool of a step: its head_dim and element type (bf16, or e4m3: the fp8 cache), and the
// step's score storage (fp32, or fp16).
struct Pool {
  int D = 128;
  bool fp8 = false;
  ScoreElem scores = ScoreElem::f32;
};

int64_t common_count(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {  // both ascending
  std::vector<int32_t> c;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(c));
  return int64_t(c.size());
}

void check_step(int H, int Hkv, int64_t n_kv, int64_t C, const TokenSelectParams& t, Pool pk = {}) {
  ThreadPool pool(2);
  const Layer l = make_layer(H, Hkv, pk.D, n_kv, C, pk.fp8);
  const DevLayer d(l);
  TokenSelectGpuStep step(t, {.n_head = H, .n_kv_head = Hkv, .head_dim = pk.D, .max_kv = n_kv, .max_rows = C,
                              .scores = pk.scores});
  const TokenSelectGpuInput in = d.input(l);
  step.step(in, nullptr);
  const int64_t L = step.n_keys(n_kv);
  std::vector<int32_t> got_keys(static_cast<size_t>(L));
  copy_d2h(got_keys.data(), step.keys(), size_t(L) * 4);

  std::vector<float> o_ref;
  const AttnParams p = cpu_params(l, o_ref);
  const TokenSelectMethod m(t);
  auto state = m.start_sequence();
  const LayerRope rope{.inv_freq = l.inv_freq.data()};
  const auto segs = m.select_keys(p, C == 1 ? Phase::decode : Phase::prefill, rope, *state, pool);
  ASSERT_EQ(segs.size(), 1u);
  const std::vector<int32_t>& want = segs[0].keys;
  ASSERT_EQ(int64_t(want.size()), L);
  const bool f16 = pk.scores == ScoreElem::f16;
  if (f16 && step.selects(n_kv)) {  // the selection's overlap with the fp32 scores' (reported)
    TokenSelectGpuStep s32(t, {.n_head = H, .n_kv_head = Hkv, .head_dim = pk.D, .max_kv = n_kv, .max_rows = C});
    s32.select(in, nullptr);
    std::vector<int32_t> k32(static_cast<size_t>(L));
    copy_d2h(k32.data(), s32.keys(), size_t(L) * 4);
    const double overlap = double(common_count(got_keys, k32) - t.n_init - t.n_local) / double(t.k);
    std::printf("[ f16     ] n_kv %lld C %lld D %d%s: fp16 scores select %.2f%% of the fp32 scores' %lld\n",
                (long long)n_kv, (long long)C, pk.D, pk.fp8 ? " fp8" : "", 100 * overlap, (long long)t.k);
    EXPECT_GE(overlap, 0.9);
  }
  if (got_keys != want) {  // only near-ties at the k-th vote may differ
    double max_score = 0;
    const auto vote = fp64_votes(l, t, pool, &max_score);
    std::vector<double> sorted(vote);
    std::nth_element(sorted.begin(), sorted.begin() + (t.k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[size_t(t.k - 1)];
    std::vector<int32_t> diff;
    std::set_symmetric_difference(got_keys.begin(), got_keys.end(), want.begin(), want.end(), std::back_inserter(diff));
    // The GPU scores with the query as bf16 hi + lo parts (~2^-16 relative): a vote within 1e-3
    // of the k-th may fall on either side. fp16 scores: each exp(s - max) also moves by up to
    // 2 * 2^-11 * max|s| (relative), both votes compared by twice that.
    const double near = 1e-3 + (f16 ? 4.0 / 2048 * max_score : 0.0);
    for (int32_t pos : diff)
      EXPECT_LE(std::abs(vote[size_t(pos - t.n_init)] - kth), near * kth)
          << "position " << pos << " differs and is no near-tie (n_kv " << n_kv << ", C " << C << ", D " << pk.D
          << (pk.fp8 ? ", fp8" : "") << ")";
  }
  // The output against the CPU's attention over the GPU's own key set (the same mask).
  std::vector<KeySegment> same(1);
  same[0] = {.q_begin = 0, .q_end = C, .keys = got_keys};
  attend_compacted_ref(p, same, rope, pool);
  const auto o = to_double(d.o.download<uint16_t>(l.q_b.size()));
  const auto e = compare(o, std::vector<double>(o_ref.begin(), o_ref.end()), 1e-2, 2e-2);
  EXPECT_EQ(e.n_bad, 0) << "n_kv " << n_kv << " C " << C << " D " << pk.D << (pk.fp8 ? " fp8" : "") << ": "
                        << e.str();
}

TEST(TokenSelectGpuStep, PrefillChunkEqualsCpuMethod) {
  LC_REQUIRE_GPU();
  const TokenSelectParams t{.n_init = 16, .k = 256, .n_local = 128, .chunk = 128};
  check_step(32, 8, 6000, 128, t);
  check_step(28, 4, 4097, 64, t);
}

TEST(TokenSelectGpuStep, DecodeStepEqualsCpuMethod) {
  LC_REQUIRE_GPU();
  const TokenSelectParams t{.n_init = 16, .k = 256, .n_local = 128, .chunk = 128};
  check_step(32, 8, 5001, 1, t);
}

TEST(TokenSelectGpuStep, WithinBudgetIsDense) {
  LC_REQUIRE_GPU();
  const TokenSelectParams t{.n_init = 16, .k = 256, .n_local = 128, .chunk = 128};
  check_step(32, 8, 400, 128, t);  // n_kv = budget
  check_step(32, 8, 300, 1, t);
}

// Gemma 3's global layers: 4 query heads, 1 KV head, head_dim 256.
TEST(TokenSelectGpuStep, HeadDim256EqualsCpuMethod) {
  LC_REQUIRE_GPU();
  const TokenSelectParams t{.n_init = 16, .k = 256, .n_local = 128, .chunk = 128};
  check_step(4, 1, 6000, 128, t, {.D = 256});
  check_step(4, 1, 5001, 1, t, {.D = 256});
  check_step(8, 2, 4097, 64, t, {.D = 256});
  check_step(4, 1, 300, 1, t, {.D = 256});  // within the budget: dense
}

// The fp8 KV cache's pool (e4m3 K and V, one scale each): the CPU method over the dequantized
// values selects the same keys (up to near-ties) and attends to the same output (V widened to
// bf16 once: inside the bf16 tolerance).
TEST(TokenSelectGpuStep, Fp8PoolEqualsCpuMethodOnDequantized) {
  LC_REQUIRE_GPU();
  const TokenSelectParams t{.n_init = 16, .k = 256, .n_local = 128, .chunk = 128};
  check_step(32, 8, 6000, 128, t, {.fp8 = true});
  check_step(32, 8, 5001, 1, t, {.fp8 = true});
  check_step(32, 8, 300, 1, t, {.fp8 = true});
  check_step(4, 1, 5001, 1, t, {.D = 256, .fp8 = true});
}

// fp16 scores (half the scan's writes and the vote's reads): the selection vs fp64 up to the
// near-ties fp16 rounding allows, and its overlap with the fp32 scores' selection (printed).
TEST(TokenSelectGpuStep, F16ScoresEqualCpuMethodUpToNearTies) {
  LC_REQUIRE_GPU();
  const TokenSelectParams t{.n_init = 16, .k = 256, .n_local = 128, .chunk = 128};
  check_step(32, 8, 6000, 128, t, {.scores = ScoreElem::f16});
  check_step(32, 8, 5001, 1, t, {.scores = ScoreElem::f16});
  check_step(32, 8, 6000, 128, t, {.fp8 = true, .scores = ScoreElem::f16});
  check_step(4, 1, 6000, 128, t, {.D = 256, .scores = ScoreElem::f16});
}

}  // namespace
}  // namespace longctx::cuda::test

// test_gpu_self_extend.cpp: Self-Extend on the GPU (methods/self_extend/self_extend_gpu.h).
//
// (1) The attention step (SelfExtendGpu::attend, what the model calls per layer) against an fp64
//     oracle written from the definition (self_extend.h (SE1)-(SE3): per pair, q - k < W scores
//     q and k rotated at their own positions, else q at floor(q/G) + W - floor(W/G) and k at
//     floor(k/G); one softmax per row), on fresh random un-rotated bf16 q/k/v: prefill chunks
//     that straddle the boundary W and chunks far past it, decode steps at W - 1, W, W + 1 and
//     later, GQA (8 query / 2 KV heads), head_dim 64 and 128 (the Hopper prefill kernel serves the
//     far part there), G dividing W or not, a RoPE attention factor, layer 1 of 2 (per-layer key
//     copies), and a second sequence in the same key memory after start_sequence. G = 1 equals
//     plain causal attention (oracle without Self-Extend).
//     Tolerance: the GPU rounds the rotated q and k to bf16 (2^-9 each, so scores move by ~2^-8
//     of their size), P to bf16 before P V and O to bf16: per element |err| <= 2e-2 |ref| +
//     1e-2 max|V| with margin, rel_l2 < 1.5e-2 (test_attention.cpp's bounds, doubled for the
//     extra rotation).
//     Decode replayed from a CUDA graph (the step's length in device memory, GpuAttendStep::
//     n_kv_dev, captured once and replayed at later lengths, as the model does): every replayed
//     step across W against the oracle, the replays bit-equal to the same steps issued eagerly
//     (same bound, same kernels), and an eager step after the replays (the host never saw their
//     rows: the rotated-row bookkeeping of self_extend_gpu.h).
// (1b) The decode prep kernel (cuda::self_extend_decode_prep) against a CPU twin: the key row and
//     the query rotated at own and grouped positions vs an fp64 rotation of the same bf16 values
//     (bf16 output rounding: 2^-8 |ref| + fp32 angle noise), bit-equal to cuda::rope at the same
//     positions (shared arithmetic), the other rows of the key copies untouched, the lengths
//     exact (far 0 below W); device length and host length alike.
// (2) The GPU model vs the CPU engine's Self-Extend on the default model's geometry (9 query / 3 KV
//     heads, head_dim 64; random weights, trained context 256, G = 4, W = 64, a 700-token prompt
//     in chunks of 256 and 8 teacher-forced decode steps): logits within the bf16 tolerance
//     (test_util.h) and equal argmax on clear rows; where Self-Extend's logits differ from plain
//     dense beyond noise, the GPU's are much closer to the CPU's Self-Extend than to dense. The
//     decode steps replay from CUDA graphs. A 20-token prompt and 60 decode steps with W = 40:
//     the steps cross W inside a replayed tile; graph decode bit-equal to eager decode, both
//     within the tolerance of the CPU engine.
// (3) What the GPU refuses, before any work (no GPU needed): different G:W per phase, head_dim
//     without a dense kernel (HiP with Self-Extend runs: test_gpu_hip_self_extend.cpp).
//   build-gpu/tests/gpu/test_gpu_self_extend   (also part of test_gpu)
#ifdef LONGCTX_WITH_GPU
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <span>

#include "gpu/device_weights.h"
#include "gpu/gpu_transformer.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/self_extend.h"
#include "methods/gpu_method.h"
#include "methods/method.h"
#include "methods/self_extend/self_extend_gpu.h"
#include "model/tiny_model.h"
#include "model/transformer.h"
#include "../cuda/test_util.h"  // DevBuf, random_bf16 (fresh seed per run, printed)
#include "model_rows.h"
#include "test_util.h"
#include "util/half.h"
#include "util/thread_pool.h"

namespace longctx {
namespace {

using test::contains;
using test::random_ids;
using test::Rows;
using cuda::test::DevBuf;

// ---- (1) the attention step vs the fp64 oracle --------------------------------------------

struct StepGeometry {
  int n_head = 8, n_kv_head = 2, head_dim = 64;
  SelfExtendParams se{.group = 4, .neighbor = 48};
  float rope_factor = 1.f;
  int64_t n_tokens = 400;  // keys of the sequence
  int64_t chunk = 128;     // most rows of a prefill step
};

// One sequence's un-rotated q/k/v (host doubles, the bf16 values) and the fp64 oracle.
struct Sequence {
  StepGeometry g;
  std::vector<uint16_t> qh, kh, vh;  // bf16 [n_tokens, heads, head_dim]
  std::vector<double> q, k, v;
  std::vector<float> inv_freq;       // [head_dim / 2]

  explicit Sequence(const StepGeometry& geo) : g(geo) {
    const size_t T = size_t(g.n_tokens), d = size_t(g.head_dim);
    qh = cuda::test::random_bf16(T * size_t(g.n_head) * d, 1.0, q);
    kh = cuda::test::random_bf16(T * size_t(g.n_kv_head) * d, 1.0, k);
    vh = cuda::test::random_bf16(T * size_t(g.n_kv_head) * d, 1.0, v);
    for (int i = 0; i < g.head_dim / 2; ++i)
      inv_freq.push_back(1.0f / std::pow(10000.f, float(2 * i) / float(g.head_dim)));
  }

  // x rotated at position pos (rotate-half, cos/sin times the attention factor), fp64.
  std::vector<double> rotated(const double* x, int64_t pos) const {
    const int half = g.head_dim / 2;
    std::vector<double> y(size_t(g.head_dim));
    for (int i = 0; i < half; ++i) {
      const double a = double(float(pos) * inv_freq[size_t(i)]);
      const double c = std::cos(a) * g.rope_factor, s = std::sin(a) * g.rope_factor;
      y[size_t(i)] = x[i] * c - x[i + half] * s;
      y[size_t(i + half)] = x[i + half] * c + x[i] * s;
    }
    return y;
  }

  // Row (query position qp, head h) of Self-Extend attention over keys 0..qp, by the definition
  // (se off: plain RoPE attention).
  std::vector<double> oracle(int64_t qp, int h, const SelfExtendParams& se) const {
    const int d = g.head_dim, kvh = h / (g.n_head / g.n_kv_head);
    const double scale = 1.0 / std::sqrt(double(d));
    const double* qx = &q[(size_t(qp) * size_t(g.n_head) + size_t(h)) * size_t(d)];
    std::vector<double> s(size_t(qp + 1));
    for (int64_t kp = 0; kp <= qp; ++kp) {
      const double* kx = &k[(size_t(kp) * size_t(g.n_kv_head) + size_t(kvh)) * size_t(d)];
      const bool near = !se.on() || qp - kp < se.neighbor;  // (SE1) vs (SE2)
      const auto qr = rotated(qx, near ? qp : qp / se.group + se.neighbor - se.neighbor / se.group);
      const auto kr = rotated(kx, near ? kp : kp / se.group);
      double dot = 0;
      for (int i = 0; i < d; ++i) dot += qr[size_t(i)] * kr[size_t(i)];
      s[size_t(kp)] = dot * scale;
    }
    const double m = *std::max_element(s.begin(), s.end());  // (SE3): one softmax
    double l = 0;
    for (double& x : s) l += (x = std::exp(x - m));
    std::vector<double> o(size_t(d), 0.0);
    for (int64_t kp = 0; kp <= qp; ++kp)
      for (int i = 0; i < d; ++i)
        o[size_t(i)] += s[size_t(kp)] / l * v[(size_t(kp) * size_t(g.n_kv_head) + size_t(kvh)) * size_t(d) + size_t(i)];
    return o;
  }
};

// A step of the scenario: n_q rows at q_pos0 (n_q = 1 with decode: a decode step).
struct Step {
  int64_t q_pos0, n_q;
  bool decode = false;
};

// The model's layer: the key/value memory holds the whole sequence (a step reads rows < n_kv).
struct Runner {
  const Sequence& seq;
  int layer;
  SelfExtendGpu& m;
  DevBuf k, v, inv, q, o, len;
  Runner(const Sequence& s, int l, SelfExtendGpu& method)
      : seq(s), layer(l), m(method), k(s.kh.size() * 2), v(s.vh.size() * 2), inv(s.inv_freq.size() * 4),
        q(size_t(s.g.chunk * s.g.n_head * s.g.head_dim) * 2), o(size_t(s.g.chunk * s.g.n_head * s.g.head_dim) * 2),
        len(sizeof(int32_t)) {
    upload();
  }
  void upload() {
    cuda::copy_h2d(k.p, seq.kh.data(), seq.kh.size() * 2);
    cuda::copy_h2d(v.p, seq.vh.data(), seq.vh.size() * 2);
    cuda::copy_h2d(inv.p, seq.inv_freq.data(), seq.inv_freq.size() * 4);
  }
  // The step as the model hands it over; bound > 0: a decode step with its length in len (device).
  GpuAttendStep step_of(const Step& st, int64_t bound) {
    return {.layer = layer, .phase = st.decode ? Phase::decode : Phase::prefill, .q = q.p, .k = k.p, .v = v.p,
            .o = o.p, .n_q = st.n_q, .n_kv = st.q_pos0 + st.n_q, .inv_freq = static_cast<const float*>(inv.p),
            .rope_factor = seq.g.rope_factor, .n_kv_dev = bound > 0 ? static_cast<const int32_t*>(len.p) : nullptr,
            .n_kv_bound = bound};
  }
  // The step's query rows and device length in place, its output rows NaN (an unwritten row fails).
  void stage(const Step& st, cuda::Stream s) {
    const size_t row = size_t(seq.g.n_head * seq.g.head_dim);
    cuda::copy_h2d(q.p, seq.qh.data() + size_t(st.q_pos0) * row, size_t(st.n_q) * row * 2, s);
    cuda::memset_async(o.p, 0xff, size_t(st.n_q) * row * 2, s);
    const int32_t n_kv = int32_t(st.q_pos0 + st.n_q);
    cuda::copy_h2d(len.p, &n_kv, sizeof(n_kv), s);
    cuda::stream_sync(s);  // n_kv is a local
  }
  // Runs one step (bound > 0: decode from the device length), returns its output as doubles
  // [n_q, n_head, head_dim].
  std::vector<double> run(const Step& st, cuda::Stream s, int64_t bound = 0) {
    stage(st, s);
    m.attend(step_of(st, bound), s);
    return output(st, s);
  }
  std::vector<double> output(const Step& st, cuda::Stream s) {
    const size_t row = size_t(seq.g.n_head * seq.g.head_dim);
    std::vector<uint16_t> h(size_t(st.n_q) * row);
    cuda::copy_d2h(h.data(), o.p, h.size() * 2, s);
    cuda::stream_sync(s);
    std::vector<double> r(h.size());
    for (size_t i = 0; i < h.size(); ++i) r[i] = bf16_to_f32(h[i]);
    return r;
  }
};

// Checks every row of a step's output against the oracle (with oracle_se: G = 1 vs plain attention).
void check_output(const Sequence& seq, const Step& st, const std::vector<double>& got,
                  const SelfExtendParams& oracle_se, const char* what) {
  const StepGeometry& g = seq.g;
  double vmax = 0;
  for (double x : seq.v) vmax = std::max(vmax, std::fabs(x));
  double num = 0, den = 0, worst = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < st.n_q; ++i)
    for (int h = 0; h < g.n_head; ++h) {
      const auto ref = seq.oracle(st.q_pos0 + i, h, oracle_se);
      for (int j = 0; j < g.head_dim; ++j) {
        const double x = got[(size_t(i) * size_t(g.n_head) + size_t(h)) * size_t(g.head_dim) + size_t(j)];
        const double e = std::isfinite(x) ? std::fabs(x - ref[size_t(j)]) : 1e30;
        const double tol = 2e-2 * std::fabs(ref[size_t(j)]) + 1e-2 * vmax;
        bad += e > tol;
        worst = std::max(worst, e / tol);
        num += e * e;
        den += ref[size_t(j)] * ref[size_t(j)];
      }
    }
  const double rel_l2 = std::sqrt(num / den);
  EXPECT_EQ(bad, 0) << what << ": step q_pos0=" << st.q_pos0 << " n_q=" << st.n_q << " worst err/tol " << worst;
  EXPECT_LT(rel_l2, 1.5e-2) << what << ": step q_pos0=" << st.q_pos0 << " n_q=" << st.n_q;
  std::printf("%s q_pos0=%lld n_q=%lld%s: rel_l2 %.2e, worst err/tol %.3f\n", what, (long long)st.q_pos0,
              (long long)st.n_q, st.decode ? " (decode)" : "", rel_l2, worst);
}

// Checks every row of every step against the oracle (bound > 0: decode steps from the device length).
void check_steps(Runner& r, const std::vector<Step>& steps, const SelfExtendParams& oracle_se, cuda::Stream s,
                 const char* what, int64_t bound = 0) {
  for (const Step& st : steps) check_output(r.seq, st, r.run(st, s, st.decode ? bound : 0), oracle_se, what);
}

// The scenario of a sequence of g.n_tokens (400) keys, W = 48: a chunk inside the window, one
// straddling the boundary, a full chunk far past it, decode steps across the boundary (a second
// run) and far past it.
std::vector<Step> prefill_then_decode() {
  return {{0, 40}, {40, 60}, {100, 128}, {228, 128}, {356, 40}, {396, 1, true}, {397, 1, true}, {398, 1, true},
          {399, 1, true}};
}
std::vector<Step> decode_across_boundary(const StepGeometry& g) {
  const int64_t W = g.se.neighbor;
  return {{0, W - 2}, {W - 2, 1, true}, {W - 1, 1, true}, {W, 1, true}, {W + 1, 1, true}, {W + 2, 1, true}};
}

MethodContext step_ctx(const StepGeometry& g) { return {2, g.n_head, g.n_kv_head, g.head_dim, "test"}; }

void run_scenarios(const StepGeometry& g, const char* what) {
  SelfExtendGpu m(g.se, step_ctx(g));
  cuda::Stream s = cuda::stream_create();
  m.allocate({.model = step_ctx(g), .chunk = g.chunk, .capacity = g.n_tokens}, s);
  {
    Sequence a(g);
    Runner r(a, 1, m);
    check_steps(r, prefill_then_decode(), g.se, s, what);
    m.start_sequence(s);
    Sequence b(g);  // a new sequence in the same key memory
    Runner rb(b, 1, m);
    check_steps(rb, decode_across_boundary(g), g.se, s, what);
  }
  m.release();
  cuda::stream_destroy(s);
}

// Decode steps at p0..p1-1 replayed from one CUDA graph captured at p0 (the model's way: the
// length in device memory, a bound for the plans; one eager decode step first, as the model warms
// up), each against the oracle and bit-equal to the same steps issued eagerly on a second object;
// then one eager step at p1 on both (the rows p0..p1-1 were rotated by replays the host never saw).
void run_replay(const StepGeometry& g, int64_t p0, int64_t p1, const char* what) {
  const MethodContext ctx = step_ctx(g);
  SelfExtendGpu graphed(g.se, ctx), eager(g.se, ctx);
  cuda::Stream s = cuda::stream_create();
  const GpuShape shape{.model = ctx, .chunk = g.chunk, .capacity = g.n_tokens};
  graphed.allocate(shape, s);
  eager.allocate(shape, s);
  const int64_t bound = g.n_tokens;  // the plan's key bound (the model's: its tile)
  {
    Sequence a(g);
    Runner rg(a, 1, graphed), re(a, 1, eager);
    std::vector<Step> prompt;  // prefill in chunks, then the warm-up decode
    for (int64_t c0 = 0; c0 < p0 - 1; c0 += g.chunk) prompt.push_back({c0, std::min(g.chunk, p0 - 1 - c0)});
    prompt.push_back({p0 - 1, 1, true});
    check_steps(rg, prompt, g.se, s, what, bound);
    check_steps(re, prompt, g.se, s, what, bound);
    cuda::CudaGraph graph;
    rg.stage({p0, 1, true}, s);
    graph.begin_capture(s);
    graphed.attend(rg.step_of({p0, 1, true}, bound), s);
    graph.end_capture(s);
    int64_t differ = 0;
    for (int64_t p = p0; p < p1; ++p) {
      const Step st{p, 1, true};
      rg.stage(st, s);
      graph.launch(s);
      const auto got = rg.output(st, s);
      check_output(a, st, got, g.se, what);
      differ += got != re.run(st, s, bound);
    }
    EXPECT_EQ(differ, 0) << what << ": replayed decode steps whose output differs from eager";
    std::printf("%s: %lld replayed decode steps (pos %lld..%lld, W %lld), %lld differ from eager\n", what,
                (long long)(p1 - p0), (long long)p0, (long long)(p1 - 1), (long long)g.se.neighbor,
                (long long)differ);
    const Step after{p1, 1, true};
    const auto got = rg.run(after, s, bound);
    check_output(a, after, got, g.se, what);
    EXPECT_TRUE(got == re.run(after, s, bound)) << what << ": the eager step after the replays differs";
  }
  graphed.release();
  eager.release();
  cuda::stream_destroy(s);
}

TEST(GpuSelfExtendStep, MatchesOracleD64) {
  REQUIRE_GPU();
  run_scenarios(StepGeometry{}, "d64 G=4 W=48");
}

TEST(GpuSelfExtendStep, GraphReplayedDecodeAcrossWindow) {
  REQUIRE_GPU();
  run_replay(StepGeometry{}, 41, 60, "d64 G=4 W=48 replay");  // pos 41..59: below W, at W, past it
  StepGeometry g;
  g.head_dim = 128;
  g.se = {.group = 3, .neighbor = 50};
  g.rope_factor = 1.1f;
  run_replay(g, 300, 340, "d128 G=3 W=50 factor 1.1 replay");  // far past W
}

TEST(GpuSelfExtendStep, MatchesOracleD128GroupNotDividingWindow) {
  REQUIRE_GPU();
  StepGeometry g;
  g.head_dim = 128;
  g.se = {.group = 3, .neighbor = 50};  // shift W - floor(W/G) = 34: the integer division
  g.rope_factor = 1.1f;                 // YaRN-like attention factor on both rotations
  run_scenarios(g, "d128 G=3 W=50 factor 1.1");
}

TEST(GpuSelfExtendStep, GroupOneIsPlainAttention) {
  REQUIRE_GPU();
  StepGeometry g;
  g.se = {.group = 1, .neighbor = 48};
  SelfExtendGpu m(g.se, step_ctx(g));
  cuda::Stream s = cuda::stream_create();
  m.allocate({.model = step_ctx(g), .chunk = g.chunk, .capacity = g.n_tokens}, s);
  {
    Sequence a(g);
    Runner r(a, 0, m);
    check_steps(r, prefill_then_decode(), SelfExtendParams{}, s, "G=1 vs plain");
  }
  m.release();
  cuda::stream_destroy(s);
}

// ---- (1b) the decode prep kernel vs its CPU twin -------------------------------------------

// x (bf16 values, one head) rotated at position p, fp64 (the angle the fp32 product, as the GPU).
std::vector<double> rotated_twin(const std::vector<double>& x, size_t off, int d, int64_t p,
                                 const std::vector<float>& inv_freq, float factor) {
  const int half = d / 2;
  std::vector<double> y(static_cast<size_t>(d));
  for (int i = 0; i < half; ++i) {
    const double a = double(float(p) * inv_freq[size_t(i)]), c = std::cos(a) * factor, s = std::sin(a) * factor;
    const double xa = x[off + size_t(i)], xb = x[off + size_t(i + half)];
    y[size_t(i)] = xa * c - xb * s;
    y[size_t(i + half)] = xb * c + xa * s;
  }
  return y;
}

// Rows got (bf16 [heads, d]) vs the twin of rows x at position p: bf16 rounding of the output
// (2^-9 |ref|, doubled) plus fp32 angle / sincosf noise relative to the pair's size.
int64_t twin_mismatches(const std::vector<uint16_t>& got, const std::vector<double>& x, size_t row_off, int heads,
                        int d, int64_t p, const std::vector<float>& inv_freq, float factor) {
  int64_t bad = 0;
  for (int h = 0; h < heads; ++h) {
    const size_t off = row_off + size_t(h) * size_t(d);
    const auto ref = rotated_twin(x, off, d, p, inv_freq, factor);
    for (int i = 0; i < d; ++i) {
      const int j = i < d / 2 ? i + d / 2 : i - d / 2;  // the pair's other element
      const double tol = std::ldexp(std::fabs(ref[size_t(i)]), -8) +
                         1e-5 * factor * (std::fabs(x[off + size_t(i)]) + std::fabs(x[off + size_t(j)]));
      bad += std::fabs(double(bf16_to_f32(got[off - row_off + size_t(i)])) - ref[size_t(i)]) > tol;
    }
  }
  return bad;
}

void check_prep(int head_dim, const SelfExtendParams& se, float factor) {
  constexpr int kHeads = 8, kKvHeads = 2;
  constexpr int64_t kCap = 300;
  const int d = head_dim;
  const size_t krow = size_t(kKvHeads * d), qrow = size_t(kHeads * d);
  std::vector<double> kd, qd, od, gd;
  const auto kh = cuda::test::random_bf16(size_t(kCap) * krow, 1.0, kd);
  const auto qh = cuda::test::random_bf16(qrow, 1.0, qd);
  // The rotated copies start as other random rows: every row but pos must stay as it was.
  auto own = cuda::test::random_bf16(size_t(kCap) * krow, 1.0, od);
  auto grp = cuda::test::random_bf16(size_t(kCap) * krow, 1.0, gd);
  std::vector<float> inv;
  for (int i = 0; i < d / 2; ++i) inv.push_back(1.0f / std::pow(10000.f, float(2 * i) / float(d)));
  std::vector<int32_t> kp, qp;
  for (int64_t p = 0; p < kCap; ++p) {
    kp.push_back(int32_t(self_extend_key_pos(se, p)));
    qp.push_back(int32_t(self_extend_query_pos(se, p)));
  }
  DevBuf k(kh.size() * 2), k_own(own.size() * 2), k_grp(grp.size() * 2), q(qh.size() * 2), q_own(qrow * 2),
      q_grp(qrow * 2), key_pos(kp.size() * 4), query_pos(qp.size() * 4), inv_freq(inv.size() * 4), lens(8), len(4),
      scratch(qrow * 2);
  cuda::copy_h2d(k.p, kh.data(), kh.size() * 2);
  cuda::copy_h2d(k_own.p, own.data(), own.size() * 2);
  cuda::copy_h2d(k_grp.p, grp.data(), grp.size() * 2);
  cuda::copy_h2d(q.p, qh.data(), qh.size() * 2);
  cuda::copy_h2d(key_pos.p, kp.data(), kp.size() * 4);
  cuda::copy_h2d(query_pos.p, qp.data(), qp.size() * 4);
  cuda::copy_h2d(inv_freq.p, inv.data(), inv.size() * 4);
  // cuda::rope of bf16 rows src [heads, d] at position p (the prefill path's rotation), host copy.
  auto rope_of = [&](const uint16_t* src, int heads, int64_t p) {
    std::vector<uint16_t> h(size_t(heads * d));
    cuda::copy_h2d(scratch.p, src, h.size() * 2);
    cuda::rope({.q = scratch.p, .n_q_heads = heads, .head_dim = d, .n_tokens = 1, .pos0 = p,
                .inv_freq = static_cast<const float*>(inv_freq.p), .attn_factor = factor});
    cuda::copy_d2h(h.data(), scratch.p, h.size() * 2);
    return h;
  };
  const int64_t W = se.neighbor;
  for (const int64_t pos : {int64_t(0), int64_t(1), W - 1, W, W + 1, int64_t(137), kCap - 1})
    for (const bool device_len : {true, false}) {
      const int32_t n_kv = int32_t(pos + 1);
      cuda::copy_h2d(len.p, &n_kv, 4);
      cuda::self_extend_decode_prep({.n_kv_dev = device_len ? static_cast<const int32_t*>(len.p) : nullptr,
                                     .n_kv = device_len ? 0 : pos + 1, .k = k.p, .k_own = k_own.p, .k_grp = k_grp.p,
                                     .q = q.p, .q_own = q_own.p, .q_grp = q_grp.p,
                                     .key_pos = static_cast<const int32_t*>(key_pos.p),
                                     .query_pos = static_cast<const int32_t*>(query_pos.p),
                                     .inv_freq = static_cast<const float*>(inv_freq.p), .attn_factor = factor,
                                     .n_head = kHeads, .n_kv_head = kKvHeads, .head_dim = d, .neighbor = W,
                                     .lens = static_cast<int32_t*>(lens.p)});
      std::vector<uint16_t> go(own.size()), gg(grp.size()), gqo(qrow), gqg(qrow);
      int32_t gl[2] = {-1, -1};
      cuda::copy_d2h(go.data(), k_own.p, go.size() * 2);
      cuda::copy_d2h(gg.data(), k_grp.p, gg.size() * 2);
      cuda::copy_d2h(gqo.data(), q_own.p, qrow * 2);
      cuda::copy_d2h(gqg.data(), q_grp.p, qrow * 2);
      cuda::copy_d2h(gl, lens.p, 8);
      cuda::check_last_error("self_extend_decode_prep");
      const std::string at =
          "d" + std::to_string(d) + " pos " + std::to_string(pos) + (device_len ? " (device length)" : "");
      EXPECT_EQ(gl[0], pos + 1) << at;
      EXPECT_EQ(gl[1], std::max<int64_t>(pos + 1 - W, 0)) << at;
      const size_t r0 = size_t(pos) * krow;
      const int64_t kg = self_extend_key_pos(se, pos), qg = self_extend_query_pos(se, pos);
      // Rows other than pos: untouched (then own / grp take row pos as the reference state).
      int64_t moved = 0;
      for (size_t i = 0; i < own.size(); ++i)
        if (i < r0 || i >= r0 + krow) moved += (go[i] != own[i]) + (gg[i] != grp[i]);
      EXPECT_EQ(moved, 0) << at << ": elements outside row pos changed";
      const std::vector<uint16_t> kown(go.begin() + long(r0), go.begin() + long(r0 + krow));
      const std::vector<uint16_t> kgrp(gg.begin() + long(r0), gg.begin() + long(r0 + krow));
      EXPECT_EQ(twin_mismatches(kown, kd, r0, kKvHeads, d, pos, inv, factor), 0) << at << ": own key";
      EXPECT_EQ(twin_mismatches(kgrp, kd, r0, kKvHeads, d, kg, inv, factor), 0) << at << ": grouped key";
      EXPECT_EQ(twin_mismatches(gqo, qd, 0, kHeads, d, pos, inv, factor), 0) << at << ": own query";
      EXPECT_EQ(twin_mismatches(gqg, qd, 0, kHeads, d, qg, inv, factor), 0) << at << ": grouped query";
      // Bit-equal to cuda::rope at the same positions (what prefill's rows are made with).
      EXPECT_TRUE(kown == rope_of(kh.data() + r0, kKvHeads, pos)) << at << ": own key vs cuda::rope";
      EXPECT_TRUE(kgrp == rope_of(kh.data() + r0, kKvHeads, kg)) << at << ": grouped key vs cuda::rope";
      EXPECT_TRUE(gqo == rope_of(qh.data(), kHeads, pos)) << at << ": own query vs cuda::rope";
      EXPECT_TRUE(gqg == rope_of(qh.data(), kHeads, qg)) << at << ": grouped query vs cuda::rope";
      std::copy(go.begin(), go.end(), own.begin());
      std::copy(gg.begin(), gg.end(), grp.begin());
    }
  std::printf("decode prep d%d G=%lld W=%lld factor %.2f: checked against the fp64 twin and cuda::rope\n", d,
              (long long)se.group, (long long)W, double(factor));
}

TEST(GpuSelfExtendPrep, MatchesCpuTwinAndRope) {
  REQUIRE_GPU();
  check_prep(64, {.group = 4, .neighbor = 48}, 1.f);
  check_prep(128, {.group = 3, .neighbor = 50}, 1.1f);
}

// ---- (2) the GPU model vs the CPU engine ----------------------------------------------------

constexpr int64_t kChunk = 256;
constexpr int64_t kRows = 4;  // prefill logit rows compared
const std::string kSpec = "dense=self_extend=4:64";

test::TinyModel& fixture() {
  static test::TinyModel* f = [] {
    TinyModelSpec s;  // the default model's attention geometry (SmolLM2-135M: 9/3 heads, head_dim 64)
    s.n_layer = 2;
    s.n_embd = 576;
    s.n_head = 9;
    s.n_kv_head = 3;
    s.n_ff = 1024;
    s.context_length = 256;
    s.seed = 41;
    return test::write_tiny("self-extend", s).release();
  }();
  return *f;
}

using test::ctx_of;

// graph false: decode eagerly; captures: the decode graphs captured (the steps replayed from them).
Rows run_gpu(const std::string& spec, const std::vector<int32_t>& ids, const std::vector<int32_t>& decode,
             bool graph = true, int64_t* captures = nullptr) {
  test::TinyModel& f = fixture();
  gpu::GpuOptions o;
  o.chunk = kChunk;
  o.attn = spec;
  gpu::GpuTransformer g(f.cfg, gpu::DeviceWeights::upload(f.cfg, ModelWeights::load(*f.file, f.cfg), nullptr), o);
  g.set_cuda_graph(graph);
  g.reset(int64_t(ids.size() + decode.size()));
  Rows r = test::logit_rows(g, ids, decode, kRows);
  if (captures) *captures = g.graph_captures();
  return r;
}

Rows run_cpu(const std::string& spec, const std::vector<int32_t>& ids, const std::vector<int32_t>& decode) {
  test::TinyModel& f = fixture();
  Transformer cpu(f.cfg, ModelWeights::load(*f.file, f.cfg), make_attention_method(spec, ctx_of(f.cfg)), global_pool());
  auto seq = cpu.new_sequence(int64_t(ids.size() + decode.size()));
  cpu.attach(seq.get());
  Rows r = test::logit_rows(cpu, ids, decode, kRows, kChunk);  // the GPU's chunks
  cpu.attach(nullptr);
  return r;
}

TEST(GpuSelfExtendModel, MatchesCpuEngine) {
  REQUIRE_GPU();
  const int32_t vocab = fixture().cfg.vocab_size;
  const auto ids = random_ids(700, vocab, 51), dec = random_ids(8, vocab, 52);
  int64_t captures = 0;
  const Rows gpu = run_gpu(kSpec, ids, dec, true, &captures), cpu = run_cpu(kSpec, ids, dec);
  EXPECT_GT(captures, 0) << "the decode steps did not replay from a CUDA graph";
  test::expect_rows_match(cpu, gpu, "GPU vs CPU Self-Extend");
  // The grouped path ran: plain dense on the GPU gives other logits.
  test::expect_method_path_ran(gpu, cpu, run_gpu("dense", ids, dec), "GPU Self-Extend vs GPU dense");
}

// A short prompt whose decode steps cross W = 40 inside a replayed tile (n_kv 21..64: the first
// step eager, the model's warm-up, then replays; 65..80 a second capture): graph decode equals
// eager decode bit for bit (same kernels, same plans), and both follow the CPU engine.
TEST(GpuSelfExtendModel, GraphDecodeAcrossWindowEqualsEager) {
  REQUIRE_GPU();
  const std::string spec = "dense=self_extend=4:40";
  const int32_t vocab = fixture().cfg.vocab_size;
  const auto ids = random_ids(20, vocab, 53), dec = random_ids(60, vocab, 54);
  int64_t captures = 0, eager_captures = -1;
  const Rows graph = run_gpu(spec, ids, dec, true, &captures);
  const Rows eager = run_gpu(spec, ids, dec, false, &eager_captures);
  EXPECT_GE(captures, 2);
  EXPECT_EQ(eager_captures, 0);
  test::expect_rows_bit_equal(graph, eager, captures, "graph decode across W");
  test::expect_rows_match(run_cpu(spec, ids, dec), graph, "GPU (graph decode across W) vs CPU Self-Extend");
}

// ---- (3) refusals (no GPU needed) ------------------------------------------------------------

TEST(GpuSelfExtendParse, GpuSideAndRefusals) {
  const MethodContext mc = ctx_of(fixture().cfg);
  const auto m = make_attention_method(kSpec, mc);
  EXPECT_EQ(gpu_method_problem(*m, mc), "");
  const auto g = make_gpu_method(*m, mc);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(g->attends());
  EXPECT_TRUE(g->decodes());
  EXPECT_TRUE(g->decode_graph_safe());
  EXPECT_EQ(g->decode_graph_min_kv(), 0);  // every length replays
  EXPECT_FALSE(g->decode_reads_fp8());
  EXPECT_TRUE(g->keeps_sequence_state());
  EXPECT_LT(g->device_bytes({.model = mc, .chunk = kChunk, .capacity = 4096}),
            g->device_bytes({.model = mc, .chunk = kChunk, .capacity = 65536}));
  // One spec per phase with the same G:W runs; the same as one method.
  EXPECT_EQ(gpu_method_problem(*make_attention_method("prefill:" + kSpec + ";decode:" + kSpec, mc), mc), "");
  // HiP with Self-Extend has its own GPU side (test_gpu_hip_self_extend.cpp).
  const std::string hip_se = "hip=k=64,window=32,sinks=4,dense_layers=0,self_extend=4:64";
  EXPECT_EQ(gpu_method_problem(*make_attention_method(hip_se, mc), mc), "");
  const std::string two_gw = "prefill:dense=self_extend=4:64;decode:dense=self_extend=8:64";
  std::string e = gpu_method_problem(*make_attention_method(two_gw, mc), mc);
  EXPECT_TRUE(contains(e, "the same self_extend=G:W in both phases")) << e;
  MethodContext d96 = mc;
  d96.head_dim = 96;
  e = gpu_method_problem(*make_attention_method(kSpec, d96), d96);
  EXPECT_TRUE(contains(e, "head_dim 16, 32, 64, 128 or 256") && contains(e, "has head_dim 96")) << e;
  // make_gpu_method's message ends with the CLI's advice.
  const auto two = make_attention_method(two_gw, mc);
  EXPECT_TRUE(contains(test::error_of([&] { (void)make_gpu_method(*two, mc); }), "use --device cpu"));
}

}  // namespace
}  // namespace longctx
#endif  // LONGCTX_WITH_GPU

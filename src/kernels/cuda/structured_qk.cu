// structured_qk.cu (cuda): see structured_qk.h for what the generated Q/K contain and why.
// How: one warp per (token, head) row writes its 128 bf16 values; every random quantity is a
// counter-based hash of (seed, what, head, index), so the output does not depend on the launch
// shape and the per-head constant vectors need no storage.
#include "kernels/cuda/structured_qk.h"

#include <cuda_bf16.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cuda/check.h"

namespace longctx::cuda {
namespace {

constexpr int kD = 128;
constexpr int kPosPairs = 32;      // highest-frequency rotary pairs carry position
constexpr int kSemDims = 64;       // the other 32 pairs (64 dims) carry content
constexpr double kTheta = 500000;  // Llama-3 RoPE base
constexpr int kSinkKeys = 4;       // attention-sink tokens at the start
constexpr uint64_t kVerticalEvery = 256;  // one vertical ("newline") token per 256, by hash
constexpr int64_t kSegment = 2048;        // tokens per topic segment
constexpr int kTopics = 64;
// Key-side magnitudes.
constexpr float kPosAmp = 1.9f, kSinkAmp = 12.f, kVertAmp = 8.f, kTopicAmp = 6.7f;

// Query-side weights per head type: positional a, sink b, vertical beta, topic gamma.
struct Mix {
  float a, b, beta, gamma;
};
__constant__ Mix kMix[4] = {
    {0.50f, 4.0f, 2.0f, 2.0f},  // local-heavy
    {0.15f, 7.5f, 7.0f, 2.0f},  // vertical-heavy
    {0.15f, 4.0f, 2.0f, 6.7f},  // topic-heavy
    {0.30f, 6.0f, 5.0f, 4.5f},  // mixed
};

enum What : uint64_t { kNoise = 1, kTopicOf, kIsVert };

// Per-KV-head constant vectors, drawn on the host: positional c_g (2 per pair), the sink and
// vertical directions and the topic vectors (unit vectors in the 64 semantic dims).
constexpr int kTabPos = 0, kTabSink = 2 * kPosPairs, kTabVert = kTabSink + kSemDims, kTabTopic = kTabVert + kSemDims;
constexpr int kTabPerHead = kTabTopic + kTopics * kSemDims;

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__device__ __forceinline__ uint64_t hash4(uint64_t seed, uint64_t what, uint64_t a, uint64_t b) {
  return mix64(mix64(mix64(seed ^ (what << 56)) ^ a) ^ (b * 0x2545F4914F6CDD1Dull));
}
// Standard normal from a hash (Box-Muller).
__device__ __forceinline__ float gauss(uint64_t h) {
  const float u1 = (float((h >> 40) & 0xFFFFFF) + 1.f) / 16777217.f;
  const float u2 = float(h & 0xFFFFFF) / 16777216.f;
  return sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
}
__device__ __forceinline__ int sem_dim(int s) { return s < 32 ? 32 + s : 96 + (s - 32); }

struct Args {
  __nv_bfloat16* out;
  const float* tab;  // [n_kv_head][kTabPerHead]
  int64_t n_tok;
  int64_t pos0;
  int n_rows_head;  // heads per token in this tensor
  int group;        // query heads per KV head (1 for k)
  bool is_q;
  uint64_t seed;
  double theta[kPosPairs];  // rotary frequency of each positional pair
};

// One warp per row (token, head): lane f owns positional pair f (dims f and f + 64) and the
// semantic dims 32 + f and 96 + f, so each of the warp's four stores writes 64 contiguous bytes
// (one thread per row wrote 2-byte pieces 256 bytes apart; the fill is benchmark overhead
// inside every `bench model --synthetic-qk` prefill).
__global__ void structured_kernel(Args a) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = int(threadIdx.x % 32);
  if (row >= a.n_tok * a.n_rows_head) return;
  const int64_t pos = a.pos0 + row / a.n_rows_head;
  const int head = int(row % a.n_rows_head);
  const uint64_t id = uint64_t(pos) * uint64_t(a.n_rows_head) + uint64_t(head);  // absolute row id
  const int g = a.is_q ? head / a.group : head;  // KV head whose constants this row shares
  const float* tab = a.tab + int64_t(g) * kTabPerHead;
  const Mix m = kMix[(head * 7 + 3) % 4];
  __nv_bfloat16* o = a.out + row * kD;
  const uint64_t qk = a.is_q ? 1 : 2;
  auto noise = [&](int d) { return gauss(hash4(a.seed + qk, kNoise, id, uint64_t(d))); };
  // positional pair f = lane: R(pos) c_g (times a for queries)
  static_assert(kPosPairs == 32 && kSemDims == 64, "one warp lane per positional pair, two semantic dims");
  {
    const int f = lane;
    const float pa = a.is_q ? m.a : 1.f;
    const float cx = kPosAmp * tab[kTabPos + 2 * f], cy = kPosAmp * tab[kTabPos + 2 * f + 1];
    const double ang = double(pos) * a.theta[f];  // reduced mod 2 pi in double, then float sincos
    const float red = float(ang - 6.283185307179586 * rint(ang * 0.15915494309189535));
    float sn, cs;
    sincosf(red, &sn, &cs);
    o[f] = __float2bfloat16(pa * (cx * cs - cy * sn) + noise(f));
    o[f + 64] = __float2bfloat16(pa * (cy * cs + cx * sn) + noise(f + 64));
  }
  // semantic dims s = lane and lane + 32
  const uint64_t topic = hash4(a.seed, kTopicOf, uint64_t(pos / kSegment), 0) % kTopics;
  const bool sink = pos < kSinkKeys;
  const bool vert = hash4(a.seed, kIsVert, uint64_t(pos), 0) % kVerticalEvery == 0;
  float ws, wv, wt;
  if (a.is_q) {
    ws = m.b, wv = m.beta, wt = m.gamma;
  } else {
    ws = sink ? kSinkAmp : 0.f, wv = vert ? kVertAmp : 0.f, wt = kTopicAmp;
  }
  const float* tt = tab + kTabTopic + int64_t(topic) * kSemDims;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int s = lane + 32 * half;
    const float x = ws * tab[kTabSink + s] + wv * tab[kTabVert + s] + wt * tt[s];
    const int d = sem_dim(s);
    o[d] = __float2bfloat16(x + noise(d));
  }
}

// Host: the constant table (positional components N(0,1); directions normalised to unit length).
std::vector<float> make_table(int n_kv_head, uint64_t seed) {
  std::vector<float> t(size_t(n_kv_head) * kTabPerHead);
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 17);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int g = 0; g < n_kv_head; ++g) {
    float* h = t.data() + size_t(g) * kTabPerHead;
    for (int i = 0; i < 2 * kPosPairs; ++i) h[kTabPos + i] = nd(rng);
    auto unit = [&](float* v) {
      double n2 = 0;
      for (int s = 0; s < kSemDims; ++s) v[s] = nd(rng), n2 += double(v[s]) * v[s];
      for (int s = 0; s < kSemDims; ++s) v[s] = float(v[s] / std::sqrt(n2));
    };
    unit(h + kTabSink);
    unit(h + kTabVert);
    for (int tp = 0; tp < kTopics; ++tp) unit(h + kTabTopic + tp * kSemDims);
  }
  return t;
}

}  // namespace

StructuredQk::StructuredQk(int n_head, int n_kv_head, uint64_t seed) : n_head_(n_head), n_kv_head_(n_kv_head) {
  LC_REQUIRE(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0, "StructuredQk: bad heads %d/%d", n_head,
             n_kv_head);
  const std::vector<float> tab = make_table(n_kv_head, seed);
  table_ = dev_malloc(tab.size() * sizeof(float));
  copy_h2d(table_, tab.data(), tab.size() * sizeof(float));
}

StructuredQk::~StructuredQk() { dev_free(table_); }

void StructuredQk::fill(const StructuredQkFill& p, Stream s) const {
  LC_REQUIRE(p.n_tok >= 0 && p.pos0 >= 0, "StructuredQk: bad rows %lld at %lld", (long long)p.n_tok, (long long)p.pos0);
  constexpr int kThreads = 256;  // 8 rows (one warp each) per block
  for (int which = 0; which < 2; ++which) {
    Args a{};
    a.is_q = which == 0;
    a.out = static_cast<__nv_bfloat16*>(a.is_q ? p.q : p.k);
    if (!a.out || p.n_tok == 0) continue;
    a.tab = static_cast<const float*>(table_);
    a.n_tok = p.n_tok;
    a.pos0 = p.pos0;
    a.n_rows_head = a.is_q ? n_head_ : n_kv_head_;
    a.group = n_head_ / n_kv_head_;
    a.seed = p.seed;
    for (int f = 0; f < kPosPairs; ++f) a.theta[f] = std::pow(kTheta, -2.0 * f / kD);
    const int64_t rows = p.n_tok * a.n_rows_head;
    const int64_t blocks = (rows * 32 + kThreads - 1) / kThreads;
    LC_REQUIRE(blocks <= 0x7fffffff, "StructuredQk: %lld rows exceed the grid", (long long)rows);
    structured_kernel<<<unsigned(blocks), kThreads, 0, static_cast<cudaStream_t>(s)>>>(a);
    LC_LAUNCH_CHECK("structured_kernel rows=%lld pos0=%lld", (long long)rows, (long long)p.pos0);
  }
}

}  // namespace longctx::cuda

// attention.cpp (ref): see attention.h.
//
// One task = (KV head, query tile). The `group` query heads that share the KV head are packed
// into one matrix Qp[m*group, d] (row = (query i, head g)), so K and V are read once per tile
// and the GEMMs are `group` times taller: S = scale * Qp K^T, row softmax, Op = P V, unpack.
#include "kernels/ref/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/ref/fast_exp.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {

namespace {

void check_params(const AttnParams& p) {
  if (!p.q || !p.k || !p.v || !p.o) fail("attention: null q/k/v/o pointer");
  if (p.n_head <= 0 || p.n_kv_head <= 0 || p.n_head % p.n_kv_head != 0)
    fail("attention: n_head {} must be a positive multiple of n_kv_head {}", p.n_head, p.n_kv_head);
  if (p.head_dim <= 0) fail("attention: head_dim {} must be positive", p.head_dim);
  if (p.window < 0) fail("attention: sliding window {} must be >= 0", p.window);
  if (p.window > 0 && !p.causal) fail("attention: a sliding window needs causal attention");
  if (p.causal && p.q_pos0 + p.n_q > p.n_kv)
    fail("attention: causal queries reach position {} but only {} keys are given", p.q_pos0 + p.n_q - 1,
         p.n_kv);
}

// Unnormalised softmax of one score row over its entries [begin, end), in place
// (row[j] = exp(s_j - max)); zeros the rest of the n entries. Returns {max, sum}; the caller
// divides the output row by sum after P V, which saves a pass over the row.
std::pair<float, float> softmax_row(float* row, int64_t begin, int64_t end, int64_t n) {
  // `omp simd` (with -fopenmp-simd) lets the max/sum reductions vectorise without -ffast-math.
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t j = begin; j < end; ++j) mx = row[j] > mx ? row[j] : mx;
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = begin; j < end; ++j) {
    row[j] = fast_exp(row[j] - mx);
    sum += row[j];
  }
  std::fill(row, row + begin, 0.f);
  std::fill(row + end, row + n, 0.f);
  return {mx, sum};
}

// First key a causal query at position `pos` sees (window 0: key 0).
int64_t first_key(int64_t pos, int64_t window) { return window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0; }

}  // namespace

// s[h*len + j] = scale * q_h . k_j for every query head h, keys j = 0..len-1 of one key range;
// q [n_head, d]; key row j at k0 + j*ldk holds all KV heads [n_kv_head, d] (query head h reads
// KV head h/group). Rows are read whole and in order, which streams the cache from memory.
// D > 0 fixes the head dim at compile time (unrolled dots); D == 0 uses d_rt.
template <int D>
void decode_scores(const float* q, const float* k0, int64_t ldk, int64_t len, int n_head, int group, float scale,
                   float* s, int d_rt = 0) {
  const int d = D > 0 ? D : d_rt;
  for (int64_t j = 0; j < len; ++j) {
    const float* krow = k0 + j * ldk;
    for (int h = 0; h < n_head; ++h) {
      const float* k = krow + (h / group) * d;
      const float* qh = q + h * d;
      float acc = 0.f;
#pragma omp simd reduction(+ : acc)
      for (int c = 0; c < d; ++c) acc += qh[c] * k[c];
      s[h * len + j] = acc * scale;
    }
  }
}

// o[h*d + c] += sum_j s[h*len + j] * v_j[h/group][c], value rows v0 + j*ldk read in order.
template <int D>
void decode_values(const float* s, const float* v0, int64_t ldk, int64_t len, int n_head, int group, float* o,
                   int d_rt = 0) {
  const int d = D > 0 ? D : d_rt;
  for (int64_t j = 0; j < len; ++j) {
    const float* vrow = v0 + j * ldk;
    for (int h = 0; h < n_head; ++h) {
      const float* v = vrow + (h / group) * d;
      const float w = s[h * len + j];
      float* oh = o + h * d;
#pragma omp simd
      for (int c = 0; c < d; ++c) oh[c] += w * v[c];
    }
  }
}

// Decode (one query): split-KV over key ranges. Each task streams its rows of K and V once for
// all heads (GQA: a KV head is read once for its whole query-head group) and keeps unnormalised
// partials (max, sum, o) per head, merged exactly through their maxima. At 4K context the KV
// cache is a quarter of the bytes of a decode step, so reading it in order matters.
void attention_decode_ref(const AttnParams& p, ThreadPool& pool) {
  const int d = p.head_dim, H = p.n_head;
  const int group = p.n_head / p.n_kv_head;
  const int64_t ldk = int64_t(p.n_kv_head) * d;
  const int64_t key0 = p.causal ? first_key(p.q_pos0, p.window) : 0;  // keys [key0, key_end)
  const int64_t key_end = p.causal ? p.q_pos0 + 1 : p.n_kv;
  const int64_t n_keys = key_end - key0;
  // Enough splits to keep every thread busy, none shorter than kMinSplitKeys keys.
  constexpr int64_t kMinSplitKeys = 256;
  const int64_t n_split = std::clamp<int64_t>(int64_t(pool.size()) * 2, 1, std::max<int64_t>(1, n_keys / kMinSplitKeys));
  const int64_t split_len = (n_keys + n_split - 1) / n_split;
  // Partials per (split, head): max, sum, o[d].
  std::vector<float> pm(size_t(n_split * H), -std::numeric_limits<float>::infinity());
  std::vector<float> pl(size_t(n_split * H), 0.f), po(size_t(n_split * H * d), 0.f);
  pool.parallel_for(n_split, [&](int64_t t0, int64_t t1) {
    std::vector<float> s;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t j0 = key0 + t * split_len, j1 = std::min(key_end, j0 + split_len);
      if (j1 <= j0) continue;
      const int64_t len = j1 - j0;
      s.resize(size_t(len * H));
      const float* k0 = p.k + j0 * ldk;
      if (d == 64) decode_scores<64>(p.q, k0, ldk, len, H, group, p.scale, s.data());
      else if (d == 128) decode_scores<128>(p.q, k0, ldk, len, H, group, p.scale, s.data());
      else decode_scores<0>(p.q, k0, ldk, len, H, group, p.scale, s.data(), d);
      for (int h = 0; h < H; ++h) {
        const auto [mx, sum] = softmax_row(s.data() + h * len, 0, len, len);
        pm[size_t(t * H + h)] = mx;
        pl[size_t(t * H + h)] = sum;
      }
      float* o = po.data() + t * H * d;
      const float* v0 = p.v + j0 * ldk;
      if (d == 64) decode_values<64>(s.data(), v0, ldk, len, H, group, o);
      else if (d == 128) decode_values<128>(s.data(), v0, ldk, len, H, group, o);
      else decode_values<0>(s.data(), v0, ldk, len, H, group, o, d);
    }
  });
  for (int h = 0; h < H; ++h) {  // merge the splits of each head
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t sp = 0; sp < n_split; ++sp) mx = std::max(mx, pm[size_t(sp * H + h)]);
    float* o = p.o + int64_t(h) * d;
    std::fill_n(o, d, 0.f);
    float sum = 0.f;
    for (int64_t sp = 0; sp < n_split; ++sp) {
      const int64_t idx = sp * H + h;
      if (pl[size_t(idx)] == 0.f) continue;
      const float w = std::exp(pm[size_t(idx)] - mx);
      sum += pl[size_t(idx)] * w;
      for (int c = 0; c < d; ++c) o[c] += po[size_t(idx * d + c)] * w;
    }
    if (sum > 0.f) {
      for (int c = 0; c < d; ++c) o[c] /= sum;
    }
    if (p.lse) p.lse[h] = sum > 0.f ? mx + std::log(sum) : -std::numeric_limits<float>::infinity();
  }
}

void attention_dense_ref(const AttnParams& p, ThreadPool& pool) {
  check_params(p);
  if (p.n_q == 0) return;
  if (p.n_q == 1) return attention_decode_ref(p, pool);
  const int d = p.head_dim;
  const int group = p.n_head / p.n_kv_head;
  const int64_t ldq = int64_t(p.n_head) * d;     // Q/O row stride (one token)
  const int64_t ldk = int64_t(p.n_kv_head) * d;  // K/V row stride
  const int64_t n_tiles = (p.n_q + kAttnQueryTile - 1) / kAttnQueryTile;

  pool.parallel_for(int64_t(p.n_kv_head) * n_tiles, [&](int64_t t0, int64_t t1) {
    // packed Q [rows, d], scores [rows, n_keys], packed O [rows, d], softmax sums [rows]
    std::vector<float> qp, s, op, sums;
    for (int64_t t = t0; t < t1; ++t) {
      const int hk = int(t / n_tiles);
      const int64_t i0 = (t % n_tiles) * kAttnQueryTile;
      const int64_t m = std::min<int64_t>(kAttnQueryTile, p.n_q - i0);
      const int64_t rows = m * group;
      // Keys [k_lo, k_lo + n_keys): from the first query's window start (0 without a window) to
      // the last query's position (all keys when not causal).
      const int64_t k_lo = p.causal ? first_key(p.q_pos0 + i0, p.window) : 0;
      const int64_t n_keys = (p.causal ? p.q_pos0 + i0 + m : p.n_kv) - k_lo;
      qp.resize(size_t(rows * d));
      op.resize(size_t(rows * d));
      s.resize(size_t(rows * std::max<int64_t>(n_keys, 1)));
      sums.assign(size_t(rows), 0.f);
      for (int64_t i = 0; i < m; ++i)  // heads hk*group .. +group are contiguous in a token row
        std::memcpy(qp.data() + i * group * d, p.q + (i0 + i) * ldq + int64_t(hk) * group * d,
                    size_t(group * d) * sizeof(float));
      if (n_keys > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(n_keys), d, p.scale, qp.data(), d,
                    p.k + k_lo * ldk + int64_t(hk) * d, int(ldk), 0.f, s.data(), int(n_keys));
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = r / group;
        const int h = hk * group + int(r % group);
        const int64_t pos = p.q_pos0 + i0 + i;
        const int64_t begin = p.causal ? first_key(pos, p.window) - k_lo : 0;  // row's keys [begin, end)
        const int64_t end = p.causal ? pos + 1 - k_lo : n_keys;
        float lse = -std::numeric_limits<float>::infinity();
        if (end > begin) {
          const auto [mx, sum] = softmax_row(s.data() + r * n_keys, begin, end, n_keys);
          sums[size_t(r)] = sum;
          lse = mx + std::log(sum);
        }
        if (p.lse) p.lse[int64_t(h) * p.n_q + i0 + i] = lse;
      }
      if (n_keys > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), d, int(n_keys), 1.f, s.data(),
                    int(n_keys), p.v + k_lo * ldk + int64_t(hk) * d, int(ldk), 0.f, op.data(), d);
      } else {
        std::fill(op.begin(), op.end(), 0.f);
      }
      for (int64_t r = 0; r < rows; ++r) {  // normalise: O row / softmax sum
        const float inv = sums[size_t(r)] > 0 ? 1.f / sums[size_t(r)] : 0.f;
        for (int c = 0; c < d; ++c) op[size_t(r * d + c)] *= inv;
      }
      for (int64_t i = 0; i < m; ++i)
        std::memcpy(p.o + (i0 + i) * ldq + int64_t(hk) * group * d, op.data() + i * group * d,
                    size_t(group * d) * sizeof(float));
    }
  });
}

}  // namespace longctx

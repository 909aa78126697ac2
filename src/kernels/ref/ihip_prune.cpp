// ihip_prune.cpp: see ihip_prune.h.
#include "kernels/ref/ihip_prune.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/ref/fp8_e4m3.h"
#include "kernels/ref/hip_topk.h"
#include "util/error.h"

namespace longctx {

IhipRopeTable ihip_rope_table(const float* inv_freq, int head_dim, int64_t n_pos) {
  IhipRopeTable t;
  t.half = head_dim / 2;
  t.n_pos = n_pos;
  t.cos.resize(size_t(n_pos * t.half));
  t.sin.resize(size_t(n_pos * t.half));
  for (int64_t p = 0; p < n_pos; ++p)
    for (int i = 0; i < t.half; ++i) {
      const float a = float(p) * inv_freq[i];
      t.cos[size_t(p * t.half + i)] = std::cos(a);
      t.sin[size_t(p * t.half + i)] = std::sin(a);
    }
  return t;
}

void ihip_rotate(const float* x, float* out, int head_dim, const IhipRopeTable& t, int64_t pos) {
  if (pos < 0 || pos >= t.n_pos) fail("internal: infinitehip RoPE position {} outside the table [0, {})", pos, t.n_pos);
  const int half = head_dim / 2;
  const float* c = t.cos.data() + pos * t.half;
  const float* s = t.sin.data() + pos * t.half;
  for (int i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    const float bs = b * s[i], as = a * s[i];
    out[i] = std::fma(a, c[i], -bs);
    out[i + half] = std::fma(b, c[i], as);
  }
}

int64_t ihip_query_pos(IhipRopeMode mode, int64_t i_orig, int64_t n_chunk, int64_t n_stream) {
  switch (mode) {
    case IhipRopeMode::relative: return n_stream + 1;
    case IhipRopeMode::chunk_indexed: return std::min(i_orig, std::max<int64_t>(n_chunk - 1, 0) + n_stream);
    case IhipRopeMode::none: break;
  }
  return i_orig;
}

int64_t ihip_key_pos(IhipRopeMode mode, int branch, int64_t chunk) {
  return mode == IhipRopeMode::relative ? branch : chunk;  // none: unused (keys are not rotated)
}

void ihip_pack_queries(const float* q, int n_head, int n_kv_head, int head_dim, int64_t row0, int64_t rows,
                       int64_t pos0, IhipRopeMode mode, const IhipRopeTable* table, int64_t n_chunk,
                       int64_t n_stream, std::vector<float>& out) {
  const int group = n_head / n_kv_head, d = head_dim;
  out.resize(size_t(int64_t(n_head) * rows * d));
  for (int h = 0; h < n_head; ++h) {
    const int g = h / group, hh = h % group;
    for (int64_t r = 0; r < rows; ++r) {
      const float* src = q + ((row0 + r) * n_head + h) * d;
      float* dst = out.data() + ((int64_t(g) * group + hh) * rows + r) * d;
      if (mode == IhipRopeMode::none)
        std::copy_n(src, d, dst);
      else
        ihip_rotate(src, dst, d, *table, ihip_query_pos(mode, pos0 + r, n_chunk, n_stream));
    }
  }
}

namespace {

// Key `key` of KV head g as the pruning frame sees it (dequantised, rotated at key_pos unless
// RoPE none); deq and rot: head_dim scratch floats each.
const float* frame_key(const IhipStageInput& in, int g, int32_t key, int64_t key_pos, float* deq, float* rot) {
  const int d = in.head_dim;
  const float* k = in.k_fp8 ? nullptr : in.k + int64_t(key) * in.k_stride + int64_t(g) * d;
  if (in.k_fp8) {
    const uint8_t* b = in.k_fp8 + int64_t(key) * in.k_stride + int64_t(g) * d;
    for (int i = 0; i < d; ++i) deq[i] = e4m3_to_f32(b[i]) * in.k_scale;
    k = deq;
  }
  if (in.rope != IhipRopeMode::none) {
    ihip_rotate(k, rot, d, *in.table, key_pos);
    k = rot;
  }
  return k;
}

}  // namespace

float ihip_probe(const IhipStageInput& in, int g, int32_t key, int64_t key_pos) {
  const int d = in.head_dim;
  float deq[512], rot[512];
  const float* k = frame_key(in, g, key, key_pos, deq, rot);
  const float* q = in.q + int64_t(g) * in.n_qs * d;
  const float* off = in.offset ? in.offset + int64_t(g) * in.n_qs : nullptr;
  float best = -std::numeric_limits<float>::infinity();
  for (int t = 0; t < in.n_qs; ++t) {
    float v = hip_dot(q + int64_t(t) * d, k, d);
    if (off) v -= off[t];
    if (v > best) best = v;  // NaN never wins
  }
  return best;
}

int64_t ihip_local_key_pos(IhipRopeMode mode, int64_t n_chunk) {
  return ihip_key_pos(mode, 0, std::max<int64_t>(n_chunk - 1, 0));
}

void ihip_local_offsets(const IhipStageInput& in, const IhipLocalKeys& lk, std::vector<float>& out) {
  if (in.head_dim > 512) fail("internal: infinitehip pruning supports head_dim <= 512");
  const int d = in.head_dim;
  const int64_t rows = lk.rows, group = in.n_qs / rows, key_pos = ihip_local_key_pos(in.rope, lk.n_chunk);
  out.assign(size_t(int64_t(in.n_kv_head) * in.n_qs), -std::numeric_limits<float>::infinity());
  const int64_t q_last = lk.pos0 + rows - 1;
  float deq[512], rot[512];
  for (int g = 0; g < in.n_kv_head; ++g) {
    const float* q = in.q + int64_t(g) * in.n_qs * d;
    float* o = out.data() + int64_t(g) * in.n_qs;
    auto score = [&](int64_t j) {  // key j against every row that attends it (rows at pos >= j)
      const float* k = frame_key(in, g, int32_t(j), key_pos, deq, rot);
      for (int64_t r = std::max<int64_t>(0, j - lk.pos0); r < rows; ++r)
        for (int64_t h = 0; h < group; ++h) {
          const int64_t t = h * rows + r;
          const float v = hip_dot(q + t * d, k, d);
          if (v > o[t]) o[t] = v;  // NaN never wins
        }
    };
    for (int64_t j = 0; j < std::min(lk.n_sink, q_last + 1); ++j) score(j);
    for (int64_t j = std::max(lk.win_begin, lk.n_sink); j <= q_last; ++j) score(j);
  }
}

int ihip_select_rep(const IhipStageInput& in, int g, const int32_t* entries, int n, int64_t chunk, float* rep_score) {
  const int64_t pos_left = ihip_key_pos(in.rope, 0, chunk), pos_right = ihip_key_pos(in.rope, 1, chunk);
  int lo = 0, hi = n;
  float best = -std::numeric_limits<float>::infinity();
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    const float left = ihip_probe(in, g, entries[lo + (mid - lo) / 2], pos_left);
    const float right = ihip_probe(in, g, entries[mid + (hi - mid) / 2], pos_right);
    if (left > right)
      hi = mid;
    else
      lo = mid;  // ties go right
    best = std::max(best, std::max(left, right));
  }
  if (rep_score) {
    // The last comparison probed the representative at its branch's position; the authors'
    // final (one-entry) iteration probes it at both. Where the positions coincide, and a chunk of
    // more than one entry, that adds nothing.
    if (pos_left != pos_right || n == 1) {
      best = std::max(best, ihip_probe(in, g, entries[lo], pos_right));
      if (pos_left != pos_right) best = std::max(best, ihip_probe(in, g, entries[lo], pos_left));
    }
    *rep_score = best;
  }
  return lo;
}

std::vector<float> ihip_chunk_scores(const IhipStage& st, const IhipStageInput& in, std::span<const int32_t> cand) {
  if (in.head_dim > 512) fail("internal: infinitehip pruning supports head_dim <= 512");
  const int64_t n = int64_t(cand.size()), n_chunk = (n + st.l_c - 1) / st.l_c;
  std::vector<float> score(size_t(n_chunk), -std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < n_chunk; ++j) {
    const int32_t* e = cand.data() + j * st.l_c;
    const int len = int(std::min<int64_t>(st.l_c, n - j * st.l_c));
    float best = -std::numeric_limits<float>::infinity();
    for (int g = 0; g < in.n_kv_head; ++g) {
      float v = 0.f;
      ihip_select_rep(in, g, e, len, j, &v);
      if (v > best) best = v;
    }
    score[size_t(j)] = best;
  }
  return score;
}

std::vector<int32_t> ihip_top_chunks(std::span<const float> score, int64_t keep) {
  std::vector<int32_t> order(score.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
  if (int64_t(order.size()) <= keep) return order;
  auto before = [&](int32_t x, int32_t y) {
    const float sx = score[size_t(x)], sy = score[size_t(y)];
    return sx != sy ? sx > sy : x < y;  // scores are never NaN (ihip_probe skips NaN dots)
  };
  std::nth_element(order.begin(), order.begin() + keep, order.end(), before);
  order.resize(size_t(keep));
  std::sort(order.begin(), order.end());
  return order;
}

void ihip_prune_stage(const IhipStage& st, const IhipStageInput& in, std::span<const int32_t> cand,
                      std::vector<int32_t>& out) {
  out.clear();
  const int64_t n = int64_t(cand.size()), n_chunk = (n + st.l_c - 1) / st.l_c;
  if (n_chunk <= st.keep_chunks()) {
    out.assign(cand.begin(), cand.end());
    return;
  }
  const std::vector<float> score = ihip_chunk_scores(st, in, cand);
  for (const int32_t j : ihip_top_chunks(score, st.keep_chunks())) {
    const int64_t b = int64_t(j) * st.l_c, e = std::min(n, b + st.l_c);
    out.insert(out.end(), cand.begin() + b, cand.begin() + e);
  }
}

}  // namespace longctx

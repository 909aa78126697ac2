// ihip_prune.cuh (cuda, internal): the device pieces InfiniteHiP's decode (ihip_prune.cu) and
// prefill (ihip_prune_prefill.cu) pruning stages share: a stage's candidate list, the RoPE
// positions and rotation of kernels/ref/ihip_prune.h, the ranking key, and the select step (one
// CTA ranks one query block's / sequence's chunks and writes the kept chunks' entries).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace longctx::cuda::ihip {

constexpr int kD = 128, kHalf = kD / 2;  // head_dim; rotate-half pairs (i, i + 64)
constexpr int kSelectThreads = 1024;

struct Cands {  // one sequence's / query block's stage input
  const int32_t* list;  // nullptr: the range base + i
  int64_t base, n;
  __device__ int32_t at(int64_t i) const { return list ? list[i] : int32_t(base + i); }
};

// The stage input of a block whose last query sits at q_last: the previous stage's list
// in[0 .. in_len), or (in == nullptr) the stage-0 range [n_sink, max(n_sink, q_last - n_stream + 1)).
__device__ inline Cands cands_of(const int32_t* in, int64_t in_len, int64_t q_last, int64_t n_sink, int64_t n_stream) {
  Cands c;
  if (in) {
    c.list = in;
    c.base = 0;
    c.n = in_len;
  } else {
    const int64_t end = q_last - n_stream + 1 > n_sink ? q_last - n_stream + 1 : n_sink;
    c.list = nullptr;
    c.base = n_sink;
    c.n = q_last < 0 ? 0 : end - n_sink;
  }
  return c;
}

// ihip_query_pos: 1 relative, 2 chunk-indexed, 0 none (the query's own position).
__device__ inline int64_t query_pos(int mode, int64_t pos, int64_t n_chunk, int64_t n_stream) {
  if (mode == 1) return n_stream + 1;
  if (mode == 2) {
    const int64_t cap = (n_chunk - 1 > 0 ? n_chunk - 1 : 0) + n_stream;
    return pos < cap ? pos : cap;
  }
  return pos;
}

// Rotate-half of the pair (a, b) = (x[i], x[i + 64]) at the table row: ihip_rotate's formula.
__device__ inline void rotate(float& a, float& b, float c, float s) {
  const float bs = __fmul_rn(b, s), as = __fmul_rn(a, s);
  const float na = fmaf(a, c, -bs), nb = fmaf(b, c, as);
  a = na;
  b = nb;
}

// Sort key: ascending = higher score first, then the earlier chunk (-0 counts as +0).
__device__ inline uint64_t sort_key(float score, int64_t chunk) {
  if (score == 0.f) score = 0.f;
  const uint32_t bits = __float_as_uint(score);
  const uint32_t ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (uint64_t(~ordered) << 32) | uint64_t(uint32_t(chunk));
}
constexpr uint64_t kEmptyKey = ~uint64_t(0);

__host__ __device__ inline int64_t pow2_at_least(int64_t n) {
  int64_t v = 1;
  while (v < n) v *= 2;
  return v;
}

// Dynamic shared memory of select_chunks for max_chunks chunks and keep kept ones.
inline size_t select_smem(int64_t max_chunks, int64_t keep) {
  const int64_t M = pow2_at_least(max_chunks);
  return size_t(M) * 8 + size_t(M) * 4 + kSelectThreads * 4 + size_t(keep) * 4;
}

// The select step of one stage for one block (every thread of a kSelectThreads CTA calls it):
// chunk i's score is score(i) (i < n_chunk = ceil(c.n / l_c) <= max_chunks); writes the K = keep
// best chunks' entries to out in position order and their count to *out_len (all candidates when
// n_chunk <= keep). How: bitonic sort of (score desc, chunk asc) keys, the first K flagged, block
// prefix sum over the flags, each kept chunk's entries copied to its rank's slot.
template <class Score>
__device__ void select_chunks(const Cands& c, int l_c, int64_t keep, int64_t max_chunks, Score score, int32_t* out,
                              int32_t* out_len, char* smem) {
  const int tid = threadIdx.x;
  const int64_t n_chunk = (c.n + l_c - 1) / l_c;
  if (n_chunk > max_chunks) __trap();  // the host bound is broken: never read past the workspace
  if (n_chunk <= keep) {  // every candidate survives
    for (int64_t i = tid; i < c.n; i += kSelectThreads) out[i] = c.at(i);
    if (tid == 0) *out_len = int32_t(c.n);
    return;
  }
  const int64_t P = pow2_at_least(n_chunk), M = pow2_at_least(max_chunks);
  uint64_t* key = reinterpret_cast<uint64_t*>(smem);
  int* flag = reinterpret_cast<int*>(key + M);
  int* scan = flag + M;  // [kSelectThreads]
  int32_t* chunk_of_rank = reinterpret_cast<int32_t*>(scan + kSelectThreads);  // [keep]
  for (int64_t i = tid; i < P; i += kSelectThreads) {
    key[i] = i < n_chunk ? sort_key(score(i), i) : kEmptyKey;
    flag[i] = 0;
  }
  __syncthreads();
  for (int64_t kk = 2; kk <= P; kk *= 2)
    for (int64_t jj = kk / 2; jj > 0; jj /= 2) {
      for (int64_t i = tid; i < P; i += kSelectThreads) {
        const int64_t ixj = i ^ jj;
        if (ixj > i) {
          const uint64_t a = key[i], b = key[ixj];
          if ((a > b) == ((i & kk) == 0)) key[i] = b, key[ixj] = a;
        }
      }
      __syncthreads();
    }
  for (int64_t i = tid; i < keep; i += kSelectThreads) flag[uint32_t(key[i])] = 1;
  __syncthreads();
  // Ranks of the kept chunks in chunk (= position) order: per-thread runs, block prefix sum.
  const int64_t per = (n_chunk + kSelectThreads - 1) / kSelectThreads;
  int kept = 0;
  for (int64_t i = tid * per; i < (tid + 1) * per && i < n_chunk; ++i) kept += flag[i];
  scan[tid] = kept;
  __syncthreads();
  for (int off = 1; off < kSelectThreads; off *= 2) {
    const int v = tid >= off ? scan[tid - off] : 0;
    __syncthreads();
    scan[tid] += v;
    __syncthreads();
  }
  int r = scan[tid] - kept;
  for (int64_t i = tid * per; i < (tid + 1) * per && i < n_chunk; ++i)
    if (flag[i]) chunk_of_rank[r++] = int32_t(i);
  __syncthreads();
  // Entries: rank r's chunk fills out[r * l_c ...]; only the last chunk may be short, and it ranks last.
  for (int64_t o = tid; o < keep * l_c; o += kSelectThreads) {
    const int64_t e = int64_t(chunk_of_rank[o / l_c]) * l_c + o % l_c;
    if (e < c.n) out[o] = c.at(e);
  }
  if (tid == 0) {
    const int64_t last = chunk_of_rank[keep - 1];
    *out_len = int32_t((keep - 1) * l_c + (c.n - last * l_c < l_c ? c.n - last * l_c : l_c));
  }
}

}  // namespace longctx::cuda::ihip

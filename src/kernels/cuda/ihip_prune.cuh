// ihip_prune.cuh (cuda, internal): the device pieces InfiniteHiP's decode (ihip_prune.cu) and
// prefill (ihip_prune_prefill.cu) pruning stages share: a stage's candidate list, the RoPE
// positions and rotation of kernels/ref/ihip_prune.h, the ranking key, and the select step (one
// CTA ranks one query block's / sequence's chunks with topk::block_top_k and writes the kept chunks'
// entries).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/topk_select.cuh"

namespace longctx::cuda::ihip {

constexpr int kSelectThreads = 1024;
constexpr int kCopyBatch = 8;  // list entries a select thread loads before it stores them

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

// Rotate-half of the pair (a, b) = (x[i], x[i + D / 2]) at the table row: ihip_rotate's formula.
__device__ inline void rotate(float& a, float& b, float c, float s) {
  const float bs = __fmul_rn(b, s), as = __fmul_rn(a, s);
  const float na = fmaf(a, c, -bs), nb = fmaf(b, c, as);
  a = na;
  b = nb;
}

using SelectShared = topk::BlockTopKShared<kSelectThreads>;

// Dynamic shared memory of select_chunks for max_chunks chunks and keep kept ones.
inline size_t select_smem(int64_t max_chunks, int64_t keep) {
  return sizeof(SelectShared) + size_t(max_chunks) * 4 + size_t(keep) * 4;
}

// The select step of one stage for one block (every thread of a kSelectThreads CTA calls it):
// chunk i's score is score(i) (i < n_chunk = ceil(c.n / l_c) <= max_chunks); writes the K = keep
// best chunks' entries to out in position order and their count to *out_len (all candidates when
// n_chunk <= keep). The ranking is ihip_prune.h's: score descending (-0 as +0), then the earlier
// chunk. How: the scores' order bits into shared memory, topk::block_top_k (a radix select of
// the K-th and ballot compaction: the kept chunks come out in chunk order), each kept chunk's
// entries copied to its rank's slot.
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
  auto& sh = *reinterpret_cast<SelectShared*>(smem);
  uint32_t* key = reinterpret_cast<uint32_t*>(smem + sizeof(SelectShared));  // [max_chunks]
  int32_t* chunk_of_rank = reinterpret_cast<int32_t*>(key + max_chunks);     // [keep]
  for (int64_t i = tid; i < n_chunk; i += kSelectThreads) key[i] = topk::order_bits(score(i));
  __syncthreads();
  topk::block_top_k<kSelectThreads>(key, int(n_chunk), int(keep), chunk_of_rank, sh);
  // Entries: rank r's chunk fills out[r * l_c ...]; only the last chunk may be short, and it
  // ranks last. A range (stage 0) loads nothing: one warp per rank, no divisions. A list: each
  // thread loads kCopyBatch entries before it stores any, so the copy waits on one round of load
  // latency per batch instead of one per rank (r = i / l_c by a shift when l_c is a power of two).
  const int lane = tid % 32;
  if (!c.list) {
    for (int64_t r = tid / 32; r < keep; r += kSelectThreads / 32) {
      const int64_t first = int64_t(chunk_of_rank[r]) * l_c;
      for (int e = lane; e < l_c && first + e < c.n; e += 32) out[r * l_c + e] = c.at(first + e);
    }
  } else {
    const uint32_t total = uint32_t(keep * l_c), lc = uint32_t(l_c);  // total = k <= out_cap < 2^31
    const int shift = (lc & (lc - 1)) == 0 ? __ffs(int(lc)) - 1 : -1;
    for (uint32_t i0 = tid; i0 < total; i0 += kSelectThreads * kCopyBatch) {
      int32_t v[kCopyBatch];
      bool ok[kCopyBatch];
#pragma unroll
      for (int u = 0; u < kCopyBatch; ++u) {
        const uint32_t i = i0 + uint32_t(u) * kSelectThreads, r = shift >= 0 ? i >> shift : i / lc;
        const int64_t src = i < total ? int64_t(chunk_of_rank[r]) * l_c + (i - r * lc) : c.n;
        ok[u] = src < c.n;
        v[u] = ok[u] ? c.list[src] : 0;
      }
#pragma unroll
      for (int u = 0; u < kCopyBatch; ++u)
        if (ok[u]) out[i0 + uint32_t(u) * kSelectThreads] = v[u];
    }
  }
  if (tid == 0) {
    const int64_t last = chunk_of_rank[keep - 1];
    *out_len = int32_t((keep - 1) * l_c + (c.n - last * l_c < l_c ? c.n - last * l_c : l_c));
  }
}

}  // namespace longctx::cuda::ihip

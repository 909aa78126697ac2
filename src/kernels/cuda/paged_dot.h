// paged_dot.h (cuda): TokenSelect's Paged Dot Product Kernel: per-query-head raw q.k of one query
// against key rows gathered by slot, in place (no contiguous copy of the candidates' keys).
//
// What: scores[h][j] = sum_d q[h][d] * k_pool[slots[j]][h / g][d], g = n_head / n_kv_head, no
// 1/sqrt(d) (paper Eq. 10). CPU twin: kernels/ref/paged_dot.h; tested by
// tests/cuda/test_tokenselect.cpp, timed by bench/bench_tokenselect.cu.
//   q       bf16 [n_head, head_dim]            the selection query (or q_f32: fp32, same shape,
//                                              e.g. the mean of a chunk's rotated queries)
//   k_pool  bf16 [n_rows, n_kv_head, head_dim] a page-size-1 pool: row = slot
//   slots   int32 [n_slot]                     e.g. a KV manager's page-size-1 slot table, offset
//   scores  fp32 [n_head, n_slot]             (or score_elem = f16: fp16, half the bytes the scan
//                                              writes and the vote reads; the stats are those of
//                                              the fp16 values)
//   (or k_elem = fp8_e4m3: k_pool e4m3 [n_rows, n_kv_head, head_dim], real key = stored * k_scale:
//   an fp8 KV cache's keys, half the bytes of the scan)
//   head_stats fp32 [n_head, paged_dot_stats_parts(n_slot, n_kv_head), 2] (optional): per head and
//   CTA the (max, sum of exp(score - max)) of the scores it wrote: the soft vote's first pass,
//   fused into the scan (soft_vote.h SoftVoteParams::head_stats folds them), so the vote reads the
//   32 x M scores once instead of twice.
// head_dim 64, 128 or 256 (Gemma 3's global layers); g from 1 to 8 (the mma's 8 columns).
// How: tensor cores (mma.m16n8k16): 16 gathered rows of one KV head x the GQA group's queries
// (g <= 8) per instruction, so each row is read once for all g query heads; rows are loaded
// straight into registers (16 contiguous bytes per thread) with head_dim summed in a permuted
// order that the query fragments share. fp32 queries are applied as bf16 hi + lo parts
// (relative error ~2^-16 of the query); accumulation in fp32. fp8 keys: 16 contiguous bytes per
// thread too (16 keys; 32-row tiles: the same bytes in flight per warp), widened in registers to fp16 (exact: every e4m3 value is an fp16) for
// mma.m16n8k16.f16, the queries as fp16 hi + lo (relative error ~2^-22; |q| < 65504, fp16's
// range), the scale applied to the fp32 sums.
#pragma once
#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace longctx::cuda {

enum class PagedDotKeys { bf16, fp8_e4m3 };
enum class ScoreElem { f32, f16 };  // the scores' storage (soft_vote.h reads either)

struct PagedDotParams {
  const void* q = nullptr;
  const float* q_f32 = nullptr;  // used instead of q when set
  const void* k_pool = nullptr;
  const int32_t* slots = nullptr;
  void* scores = nullptr;  // score_elem [n_head, n_slot]
  int64_t n_slot = 0;
  int n_head = 0;
  int n_kv_head = 0;
  int head_dim = 0;
  const int32_t* skip = nullptr;  // device int32 [1] or nullptr: nonzero returns at once (a cache hit)
  const int32_t* n_dev = nullptr; // device int32 [1] or nullptr: n_slot = clamp(*n_dev - n_sub, 0, n_slot),
  int32_t n_sub = 0;              // read on the device (n_slot is then the launch bound; graph replay)
  PagedDotKeys k_elem = PagedDotKeys::bf16;
  float k_scale = 1.f;             // fp8 keys: real = stored * k_scale (the fp8 cache's K scale)
  float* head_stats = nullptr;     // optional, see above; with n_dev, parts past the device count hold (-inf, 0)
  ScoreElem score_elem = ScoreElem::f32;
};

// The CTAs (stats parts per head) paged_dot launches for n_slot candidates and n_kv_head heads
// (n_slot: the launch bound); at most paged_dot_max_stats_parts() on this device.
int paged_dot_stats_parts(int64_t n_slot, int n_kv_head);
int paged_dot_max_stats_parts();

void paged_dot(const PagedDotParams& p, Stream s = nullptr);

}  // namespace longctx::cuda

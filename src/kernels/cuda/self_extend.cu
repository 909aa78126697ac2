// self_extend.cu (cuda): Self-Extend's near/far merge and decode prep; what and layout:
// self_extend.h.
// Merge: one warp per (row, head); every lane reads the two LSEs, then owns pairs of head dims
// (bf16x2 loads), reads near and far and writes the merged value in place of near (a lane reads
// exactly the elements it writes, so o may be both input and output).
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/rope_rotate.cuh"
#include "kernels/cuda/self_extend.h"

namespace longctx::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxHeadDim = 256;

__global__ void __launch_bounds__(kWarpsPerBlock * 32) self_extend_merge_kernel(const SelfExtendMergeParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t n_far = p.n_q - p.far_row0;
  const int64_t item = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);  // r * n_head + h
  if (item >= n_far * p.n_head) return;
  const int64_t r = item / p.n_head;
  const int h = int(item % p.n_head);
  const int64_t row = p.far_row0 + r;
  const float ln = p.lse_near[int64_t(h) * p.n_q + row];
  const float lf = p.lse_far[int64_t(h) * n_far + r];
  if (lf == -INFINITY) return;  // no far keys: o_near is the row's attention
  const float m = fmaxf(ln, lf);
  const float en = ln == -INFINITY ? 0.f : __expf(ln - m), ef = __expf(lf - m);
  const float wn = en / (en + ef), wf = ef / (en + ef);
  auto* o = reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p.o) + (row * p.n_head + h) * p.head_dim);
  const auto* far = static_cast<const __nv_bfloat16*>(p.o_far) + (r * p.n_head + h) * p.head_dim;
  const auto* f = reinterpret_cast<const __nv_bfloat162*>(far);
  for (int i = lane; i < p.head_dim / 2; i += 32) {
    const float2 a = __bfloat1622float2(o[i]), b = __bfloat1622float2(f[i]);
    o[i] = __floats2bfloat162_rn(wn * a.x + wf * b.x, wn * a.y + wf * b.y);
  }
}

// Decode prep: CTA job 0/1 = key row pos into the own / grouped copy, 2/3 = the query at its own
// / grouped position; see self_extend.h.
constexpr int kPrepThreads = 128;
constexpr int kPrepJobs = 4;
constexpr int kMaxHalf = 256;

__global__ void __launch_bounds__(kPrepThreads) self_extend_decode_prep_kernel(const SelfExtendDecodePrepParams p) {
  __shared__ float cs[kMaxHalf], sn[kMaxHalf];
  using rope_rotate::kPairsPerThread;
  const int job = blockIdx.x;
  const int64_t n = p.n_kv_dev ? int64_t(*p.n_kv_dev) : p.n_kv, pos = n - 1;
  if (job == 0 && threadIdx.x == 0) {
    p.lens[0] = int32_t(n);
    p.lens[1] = int32_t(n > p.neighbor ? n - p.neighbor : 0);
  }
  const bool key = job < 2, grouped = job & 1;
  const float fpos = float(grouped ? int64_t((key ? p.key_pos : p.query_pos)[pos]) : pos);
  const int half = p.head_dim / 2;
  for (int i = threadIdx.x; i < half; i += blockDim.x)
    rope_rotate::cos_sin(fpos, p.inv_freq[i], p.attn_factor, &cs[i], &sn[i]);
  __syncthreads();
  const int64_t row = int64_t(key ? p.n_kv_head : p.n_head) * p.head_dim;  // elements of the row
  const auto* src = static_cast<const __nv_bfloat16*>(key ? p.k : p.q) + (key ? pos * row : 0);
  void* dst_base = key ? (grouped ? p.k_grp : p.k_own) : (grouped ? p.q_grp : p.q_own);
  auto* dst = static_cast<__nv_bfloat16*>(dst_base) + (key ? pos * row : 0);
  const int groups = half / kPairsPerThread;  // 4-pair groups per head
  const int total = (key ? p.n_kv_head : p.n_head) * groups;
  for (int w = threadIdx.x; w < total; w += blockDim.x) {
    const int64_t h0 = int64_t(w / groups) * p.head_dim;
    rope_rotate::rotate4(src + h0, dst + h0, (w % groups) * kPairsPerThread, half, cs, sn);
  }
}

}  // namespace

void self_extend_decode_prep(const SelfExtendDecodePrepParams& p, Stream s) {
  LC_REQUIRE(p.k && p.k_own && p.k_grp && p.q && p.q_own && p.q_grp && p.key_pos && p.query_pos && p.inv_freq &&
                 p.lens,
             "self_extend_decode_prep: null pointer");
  LC_REQUIRE(p.n_kv_dev || p.n_kv >= 1, "self_extend_decode_prep: no key count (n_kv_dev null, n_kv %lld)",
             (long long)p.n_kv);
  LC_REQUIRE(p.head_dim > 0 && p.head_dim % (2 * rope_rotate::kPairsPerThread) == 0 && p.head_dim / 2 <= kMaxHalf,
             "self_extend_decode_prep: head_dim %d must be a multiple of %d and <= %d", p.head_dim,
             2 * rope_rotate::kPairsPerThread, 2 * kMaxHalf);
  LC_REQUIRE(p.n_head > 0 && p.n_kv_head > 0 && p.neighbor >= 0, "self_extend_decode_prep: heads %d/%d, W %lld",
             p.n_head, p.n_kv_head, (long long)p.neighbor);
  self_extend_decode_prep_kernel<<<kPrepJobs, kPrepThreads, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("self_extend_decode_prep_kernel heads=%d/%d d=%d", p.n_head, p.n_kv_head, p.head_dim);
}

void self_extend_merge(const SelfExtendMergeParams& p, Stream s) {
  LC_REQUIRE(p.o && p.lse_near && p.o_far && p.lse_far, "self_extend_merge: null pointer");
  LC_REQUIRE(p.head_dim > 0 && p.head_dim % 2 == 0 && p.head_dim <= kMaxHeadDim,
             "self_extend_merge: head_dim %d must be even and <= %d", p.head_dim, kMaxHeadDim);
  LC_REQUIRE(p.n_head > 0 && p.far_row0 >= 0 && p.far_row0 <= p.n_q, "self_extend_merge: far rows %lld..%lld of %lld",
             (long long)p.far_row0, (long long)p.n_q, (long long)p.n_q);
  const int64_t items = (p.n_q - p.far_row0) * p.n_head;
  if (items == 0) return;
  const int64_t blocks = (items + kWarpsPerBlock - 1) / kWarpsPerBlock;
  LC_REQUIRE(blocks <= 0x7fffffff, "self_extend_merge: too many rows");
  self_extend_merge_kernel<<<unsigned(blocks), kWarpsPerBlock * 32, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("self_extend_merge_kernel rows=%lld heads=%d d=%d", (long long)(p.n_q - p.far_row0), p.n_head,
                  p.head_dim);
}

}  // namespace longctx::cuda

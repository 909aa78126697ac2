// soft_vote.cu: see soft_vote.h.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include <cub/cub.cuh>

#include "kernels/cuda/check.h"
#include "kernels/cuda/soft_vote.h"

namespace longctx::cuda {

namespace {

constexpr int kSlices = 64;    // slices of M per head for the max / sum-exp pass
constexpr int kThreads = 256;  // threads per CTA
constexpr int kMaxHeads = 128;

struct MaxSum {  // layout = paged_dot's head_stats pairs {max, sum}
  float m, s;
};
static_assert(sizeof(MaxSum) == 2 * sizeof(float));
__device__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

// Per (head, slice): the slice's max and sum of exp(x - max). Each thread reads four scores at
// a time (16-byte loads; M's tail and unaligned rows element by element) and folds them into its
// running (max, sum) with one rescale per four, so the pass streams at memory speed instead of
// waiting on one exp chain per element. fp16 scores: element by element (TokenSelect's step
// takes paged_dot's fused stats instead of this pass).
template <typename S>
__global__ void head_stats_kernel(const S* __restrict__ scores, int64_t M, MaxSum* __restrict__ part,
                                  const int32_t* __restrict__ skip, const int32_t* __restrict__ m_dev, int32_t m_sub) {
  if (skip && *skip != 0) return;
  if (m_dev) M = min(max(int64_t(*m_dev) - m_sub, int64_t(0)), M);
  const int h = blockIdx.y, slice = blockIdx.x;
  const int64_t per = ((M + kSlices - 1) / kSlices + 3) / 4 * 4, j0 = slice * per, j1 = max(j0, min(M, j0 + per));
  const S* row = scores + int64_t(h) * M;
  MaxSum acc{-INFINITY, 0.f};
  int64_t j = j0;
  if constexpr (std::is_same_v<S, float>) if ((reinterpret_cast<uintptr_t>(row + j0) & 15) == 0) {
    for (j = j0 + 4 * threadIdx.x; j + 4 <= j1; j += 4 * blockDim.x) {
      const float4 x = *reinterpret_cast<const float4*>(row + j);
      const float m4 = fmaxf(fmaxf(x.x, x.y), fmaxf(x.z, x.w));
      acc = combine(acc, MaxSum{m4, __expf(x.x - m4) + __expf(x.y - m4) + __expf(x.z - m4) + __expf(x.w - m4)});
    }
    j = j0 + (j1 - j0) / 4 * 4;  // the tail below
  }
  for (int64_t e = j + threadIdx.x; e < j1; e += blockDim.x) acc = combine(acc, MaxSum{float(row[e]), 1.f});
  for (int off = 16; off > 0; off >>= 1)
    acc = combine(acc, MaxSum{__shfl_xor_sync(0xffffffffu, acc.m, off), __shfl_xor_sync(0xffffffffu, acc.s, off)});
  __shared__ MaxSum warp_acc[kThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_acc[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) acc = combine(acc, warp_acc[w]);
    part[h * kSlices + slice] = acc;
  }
}

// Per head (one CTA each): its (max, sum) parts folded in a fixed order into (max, 1 / Z), the
// only thing vote_kernel's CTAs read (so no CTA re-folds the parts). The parts are either the
// kSlices of head_stats_kernel or paged_dot's per-CTA stats (the same {max, sum} pairs).
__global__ void fold_kernel(const MaxSum* __restrict__ parts, int n_part, MaxSum* __restrict__ norm,
                            const int32_t* __restrict__ skip) {
  if (skip && *skip != 0) return;
  const int h = blockIdx.x;
  MaxSum acc{-INFINITY, 0.f};
  for (int i = threadIdx.x; i < n_part; i += blockDim.x) acc = combine(acc, parts[int64_t(h) * n_part + i]);
  for (int off = 16; off > 0; off >>= 1)
    acc = combine(acc, MaxSum{__shfl_xor_sync(0xffffffffu, acc.m, off), __shfl_xor_sync(0xffffffffu, acc.s, off)});
  __shared__ MaxSum warp_acc[kThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_acc[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) acc = combine(acc, warp_acc[w]);
    norm[h] = MaxSum{acc.m, 1.f / acc.s};
  }
}

// vote[j] = sum_h exp(s[h][j] - m_h) / Z_h (naive: sum_h s[h][j]); norm[h] = (m_h, 1 / Z_h).
// S: fp32 or fp16 scores (paged_dot's score_elem), the sums in fp32.
template <typename S>
__global__ void vote_kernel(const S* __restrict__ scores, int n_head, int64_t M, const MaxSum* __restrict__ norm,
                            bool naive, float* __restrict__ vote, const int32_t* __restrict__ skip,
                            const int32_t* __restrict__ m_dev, int32_t m_sub) {
  if (skip && *skip != 0) return;
  if (m_dev) M = min(max(int64_t(*m_dev) - m_sub, int64_t(0)), M);
  __shared__ float mh[kMaxHeads], inv_z[kMaxHeads];
  if (!naive)
    for (int h = threadIdx.x; h < n_head; h += blockDim.x) {
      mh[h] = norm[h].m;
      inv_z[h] = norm[h].s;
    }
  __syncthreads();
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < M; j += int64_t(gridDim.x) * blockDim.x) {
    float v = 0.f;
#pragma unroll 8
    for (int h = 0; h < n_head; ++h) {
      const float x = float(scores[int64_t(h) * M + j]);
      v += naive ? x : __expf(x - mh[h]) * inv_z[h];
    }
    vote[j] = v;
  }
}

__global__ void iota_kernel(int32_t* out, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = int32_t(i);
}
__global__ void add_offset_kernel(const int32_t* in, int32_t* out, int64_t n, int32_t offset) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = in[i] + offset;
}

int grid_for(int64_t n) { return int(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096)); }

size_t align_up(size_t x) { return (x + 255) & ~size_t(255); }

size_t cub_pairs_bytes(int64_t M) {
  size_t b = 0;
  cub::DeviceRadixSort::SortPairsDescending<float, int32_t>(nullptr, b, nullptr, nullptr, nullptr, nullptr, int(M));
  return b;
}
size_t cub_keys_bytes(int64_t k) {
  size_t b = 0;
  cub::DeviceRadixSort::SortKeys<int32_t>(nullptr, b, nullptr, nullptr, int(k));
  return b;
}

}  // namespace

// Layout: head_stats_kernel's parts [n_head, kSlices] | the folded (max, 1 / Z) [n_head].
size_t soft_vote_workspace_bytes(int n_head) { return size_t(n_head) * (kSlices + 1) * sizeof(MaxSum); }

void soft_vote(const SoftVoteParams& p, Stream s) {
  LC_REQUIRE(p.n_head > 0 && p.n_head <= kMaxHeads, "soft_vote: n_head %d (1..%d)", p.n_head, kMaxHeads);
  if (p.M <= 0) return;
  const auto st = static_cast<cudaStream_t>(s);
  auto* part = static_cast<MaxSum*>(p.workspace);
  MaxSum* norm = part + int64_t(p.n_head) * kSlices;
  LC_REQUIRE(!p.head_stats || (!p.naive && p.stats_parts > 0), "soft_vote: head stats (%d parts) for a naive vote",
             p.stats_parts);
  if (p.head_stats) {
    fold_kernel<<<p.n_head, kThreads, 0, st>>>(reinterpret_cast<const MaxSum*>(p.head_stats), p.stats_parts, norm, p.skip);
  } else if (!p.naive) {
    if (p.score_elem == ScoreElem::f16)
      head_stats_kernel<<<dim3(kSlices, p.n_head), kThreads, 0, st>>>(static_cast<const __half*>(p.scores), p.M, part,
                                                                      p.skip, p.m_dev, p.m_sub);
    else
      head_stats_kernel<<<dim3(kSlices, p.n_head), kThreads, 0, st>>>(static_cast<const float*>(p.scores), p.M, part,
                                                                      p.skip, p.m_dev, p.m_sub);
    fold_kernel<<<p.n_head, kThreads, 0, st>>>(part, kSlices, norm, p.skip);
  }
  if (p.score_elem == ScoreElem::f16)
    vote_kernel<<<grid_for(p.M), kThreads, 0, st>>>(static_cast<const __half*>(p.scores), p.n_head, p.M, norm, p.naive,
                                                    p.vote, p.skip, p.m_dev, p.m_sub);
  else
    vote_kernel<<<grid_for(p.M), kThreads, 0, st>>>(static_cast<const float*>(p.scores), p.n_head, p.M, norm, p.naive,
                                                    p.vote, p.skip, p.m_dev, p.m_sub);
  LC_LAUNCH_CHECK("soft_vote (M %lld, heads %d, %s scores)", (long long)p.M, p.n_head,
                  p.score_elem == ScoreElem::f16 ? "fp16" : "fp32");
}

// Layout: sorted votes [M] | indices in [M] | indices out [M] | k offsets [k] | cub temp.
size_t top_k_workspace_bytes(int64_t max_M, int64_t k) {
  const size_t m4 = align_up(size_t(max_M) * 4);
  return 3 * m4 + align_up(size_t(k) * 4) + align_up(std::max(cub_pairs_bytes(max_M), cub_keys_bytes(k)));
}

void top_k_sorted(const TopKParams& p, Stream s) {
  LC_REQUIRE(p.M >= 0 && p.M < (int64_t(1) << 31) && p.k >= 0, "top_k_sorted: M %lld k %lld", (long long)p.M, (long long)p.k);
  const int64_t k = std::min(p.k, p.M);
  if (k == 0) return;
  LC_REQUIRE(p.workspace_bytes >= top_k_workspace_bytes(p.M, k), "top_k_sorted: workspace %zu < %zu", p.workspace_bytes, top_k_workspace_bytes(p.M, k));
  const auto st = static_cast<cudaStream_t>(s);
  char* w = static_cast<char*>(p.workspace);
  const size_t m4 = align_up(size_t(p.M) * 4);
  auto* vote_sorted = reinterpret_cast<float*>(w);
  auto* idx_in = reinterpret_cast<int32_t*>(w + m4);
  auto* idx_out = reinterpret_cast<int32_t*>(w + 2 * m4);
  auto* chosen = reinterpret_cast<int32_t*>(w + 3 * m4);
  void* temp = w + 3 * m4 + align_up(size_t(k) * 4);
  size_t temp_bytes = p.workspace_bytes - (3 * m4 + align_up(size_t(k) * 4));
  iota_kernel<<<grid_for(p.M), kThreads, 0, st>>>(idx_in, p.M);
  // Stable: equal votes keep ascending index order, so the first k follow the tie rule.
  LC_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(temp, temp_bytes, p.vote, vote_sorted, idx_in, idx_out,
                                                          int(p.M), 0, 32, st),
                "top_k_sorted: sort of %lld votes", (long long)p.M);
  add_offset_kernel<<<grid_for(k), kThreads, 0, st>>>(idx_out, chosen, k, p.offset);
  temp_bytes = p.workspace_bytes - (3 * m4 + align_up(size_t(k) * 4));
  LC_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(temp, temp_bytes, chosen, p.out, int(k), 0, 32, st),
                "top_k_sorted: sort of %lld indices", (long long)k);
  LC_LAUNCH_CHECK("top_k_sorted (M %lld, k %lld)", (long long)p.M, (long long)k);
}

}  // namespace longctx::cuda

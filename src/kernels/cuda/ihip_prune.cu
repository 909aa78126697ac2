// ihip_prune.cu: see ihip_prune.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/fp8_vec.cuh"
#include "kernels/cuda/ihip_prune.cuh"
#include "kernels/cuda/ihip_prune.h"

namespace longctx::cuda {

namespace {

using namespace ihip;
constexpr int kLanes = 8;                 // threads per dot product (hip_topk.h's order)
constexpr int kScoreThreads = 256, kGroups = kScoreThreads / kLanes;
constexpr int kMaxGroupHeads = 16;        // query heads per KV head
constexpr int kMaxHeads = 32;             // query heads (the rotated queries live in shared memory)
constexpr int kHeadsAtOnce = 4;           // query heads a probe pair scores together (8 FMA chains a lane)
// The score kernel's static shared memory at head_dim D: the rotated queries, their offsets
// (rank=local) and the item scores.
constexpr size_t score_static_smem(int D) { return (size_t(kMaxHeads) * D + kMaxHeads + kGroups) * 4; }
constexpr int32_t kOpenEnd = 0x7fffffff;  // the decode window's end: clipped to the length by sparse_decode

// Programmatic dependent launch (Hopper): the decode kernels here (score, select, index) are
// launched so that each may start while the kernel before it in the stream drains, which hides the
// launch gap between the seven kernels of a refresh. Every CTA first lets the next kernel launch,
// then waits (griddepcontrol.wait: the previous kernel complete, its writes visible) before its
// first global access and before any exit, so each kernel sees every earlier kernel's writes and
// completes only after them: the stream's order, minus the gaps. Without the launch attribute
// (LONGCTX_NO_PDL=1, or a plain launch) both instructions are no-ops.
__device__ inline void follow_previous_kernel() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
// The select's order: wait first, then let the next kernel (a score kernel of many CTAs) launch.
// A score kernel launched while the previous score kernel's last wave drains would place its CTAs
// on the SMs that free first (several to an SM on some, none on others: a latency-bound kernel
// runs slower); after the wait every SM is free and the one-CTA select still hides its launch.
__device__ inline void follow_previous_kernel_then_release() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

__device__ inline Cands cands_of(const IhipStageGpuParams& p, int seq, int64_t pos) {
  return ihip::cands_of(p.in ? p.in + int64_t(seq) * p.in_cap : nullptr, p.in ? p.in_len[seq] : 0, pos, p.n_sink,
                        p.n_stream);
}

// Pool rows of the entries of the CTA's chunks (chunk jl's at rows[jl * l_c ..]), shared by the
// chunk's KV heads: one round of independent loads by the whole CTA, so each bisection step waits
// on one round of key loads (its two probes' keys, loaded together).
__device__ inline void load_rows(const IhipStageGpuParams& p, int seq, const Cands& c, int64_t chunk0, int per_cta,
                                 int32_t* rows) {
  const int32_t* table = p.kv.block_table + int64_t(seq) * p.kv.max_pages_per_seq;
  const uint32_t page = uint32_t(p.kv.page_size);
  const int64_t first = chunk0 * p.l_c, n = per_cta * int64_t(p.l_c);
  for (int64_t i = threadIdx.x; i < n && first + i < c.n; i += kScoreThreads) {
    const uint32_t e = uint32_t(c.at(first + i)), pg = e / page;
    rows[i] = int32_t(uint32_t(table[pg]) * page + (e - pg * page));
  }
  __syncthreads();
}

// A lane's part of a key row, hip_dot's lane order: chunks c = 0 .. D / 64 - 1 of 8 elements at
// 64 c + 8 lane (D = 64: one chunk; D = 128: the rotate-half pairs (i, i + 64) in chunks 0 and 1;
// D = 256: chunks c and c + 2), kept packed until scored (fewer registers while the loads are in
// flight): 16 bytes of bf16 a chunk, or 8 bytes of e4m3 (FP8: the fp8 cache, real = stored * k_scale).
template <int D, bool FP8>
struct KeyRegs {
  static constexpr int kChunks = D / 64;
  static constexpr int kElemBytes = FP8 ? 1 : 2;
  using Vec = std::conditional_t<FP8, uint2, uint4>;  // a chunk's 8 elements
  Vec u[kChunks];
};

template <int D, bool FP8>
__device__ inline void load_key(const IhipStageGpuParams& p, int g, int32_t row, bool ok, int lane, KeyRegs<D, FP8>& r) {
  using R = KeyRegs<D, FP8>;
#pragma unroll
  for (int c = 0; c < R::kChunks; ++c) r.u[c] = typename R::Vec{};
  if (ok) {
    const char* k = static_cast<const char*>(p.kv.k_pool) +
                    ((int64_t(row) * p.kv.n_kv_head + g) * D + 8 * lane) * R::kElemBytes;
#pragma unroll
    for (int c = 0; c < R::kChunks; ++c) r.u[c] = *reinterpret_cast<const typename R::Vec*>(k + 64 * c * R::kElemBytes);
  }
}

// The lane's key elements in fp32, y[8 c + e] = element 64 c + 8 lane + e (FP8: the e4m3 value
// times k_scale, one fp32 product: ihip_probe's dequantisation), rotated at table row kpos when RoPE is on (ihip_rotate: pair (i, i + D / 2) sits in chunks c and c + D / 128 of one lane;
// at D = 64 in lanes l and l + 4 of the dot's 8, exchanged by one shuffle: every lane of the warp
// must call this).
template <int D, bool FP8>
__device__ inline void unpack_key(const IhipStageGpuParams& p, const KeyRegs<D, FP8>& key, int64_t kpos, int lane,
                                  float (&y)[D / 8]) {
  constexpr int kC = KeyRegs<D, FP8>::kChunks;
#pragma unroll
  for (int c = 0; c < kC; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if constexpr (FP8) {  // two e4m3 -> two fp16 (exact) -> fp32, times the scale
        const uint2 h4 = fp8vec::e4m3x4_to_f16x4(e < 2 ? key.u[c].x : key.u[c].y);
        const uint32_t h = e % 2 ? h4.y : h4.x;
        __half2_raw hr;
        hr.x = uint16_t(h), hr.y = uint16_t(h >> 16);
        const float2 v = __half22float2(__half2(hr));
        y[8 * c + 2 * e] = __fmul_rn(v.x, p.kv.k_scale), y[8 * c + 2 * e + 1] = __fmul_rn(v.y, p.kv.k_scale);
      } else {
        const float2 v = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(&key.u[c])[e]);
        y[8 * c + 2 * e] = v.x, y[8 * c + 2 * e + 1] = v.y;
      }
    }
  if (p.rope_mode == 0) return;
  if constexpr (D == 64) {  // pair (i, i + 32): lane l < 4 holds i = 8 l + e, lane l + 4 its partner
    const bool low = lane < 4;
    const float* cs = p.rope_cos + kpos * (D / 2) + 8 * (lane % 4);
    const float* sn = p.rope_sin + kpos * (D / 2) + 8 * (lane % 4);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float other = __shfl_xor_sync(0xffffffffu, y[e], 4);  // every lane: the callers are warp-uniform
      float a = low ? y[e] : other, b = low ? other : y[e];
      rotate(a, b, cs[e], sn[e]);
      y[e] = low ? a : b;
    }
  } else {
#pragma unroll
    for (int c = 0; c < kC / 2; ++c) {
      const float* cs = p.rope_cos + kpos * (D / 2) + 64 * c + 8 * lane;
      const float* sn = p.rope_sin + kpos * (D / 2) + 64 * c + 8 * lane;
#pragma unroll
      for (int e = 0; e < 8; ++e) rotate(y[8 * c + e], y[8 * (c + kC / 2) + e], cs[e], sn[e]);
    }
  }
}

// The max over the group's n_qs query heads of q~ . y (minus the head's head_off[t] when set:
// rank=local) for two probes at once (yl, yr; NaN never wins), every dot in hip_dot's order (a lane's 8-element chunks in order, then the xor tree 4, 2,
// 1): every lane gets both. kHeadsAtOnce heads x 2 probes are independent FMA and shuffle chains,
// interleaved, so a bisection step waits on one chain's latency instead of 2 x n_qs of them.
template <int D>
__device__ inline void probe_pair(const float* qs, const float* head_off, int n_qs, const float (&yl)[D / 8],
                                  const float (&yr)[D / 8], int lane, float& best_l, float& best_r) {
  best_l = best_r = -INFINITY;
  for (int t0 = 0; t0 < n_qs; t0 += kHeadsAtOnce) {  // uniform over the CTA: the shuffles need every lane
    float al[kHeadsAtOnce], ar[kHeadsAtOnce];
    const float* qh[kHeadsAtOnce];
#pragma unroll
    for (int u = 0; u < kHeadsAtOnce; ++u) {
      al[u] = ar[u] = 0.f;
      qh[u] = qs + (t0 + u < n_qs ? t0 + u : n_qs - 1) * D + 8 * lane;  // past the group: a repeat, not counted
    }
#pragma unroll
    for (int c = 0; c < D / 64; ++c)
#pragma unroll
      for (int e = 0; e < 8; e += 4)
#pragma unroll
        for (int u = 0; u < kHeadsAtOnce; ++u) {
          const float4 qv = *reinterpret_cast<const float4*>(qh[u] + 64 * c + e);
          const int i = 8 * c + e;
          al[u] = fmaf(qv.x, yl[i], al[u]);
          ar[u] = fmaf(qv.x, yr[i], ar[u]);
          al[u] = fmaf(qv.y, yl[i + 1], al[u]);
          ar[u] = fmaf(qv.y, yr[i + 1], ar[u]);
          al[u] = fmaf(qv.z, yl[i + 2], al[u]);
          ar[u] = fmaf(qv.z, yr[i + 2], ar[u]);
          al[u] = fmaf(qv.w, yl[i + 3], al[u]);
          ar[u] = fmaf(qv.w, yr[i + 3], ar[u]);
        }
#pragma unroll
    for (int off = kLanes / 2; off >= 1; off /= 2)
#pragma unroll
      for (int u = 0; u < kHeadsAtOnce; ++u) {
        al[u] += __shfl_xor_sync(0xffffffffu, al[u], off);
        ar[u] += __shfl_xor_sync(0xffffffffu, ar[u], off);
      }
#pragma unroll
    for (int u = 0; u < kHeadsAtOnce; ++u)
      if (t0 + u < n_qs) {
        if (head_off) {
          al[u] = __fsub_rn(al[u], head_off[t0 + u]);
          ar[u] = __fsub_rn(ar[u], head_off[t0 + u]);
        }
        if (al[u] > best_l) best_l = al[u];
        if (ar[u] > best_r) best_r = ar[u];
      }
  }
}

// std::max's choice (ihip_select_rep's running max): b when a < b, else a (signed zeros as the CPU).
__device__ inline float max_as_std(float a, float b) { return a < b ? b : a; }

// The bisection is latency-bound, so resident items count: 4 CTAs an SM at head_dim 64 and 128 (64
// registers), 2 at 256 (two probes' 32 fp32 elements a lane each).
template <int D>
constexpr int kScoreCtasPerSm = D <= 128 ? 4 : 2;

// Each step probes the middle key of both halves (ihip_select_rep: the left one at the left-branch
// position, the right one at the right-branch one; both keys loaded before either is scored), keeps
// the left half only when left > right, and keeps the running max of the probes. kRelative
// (relative RoPE): the branch positions differ, so the representative is probed at both after the
// loop; otherwise only a one-entry chunk (no step) probes it.
template <int D, bool kRelative, bool FP8>
__global__ void __launch_bounds__(kScoreThreads, kScoreCtasPerSm<D>) score_kernel(IhipStageGpuParams p) {
  __shared__ __align__(16) float qs[kMaxHeads * D];  // [n_head][D] rotated
  __shared__ float qoff[kMaxHeads];                  // rank=local: [n_head] the offsets
  __shared__ float item_score[kGroups];
  extern __shared__ int32_t chunk_rows[];  // [per_cta][l_c] pool rows of the CTA's chunks
  constexpr int kHalfD = D / 2;
  follow_previous_kernel();
  const int seq = blockIdx.y, tid = threadIdx.x, lane = tid % kLanes, grp = tid / kLanes;
  const int64_t pos = int64_t(p.kv.seq_lens[seq]) - 1;
  const Cands c = cands_of(p, seq, pos);
  const int64_t n_chunk = (c.n + p.l_c - 1) / p.l_c, keep = p.k / p.l_c;
  const int n_kv = p.kv.n_kv_head, per_cta = kGroups / n_kv;
  if (n_chunk > p.max_chunks) __trap();  // the host bound is broken: never read past the workspace
  if (n_chunk <= keep || int64_t(blockIdx.x) * per_cta >= n_chunk) return;  // nothing to score here
  // The rotated queries (ihip_pack_queries: every head at the stage's query position).
  const int64_t qp = query_pos(p.rope_mode, pos, n_chunk, p.n_stream);
  const auto* q = static_cast<const __nv_bfloat16*>(p.q) + int64_t(seq) * p.n_head * D;
  for (int i = tid; i < p.n_head * kHalfD; i += kScoreThreads) {
    const int h = i / kHalfD, e = i % kHalfD;
    float a = __bfloat162float(q[h * D + e]), b = __bfloat162float(q[h * D + kHalfD + e]);
    if (p.rope_mode != 0) rotate(a, b, p.rope_cos[qp * kHalfD + e], p.rope_sin[qp * kHalfD + e]);
    qs[h * D + e] = a;
    qs[h * D + kHalfD + e] = b;
  }
  if (p.offset && tid < p.n_head) qoff[tid] = p.offset[int64_t(seq) * p.n_head + tid];
  load_rows(p, seq, c, int64_t(blockIdx.x) * per_cta, per_cta, chunk_rows);  // ends with a barrier
  const int g = grp % n_kv, group = p.n_head / n_kv;
  const int64_t j = int64_t(blockIdx.x) * per_cta + grp / n_kv;
  const bool valid = grp < per_cta * n_kv && j < n_chunk;
  const int64_t first = j * p.l_c;
  const int len = valid ? int(c.n - first < p.l_c ? c.n - first : p.l_c) : 1;
  const int64_t jr = valid ? j : 0;  // an idle item reads the table in range
  const int64_t pos_left = kRelative ? 0 : jr, pos_right = kRelative ? 1 : jr;
  const float* qg = qs + g * group * D;
  const float* og = p.offset ? qoff + g * group : nullptr;
  const int32_t* rows = chunk_rows + (grp / n_kv) * p.l_c;
  int lo = 0, hi = len;
  float best = -INFINITY;
  KeyRegs<D, FP8> kl, kr;
  float yl[D / 8], yr[D / 8];
  int n_iter = 0;
  while ((1 << n_iter) < p.l_c) ++n_iter;  // uniform over the CTA: the shuffles need every lane
  for (int it = 0; it < n_iter; ++it) {
    const bool active = valid && hi - lo > 1;
    const int mid = lo + (hi - lo) / 2;
    load_key(p, g, active ? rows[lo + (mid - lo) / 2] : 0, active, lane, kl);
    load_key(p, g, active ? rows[mid + (hi - mid) / 2] : 0, active, lane, kr);
    unpack_key(p, kl, pos_left, lane, yl);
    unpack_key(p, kr, pos_right, lane, yr);
    float left, right;
    probe_pair<D>(qg, og, group, yl, yr, lane, left, right);
    if (active) {
      if (left > right)
        hi = mid;
      else
        lo = mid;  // ties go right
      best = max_as_std(best, max_as_std(left, right));
    }
  }
  // The representative's probes after the loop (warp-uniform: the shuffles need every lane): at
  // the right-branch position, then (relative) at the left one.
  if (kRelative || __any_sync(0xffffffffu, valid && len == 1)) {
    load_key(p, g, valid ? rows[lo] : 0, valid, lane, kl);
    unpack_key(p, kl, pos_right, lane, yl);
    unpack_key(p, kl, pos_left, lane, yr);
    float at_right, at_left;
    probe_pair<D>(qg, og, group, yl, yr, lane, at_right, at_left);
    if (kRelative || len == 1) best = max_as_std(best, at_right);
    if (kRelative) best = max_as_std(best, at_left);
  }
  if (lane == 0) item_score[grp] = best;
  __syncthreads();
  if (tid < per_cta) {
    const int64_t jj = int64_t(blockIdx.x) * per_cta + tid;
    if (jj < n_chunk) {
      float top = -INFINITY;
      for (int h = 0; h < n_kv; ++h)
        if (item_score[tid * n_kv + h] > top) top = item_score[tid * n_kv + h];
      p.scores[int64_t(seq) * p.max_chunks + jj] = top;
    }
  }
}

// rank=local's offsets (ihip_local_offsets with the one row at pos): CTA (KV head g, sequence);
// item grp (8 lanes) takes local keys grp, grp + 32, .. (the sinks, then the window), loads,
// dequantises and rotates each at the local position as a probe (load_key, unpack_key), and keeps
// a running max per query head of the group of its dots in hip_dot's order (probe_pair's FMA chain
// and xor tree); then the max over the items. Every loop trip is CTA-uniform (the shuffles).
template <int D, bool FP8>
__global__ void __launch_bounds__(kScoreThreads) offsets_kernel(IhipStageGpuParams p) {
  __shared__ __align__(16) float qs[kMaxGroupHeads * D];  // [group][D] rotated
  __shared__ float part[kGroups][kMaxGroupHeads];
  constexpr int kHalfD = D / 2;
  follow_previous_kernel();
  const int g = blockIdx.x, seq = blockIdx.y, tid = threadIdx.x, lane = tid % kLanes, grp = tid / kLanes;
  const int64_t pos = int64_t(p.kv.seq_lens[seq]) - 1;
  const Cands c = cands_of(p, seq, pos);
  const int64_t n_chunk = (c.n + p.l_c - 1) / p.l_c, keep = p.k / p.l_c;
  if (n_chunk <= keep) return;  // the stage keeps every candidate: nothing is scored
  const int group = p.n_head / p.kv.n_kv_head;
  const int64_t qp = query_pos(p.rope_mode, pos, n_chunk, p.n_stream);
  const int64_t kpos = p.rope_mode == 1 ? 0 : n_chunk - 1;  // ihip_local_key_pos (n_chunk > keep >= 1)
  const auto* q = static_cast<const __nv_bfloat16*>(p.q) + (int64_t(seq) * p.n_head + g * group) * D;
  for (int i = tid; i < group * kHalfD; i += kScoreThreads) {
    const int h = i / kHalfD, e = i % kHalfD;
    float a = __bfloat162float(q[h * D + e]), b = __bfloat162float(q[h * D + kHalfD + e]);
    if (p.rope_mode != 0) rotate(a, b, p.rope_cos[qp * kHalfD + e], p.rope_sin[qp * kHalfD + e]);
    qs[h * D + e] = a;
    qs[h * D + kHalfD + e] = b;
  }
  __syncthreads();
  const int64_t n_sink = p.n_sink < pos + 1 ? p.n_sink : pos + 1;
  const int64_t win = pos - p.n_stream + 1 > p.n_sink ? pos - p.n_stream + 1 : p.n_sink;
  const int64_t n_loc = n_sink + (pos + 1 - win > 0 ? pos + 1 - win : 0);
  const int32_t* table = p.kv.block_table + int64_t(seq) * p.kv.max_pages_per_seq;
  const uint32_t page = uint32_t(p.kv.page_size);
  float best[kMaxGroupHeads];
#pragma unroll
  for (int h = 0; h < kMaxGroupHeads; ++h) best[h] = -INFINITY;
  for (int64_t base = 0; base < n_loc; base += kGroups) {
    const int64_t i = base + grp;
    const bool ok = i < n_loc;
    int32_t row = 0;
    if (ok) {
      const uint32_t e = uint32_t(i < n_sink ? i : win + (i - n_sink)), pg = e / page;
      row = int32_t(uint32_t(table[pg]) * page + (e - pg * page));
    }
    KeyRegs<D, FP8> kr;
    float y[D / 8];
    load_key(p, g, row, ok, lane, kr);
    unpack_key(p, kr, kpos, lane, y);
#pragma unroll
    for (int h = 0; h < kMaxGroupHeads; ++h) {
      if (h >= group) break;  // CTA-uniform
      const float* qh = qs + h * D + 8 * lane;
      float a = 0.f;
#pragma unroll
      for (int c = 0; c < D / 64; ++c)
#pragma unroll
        for (int e = 0; e < 8; ++e) a = fmaf(qh[64 * c + e], y[8 * c + e], a);
#pragma unroll
      for (int off = kLanes / 2; off >= 1; off /= 2) a += __shfl_xor_sync(0xffffffffu, a, off);
      if (ok && a > best[h]) best[h] = a;  // NaN never wins
    }
  }
  if (lane == 0)
#pragma unroll
    for (int h = 0; h < kMaxGroupHeads; ++h) part[grp][h] = best[h];
  __syncthreads();
  if (tid < group) {
    float m = -INFINITY;
    for (int k = 0; k < kGroups; ++k)
      if (part[k][tid] > m) m = part[k][tid];
    p.offset[int64_t(seq) * p.n_head + g * group + tid] = m;
  }
}

__global__ void __launch_bounds__(kSelectThreads) select_kernel(IhipStageGpuParams p) {
  extern __shared__ __align__(16) char smem[];
  follow_previous_kernel_then_release();
  const int seq = blockIdx.x;
  const int64_t pos = int64_t(p.kv.seq_lens[seq]) - 1;
  const Cands c = cands_of(p, seq, pos);
  if (threadIdx.x == 0 && p.win_begin && !p.in) p.win_begin[seq] = int32_t(c.base + c.n);  // cand_end
  const float* sc = p.scores + int64_t(seq) * p.max_chunks;
  select_chunks(c, p.l_c, p.k / p.l_c, p.max_chunks, [sc](int64_t i) { return sc[i]; }, p.out + int64_t(seq) * p.out_cap,
                p.out_len + seq, smem);
}

__global__ void index_kernel(IhipIndexGpuParams p) {
  follow_previous_kernel();
  const int seq = blockIdx.x;
  const int64_t R = p.ranges_per_seq(), kmax = p.sel_cap / p.l_c;
  const int32_t* sel = p.sel + int64_t(seq) * p.sel_cap;
  const int64_t n = p.sel_len[seq], n_run = (n + p.l_c - 1) / p.l_c;
  const int32_t w = p.win_begin[seq];
  int32_t* rg = p.ranges + 2 * int64_t(seq) * R;
  for (int64_t i = threadIdx.x; i < R; i += blockDim.x) {
    int32_t a, b;
    if (i == 0) {
      a = 0, b = int32_t(p.n_sink);
    } else if (i <= kmax && i - 1 < n_run) {  // the run's entries are consecutive positions
      const int64_t f = (i - 1) * p.l_c, len = n - f < p.l_c ? n - f : p.l_c;
      a = sel[f], b = int32_t(sel[f] + len);
    } else if (i <= kmax) {
      a = b = w;
    } else {
      a = w, b = kOpenEnd;
    }
    rg[2 * i] = a;
    rg[2 * i + 1] = b;
  }
  if (threadIdx.x == 0) {
    p.range_ptr[seq + 1] = int32_t((seq + 1) * R);
    p.col_ptr[seq + 1] = 0;
    if (seq == 0) p.range_ptr[0] = p.col_ptr[0] = 0;
  }
}

size_t g_select_smem = 0;
size_t g_score_smem[3][2][2] = {};  // score: per kernel instance [head_dim 64, 128, 256][relative RoPE][fp8]
constexpr int dim_slot(int D) { return D == 64 ? 0 : D == 128 ? 1 : 2; }

void allow_smem(const void* kernel, size_t bytes, size_t static_bytes, size_t& done, const char* what) {
  if (bytes <= done) return;
  int dev = 0, limit = 0;
  LC_CUDA_CHECK(cudaGetDevice(&dev), "ihip device");
  LC_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "ihip smem limit");
  LC_REQUIRE(bytes + static_bytes <= size_t(limit), "infinitehip: %s needs %zu bytes of shared memory, over the device's %d",
             what, bytes, limit);
  LC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)), "ihip smem %s",
                what);
  done = bytes;
}

void check_stage(const IhipStageGpuParams& p) {
  LC_REQUIRE(p.kv.head_dim == 64 || p.kv.head_dim == 128 || p.kv.head_dim == 256,
             "infinitehip: the GPU pruning stage needs head_dim 64, 128 or 256, got %d", p.kv.head_dim);
  LC_REQUIRE(p.kv.elem == KvElem::bf16 || (p.kv.elem == KvElem::fp8_e4m3 && p.kv.k_scale > 0.f),
             "infinitehip: the GPU pruning stage reads bf16 or e4m3 keys (fp8 with a positive scale, got %g)",
             double(p.kv.k_scale));
  LC_REQUIRE(p.kv.n_kv_head >= 1 && p.kv.n_kv_head <= kGroups && p.n_head % p.kv.n_kv_head == 0 &&
                 p.n_head / p.kv.n_kv_head <= kMaxGroupHeads && p.n_head <= kMaxHeads,
             "infinitehip: GPU pruning needs n_kv_head <= 32 dividing n_head <= 32 (got %d / %d)", p.n_head,
             p.kv.n_kv_head);
  LC_REQUIRE(p.l_c >= 1 && p.k >= p.l_c && p.k % p.l_c == 0 && p.out_cap >= p.k && p.max_chunks >= 1,
             "internal: infinitehip stage l_c=%d k=%lld out_cap=%lld", p.l_c, (long long)p.k, (long long)p.out_cap);
  LC_REQUIRE(p.rope_mode == 0 || (p.rope_cos && p.rope_sin), "internal: infinitehip RoPE table missing");
  LC_REQUIRE(p.kv.n_pages * p.kv.page_size < (int64_t(1) << 31), "infinitehip: the KV pool exceeds 2^31 rows");
}

// Whether the decode kernels launch as programmatic dependents (follow_previous_kernel):
// LONGCTX_NO_PDL=1 launches them plainly (an A/B switch for the benchmark, a fallback).
bool use_pdl() {
  static const bool on = [] {
    const char* e = std::getenv("LONGCTX_NO_PDL");
    return !(e && *e && *e != '0');
  }();
  return on;
}

// Launches kernel(p) on st, as a programmatic dependent of the stream's previous kernel when use_pdl().
template <class Params>
void launch_dependent(void (*kernel)(Params), dim3 grid, int threads, size_t smem, cudaStream_t st, const Params& p) {
  cudaLaunchConfig_t lc = {};
  lc.gridDim = grid;
  lc.blockDim = dim3(unsigned(threads));
  lc.dynamicSmemBytes = smem;
  lc.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  lc.attrs = attr;
  lc.numAttrs = use_pdl() ? 1 : 0;
  LC_CUDA_CHECK(cudaLaunchKernelEx(&lc, kernel, p), "ihip decode launch");
}

}  // namespace

namespace {

template <int D, bool kRelative, bool FP8>
void launch_score(const IhipStageGpuParams& p, cudaStream_t st) {
  const int per_cta = kGroups / p.kv.n_kv_head;
  const size_t bytes = size_t(per_cta) * p.l_c * 4;
  const dim3 grid(unsigned((p.max_chunks + per_cta - 1) / per_cta), unsigned(p.kv.n_seq));
  allow_smem(reinterpret_cast<const void*>(score_kernel<D, kRelative, FP8>), bytes, score_static_smem(D),
             g_score_smem[dim_slot(D)][kRelative][FP8], "the chunk rows");
  launch_dependent(score_kernel<D, kRelative, FP8>, grid, kScoreThreads, bytes, st, p);
}

template <int D, bool FP8>
void launch_score(const IhipStageGpuParams& p, cudaStream_t st) {
  p.rope_mode == 1 ? launch_score<D, true, FP8>(p, st) : launch_score<D, false, FP8>(p, st);
}

template <int D>
void launch_score(const IhipStageGpuParams& p, cudaStream_t st) {
  p.kv.elem == KvElem::fp8_e4m3 ? launch_score<D, true>(p, st) : launch_score<D, false>(p, st);
}

}  // namespace

void ihip_score_decode(const IhipStageGpuParams& p, Stream s) {
  check_stage(p);
  if (p.kv.n_seq <= 0) return;
  const auto st = static_cast<cudaStream_t>(s);
  if (p.kv.head_dim == 64)
    launch_score<64>(p, st);
  else if (p.kv.head_dim == 128)
    launch_score<128>(p, st);
  else
    launch_score<256>(p, st);
  LC_LAUNCH_CHECK("ihip score l_c=%d max_chunks=%lld", p.l_c, (long long)p.max_chunks);
}

void ihip_select_decode(const IhipStageGpuParams& p, Stream s) {
  check_stage(p);
  if (p.kv.n_seq <= 0) return;
  const size_t bytes = select_smem(p.max_chunks, p.k / p.l_c);
  allow_smem(reinterpret_cast<const void*>(select_kernel), bytes, 0, g_select_smem, "the chunk ranking");
  launch_dependent(select_kernel, dim3(unsigned(p.kv.n_seq)), kSelectThreads, bytes, static_cast<cudaStream_t>(s), p);
  LC_LAUNCH_CHECK("ihip select l_c=%d max_chunks=%lld", p.l_c, (long long)p.max_chunks);
}

void ihip_offsets_decode(const IhipStageGpuParams& p, Stream s) {
  check_stage(p);
  LC_REQUIRE(p.offset, "internal: infinitehip offsets without a workspace");
  if (p.kv.n_seq <= 0) return;
  const auto st = static_cast<cudaStream_t>(s);
  const dim3 grid(unsigned(p.kv.n_kv_head), unsigned(p.kv.n_seq));
  const bool fp8 = p.kv.elem == KvElem::fp8_e4m3;
  if (p.kv.head_dim == 64)
    fp8 ? launch_dependent(offsets_kernel<64, true>, grid, kScoreThreads, 0, st, p)
        : launch_dependent(offsets_kernel<64, false>, grid, kScoreThreads, 0, st, p);
  else if (p.kv.head_dim == 128)
    fp8 ? launch_dependent(offsets_kernel<128, true>, grid, kScoreThreads, 0, st, p)
        : launch_dependent(offsets_kernel<128, false>, grid, kScoreThreads, 0, st, p);
  else
    fp8 ? launch_dependent(offsets_kernel<256, true>, grid, kScoreThreads, 0, st, p)
        : launch_dependent(offsets_kernel<256, false>, grid, kScoreThreads, 0, st, p);
  LC_LAUNCH_CHECK("ihip offsets l_c=%d", p.l_c);
}

void ihip_prune_stage_decode(const IhipStageGpuParams& p, Stream s) {
  if (p.offset) ihip_offsets_decode(p, s);
  ihip_score_decode(p, s);
  ihip_select_decode(p, s);
}

void ihip_decode_index(const IhipIndexGpuParams& p, Stream s) {
  if (p.n_seq <= 0) return;
  launch_dependent(index_kernel, dim3(unsigned(p.n_seq)), 128, 0, static_cast<cudaStream_t>(s), p);
  LC_LAUNCH_CHECK("ihip decode index n_seq=%d", p.n_seq);
}

}  // namespace longctx::cuda

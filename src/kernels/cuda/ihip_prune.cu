// ihip_prune.cu: see ihip_prune.h.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ihip_prune.cuh"
#include "kernels/cuda/ihip_prune.h"

namespace longctx::cuda {

namespace {

using namespace ihip;
constexpr int kLanes = 8;                 // threads per dot product (hip_topk.h's order)
constexpr int kScoreThreads = 256, kGroups = kScoreThreads / kLanes;
constexpr int kMaxGroupHeads = 16;        // query heads per KV head
constexpr int kMaxHeads = 32;             // query heads (the rotated queries live in shared memory)
constexpr size_t kScoreStaticSmem = (kMaxHeads * kD + 32) * 4;  // the score kernel's static shared memory
constexpr int32_t kOpenEnd = 0x7fffffff;  // the decode window's end: clipped to the length by sparse_decode

__device__ inline Cands cands_of(const IhipStageGpuParams& p, int seq, int64_t pos) {
  return ihip::cands_of(p.in ? p.in + int64_t(seq) * p.in_cap : nullptr, p.in ? p.in_len[seq] : 0, pos, p.n_sink,
                        p.n_stream);
}

struct KeyRegs {
  uint4 u0, u1;  // bf16 elements 8*lane .. +8 and 64 + 8*lane .. +8 (kept packed: fewer registers)
};

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

__device__ inline void load_key(const IhipStageGpuParams& p, int g, int32_t row, bool ok, int lane, KeyRegs& r) {
  r.u0 = r.u1 = make_uint4(0, 0, 0, 0);
  if (ok) {
    const auto* k = static_cast<const __nv_bfloat16*>(p.kv.k_pool) + (int64_t(row) * p.kv.n_kv_head + g) * kD;
    r.u0 = *reinterpret_cast<const uint4*>(k + 8 * lane);
    r.u1 = *reinterpret_cast<const uint4*>(k + kHalf + 8 * lane);
  }
}

// max over the group's queries of q~ . rot(key, kpos) (NaN never wins); every lane gets it.
__device__ inline float probe(const IhipStageGpuParams& p, const float* qs, int n_qs, const KeyRegs& key, int64_t kpos,
                              int lane) {
  float y0[8], y1[8];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 a = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(&key.u0)[e]);
    const float2 b = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(&key.u1)[e]);
    y0[2 * e] = a.x, y0[2 * e + 1] = a.y, y1[2 * e] = b.x, y1[2 * e + 1] = b.y;
  }
  if (p.rope_mode != 0) {
    const float* c = p.rope_cos + kpos * kHalf + 8 * lane;
    const float* s = p.rope_sin + kpos * kHalf + 8 * lane;
#pragma unroll
    for (int e = 0; e < 8; ++e) rotate(y0[e], y1[e], c[e], s[e]);
  }
  float best = -INFINITY;
  for (int t = 0; t < n_qs; ++t) {
    const float* q = qs + t * kD;
    float acc = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc = fmaf(q[8 * lane + e], y0[e], acc);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc = fmaf(q[kHalf + 8 * lane + e], y1[e], acc);
    acc += __shfl_xor_sync(0xffffffffu, acc, 4);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    if (acc > best) best = acc;
  }
  return best;
}

// std::max's choice (ihip_select_rep's running max): b when a < b, else a (signed zeros as the CPU).
__device__ inline float max_as_std(float a, float b) { return a < b ? b : a; }

// 4 CTAs per SM (at most 64 registers): the bisection is latency-bound, so resident items count.
// Each step probes the middle key of both halves (ihip_select_rep: the left one at the left-branch
// position, the right one at the right-branch one; both keys loaded before either is scored), keeps
// the left half only when left > right, and keeps the running max of the probes. kRelative
// (relative RoPE): the branch positions differ, so the representative is probed at both after the
// loop; otherwise only a one-entry chunk (no step) probes it.
template <bool kRelative>
__global__ void __launch_bounds__(kScoreThreads, 4) score_kernel(IhipStageGpuParams p) {
  __shared__ __align__(16) float qs[kMaxHeads * kD];  // [n_head][128] rotated
  __shared__ float item_score[kGroups];
  extern __shared__ int32_t chunk_rows[];  // [per_cta][l_c] pool rows of the CTA's chunks
  const int seq = blockIdx.y, tid = threadIdx.x, lane = tid % kLanes, grp = tid / kLanes;
  const int64_t pos = int64_t(p.kv.seq_lens[seq]) - 1;
  const Cands c = cands_of(p, seq, pos);
  const int64_t n_chunk = (c.n + p.l_c - 1) / p.l_c, keep = p.k / p.l_c;
  const int n_kv = p.kv.n_kv_head, per_cta = kGroups / n_kv;
  if (n_chunk > p.max_chunks) __trap();  // the host bound is broken: never read past the workspace
  if (n_chunk <= keep || int64_t(blockIdx.x) * per_cta >= n_chunk) return;  // nothing to score here
  // The rotated queries (ihip_pack_queries: every head at the stage's query position).
  const int64_t qp = query_pos(p.rope_mode, pos, n_chunk, p.n_stream);
  const auto* q = static_cast<const __nv_bfloat16*>(p.q) + int64_t(seq) * p.n_head * kD;
  for (int i = tid; i < p.n_head * kHalf; i += kScoreThreads) {
    const int h = i / kHalf, e = i % kHalf;
    float a = __bfloat162float(q[h * kD + e]), b = __bfloat162float(q[h * kD + kHalf + e]);
    if (p.rope_mode != 0) rotate(a, b, p.rope_cos[qp * kHalf + e], p.rope_sin[qp * kHalf + e]);
    qs[h * kD + e] = a;
    qs[h * kD + kHalf + e] = b;
  }
  load_rows(p, seq, c, int64_t(blockIdx.x) * per_cta, per_cta, chunk_rows);  // ends with a barrier
  const int g = grp % n_kv, group = p.n_head / n_kv;
  const int64_t j = int64_t(blockIdx.x) * per_cta + grp / n_kv;
  const bool valid = grp < per_cta * n_kv && j < n_chunk;
  const int64_t first = j * p.l_c;
  const int len = valid ? int(c.n - first < p.l_c ? c.n - first : p.l_c) : 1;
  const int64_t pos_left = kRelative ? 0 : j, pos_right = kRelative ? 1 : j;
  const float* qg = qs + g * group * kD;
  const int32_t* rows = chunk_rows + (grp / n_kv) * p.l_c;
  int lo = 0, hi = len;
  float best = -INFINITY;
  KeyRegs kl, kr;
  int n_iter = 0;
  while ((1 << n_iter) < p.l_c) ++n_iter;  // uniform over the CTA: the shuffles need every lane
  for (int it = 0; it < n_iter; ++it) {
    const bool active = valid && hi - lo > 1;
    const int mid = lo + (hi - lo) / 2;
    load_key(p, g, active ? rows[lo + (mid - lo) / 2] : 0, active, lane, kl);
    load_key(p, g, active ? rows[mid + (hi - mid) / 2] : 0, active, lane, kr);
    const float left = probe(p, qg, group, kl, pos_left, lane);
    const float right = probe(p, qg, group, kr, pos_right, lane);
    if (active) {
      if (left > right)
        hi = mid;
      else
        lo = mid;  // ties go right
      best = max_as_std(best, max_as_std(left, right));
    }
  }
  // The representative's probes after the loop (warp-uniform: the shuffles need every lane).
  if (kRelative || __any_sync(0xffffffffu, valid && len == 1)) {
    load_key(p, g, valid ? rows[lo] : 0, valid, lane, kl);
    const float at_right = probe(p, qg, group, kl, pos_right, lane);
    if (kRelative || len == 1) best = max_as_std(best, at_right);
    if (kRelative) best = max_as_std(best, probe(p, qg, group, kl, pos_left, lane));
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

__global__ void __launch_bounds__(kSelectThreads) select_kernel(IhipStageGpuParams p) {
  extern __shared__ __align__(16) char smem[];
  const int seq = blockIdx.x;
  const int64_t pos = int64_t(p.kv.seq_lens[seq]) - 1;
  const Cands c = cands_of(p, seq, pos);
  if (threadIdx.x == 0 && p.win_begin && !p.in) p.win_begin[seq] = int32_t(c.base + c.n);  // cand_end
  const float* sc = p.scores + int64_t(seq) * p.max_chunks;
  select_chunks(c, p.l_c, p.k / p.l_c, p.max_chunks, [sc](int64_t i) { return sc[i]; }, p.out + int64_t(seq) * p.out_cap,
                p.out_len + seq, smem);
}

__global__ void index_kernel(IhipIndexGpuParams p) {
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

size_t g_select_smem = 0, g_score_smem[2] = {0, 0};  // score: per kernel instance (RoPE none/chunk, relative)

// Raises a kernel's dynamic shared memory limit once per size (outside graph capture: the first
// eager call does it).
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
  LC_REQUIRE(p.kv.head_dim == kD, "infinitehip: the GPU pruning stage needs head_dim %d, got %d", kD, p.kv.head_dim);
  LC_REQUIRE(p.kv.elem == KvElem::bf16, "infinitehip: the GPU pruning stage reads bf16 keys");
  LC_REQUIRE(p.kv.n_kv_head >= 1 && kGroups % p.kv.n_kv_head == 0 && p.n_head % p.kv.n_kv_head == 0 &&
                 p.n_head / p.kv.n_kv_head <= kMaxGroupHeads && p.n_head <= kMaxHeads,
             "infinitehip: GPU pruning needs n_kv_head dividing 32 and n_head <= 32 (got %d / %d)", p.n_head,
             p.kv.n_kv_head);
  LC_REQUIRE(p.l_c >= 1 && p.k >= p.l_c && p.k % p.l_c == 0 && p.out_cap >= p.k && p.max_chunks >= 1,
             "internal: infinitehip stage l_c=%d k=%lld out_cap=%lld", p.l_c, (long long)p.k, (long long)p.out_cap);
  LC_REQUIRE(p.rope_mode == 0 || (p.rope_cos && p.rope_sin), "internal: infinitehip RoPE table missing");
  LC_REQUIRE(p.kv.n_pages * p.kv.page_size < (int64_t(1) << 31), "infinitehip: the KV pool exceeds 2^31 rows");
}

}  // namespace

void ihip_score_decode(const IhipStageGpuParams& p, Stream s) {
  check_stage(p);
  if (p.kv.n_seq <= 0) return;
  const int per_cta = kGroups / p.kv.n_kv_head;
  const size_t bytes = size_t(per_cta) * p.l_c * 4;
  const dim3 grid(unsigned((p.max_chunks + per_cta - 1) / per_cta), unsigned(p.kv.n_seq));
  const auto st = static_cast<cudaStream_t>(s);
  if (p.rope_mode == 1) {
    allow_smem(reinterpret_cast<const void*>(score_kernel<true>), bytes, kScoreStaticSmem, g_score_smem[1],
               "the chunk rows");
    score_kernel<true><<<grid, kScoreThreads, bytes, st>>>(p);
  } else {
    allow_smem(reinterpret_cast<const void*>(score_kernel<false>), bytes, kScoreStaticSmem, g_score_smem[0],
               "the chunk rows");
    score_kernel<false><<<grid, kScoreThreads, bytes, st>>>(p);
  }
  LC_LAUNCH_CHECK("ihip score l_c=%d max_chunks=%lld", p.l_c, (long long)p.max_chunks);
}

void ihip_select_decode(const IhipStageGpuParams& p, Stream s) {
  check_stage(p);
  if (p.kv.n_seq <= 0) return;
  const size_t bytes = select_smem(p.max_chunks, p.k / p.l_c);
  allow_smem(reinterpret_cast<const void*>(select_kernel), bytes, 0, g_select_smem, "the chunk ranking");
  select_kernel<<<unsigned(p.kv.n_seq), kSelectThreads, bytes, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("ihip select l_c=%d max_chunks=%lld", p.l_c, (long long)p.max_chunks);
}

void ihip_prune_stage_decode(const IhipStageGpuParams& p, Stream s) {
  ihip_score_decode(p, s);
  ihip_select_decode(p, s);
}

void ihip_decode_index(const IhipIndexGpuParams& p, Stream s) {
  if (p.n_seq <= 0) return;
  index_kernel<<<unsigned(p.n_seq), 128, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("ihip decode index n_seq=%d", p.n_seq);
}

}  // namespace longctx::cuda

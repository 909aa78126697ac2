// hip_estimate.cu: see hip_estimate.h. One CTA of 256 threads per (query head, query block):
// 32 groups of 8 threads, each group scoring one branch at a time (8 threads per dot product,
// 16-byte key loads, the xor-shuffle tree of hip_topk.h's order); the keep-the-best step ranks
// every branch by counting the branches that beat it (score, then index: the CPU's total order)
// and compacts the kept ones in branch order with a block prefix sum.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/hip_estimate.h"

namespace longctx::cuda {

namespace {

constexpr int kThreads = 256, kLanes = 8, kGroups = kThreads / kLanes;
constexpr int32_t kOpenEnd = 0x7fffffff;  // a decode window's end: clipped to the length by the kernel

struct Branch {
  int32_t a, g;  // first key block, blocks
};

struct Shape {  // one CTA's search, after its region is known
  int n_qs, head_dim;
  int64_t block_begin, block_end, key_end;
};

// Shared memory carve: q samples (fp32), their positions, chunks, branches, scores, keep flags,
// per-thread counts.
struct Smem {
  float* q;
  int64_t* pos;
  Branch* chunks;
  Branch* br;
  float* score;
  int* keep;
  int* scan;
};

__host__ __device__ inline size_t align16(size_t n) { return (n + 15) / 16 * 16; }

__host__ __device__ inline size_t smem_bytes(int n_qs, int d, int64_t m) {
  return align16(size_t(n_qs) * d * 4) + align16(size_t(n_qs) * 8) + align16(size_t(m) * 8) + align16(size_t(2 * m) * 8) +
         align16(size_t(2 * m) * 4) + align16(size_t(2 * m) * 4) + kThreads * 4;
}

__device__ Smem carve(char* base, int n_qs, int d, int64_t m) {
  Smem s;
  s.q = reinterpret_cast<float*>(base);
  base += align16(size_t(n_qs) * d * 4);
  s.pos = reinterpret_cast<int64_t*>(base);
  base += align16(size_t(n_qs) * 8);
  s.chunks = reinterpret_cast<Branch*>(base);
  base += align16(size_t(m) * 8);
  s.br = reinterpret_cast<Branch*>(base);
  base += align16(size_t(2 * m) * 8);
  s.score = reinterpret_cast<float*>(base);
  base += align16(size_t(2 * m) * 4);
  s.keep = reinterpret_cast<int*>(base);
  base += align16(size_t(2 * m) * 4);
  s.scan = reinterpret_cast<int*>(base);
  return s;
}

// q.key over head_dim in hip_topk.h's order: lane l of the group accumulates the 8-element chunks
// l, l+8, ... with fp32 FMAs, then the tree ((p0+p4)+(p2+p6)) + ((p1+p5)+(p3+p7)) by xor shuffles.
// Every lane of the warp must call it (the shuffles are warp-wide).
__device__ float group_dot(const float* q, const __nv_bfloat16* key, int d, int lane, bool valid) {
  float acc = 0.f;
  if (valid) {
    for (int c = lane; c * 8 < d; c += kLanes) {
      const uint4 raw = *reinterpret_cast<const uint4*>(key + 8 * c);
      const __nv_bfloat162* kp = reinterpret_cast<const __nv_bfloat162*>(&raw);
      const float* qq = q + 8 * c;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 kf = __bfloat1622float2(kp[e]);
        acc = fmaf(qq[2 * e], kf.x, acc);
        acc = fmaf(qq[2 * e + 1], kf.y, acc);
      }
    }
  }
  acc += __shfl_xor_sync(0xffffffffu, acc, 4);
  acc += __shfl_xor_sync(0xffffffffu, acc, 2);
  acc += __shfl_xor_sync(0xffffffffu, acc, 1);
  return acc;
}

// The bisection of hip_topk_blocks; leaves the selected blocks in s.chunks[0 .. count) (ascending)
// and returns count. KeyRow(j) gives key j's bf16 row of this head.
template <class KeyRow>
__device__ int search(const HipEstimateConfig& cfg, const Shape& sh, const Smem& s, KeyRow key_row) {
  const int tid = threadIdx.x, lane = tid % kLanes, group = tid / kLanes;
  const int64_t m = cfg.budget_blocks();
  const int64_t n = sh.block_end > sh.block_begin ? sh.block_end - sh.block_begin : 0;
  if (n <= m) {
    for (int64_t i = tid; i < n; i += kThreads) s.chunks[i] = {int32_t(sh.block_begin + i), 1};
    __syncthreads();
    return int(n);
  }
  for (int64_t c = tid; c < m; c += kThreads) {
    const int64_t lo = n * c / m, hi = n * (c + 1) / m;
    s.chunks[c] = {int32_t(sh.block_begin + lo), int32_t(hi - lo)};
  }
  __syncthreads();
  const int n_ks = cfg.b_k / cfg.b_sk;
  const int per_thread = int((2 * m + kThreads - 1) / kThreads);
  for (;;) {
    int wide = 0;
    for (int64_t c = tid; c < m; c += kThreads) wide |= s.chunks[c].g > 1;
    if (!__syncthreads_or(wide)) break;
    // Split: chunk c gives branches 2c (first half, size 0 when c is one block) and 2c + 1;
    // branch numbering is positional, as the CPU's list with the empty halves removed.
    for (int64_t c = tid; c < m; c += kThreads) {
      const Branch ch = s.chunks[c];
      const int32_t h = ch.g / 2;
      s.br[2 * c] = {ch.a, h};
      s.br[2 * c + 1] = {ch.a + h, ch.g - h};
    }
    __syncthreads();
    // Score every non-empty branch by its middle block.
    for (int64_t base = 0; base < 2 * m; base += kGroups) {
      const int64_t b = base + group;
      const bool live = b < 2 * m && s.br[b < 2 * m ? b : 0].g > 0;
      const Branch br = live ? s.br[b] : Branch{0, 1};
      const int64_t u = int64_t(br.a) + br.g / 2;
      float best = -INFINITY;
      for (int t = 0; t < n_ks; ++t) {
        const int64_t key = u * cfg.b_k + int64_t(t) * cfg.b_sk + cfg.b_sk - 1;
        for (int i = 0; i < sh.n_qs; ++i) {
          const bool ok = live && key < sh.key_end && key <= s.pos[i];
          const float v = group_dot(s.q + size_t(i) * sh.head_dim, key_row(ok ? key : 0), sh.head_dim, lane, ok);
          if (ok && v > best) best = v;
        }
      }
      if (lane == 0 && b < 2 * m) s.score[b] = live ? best : NAN;  // NaN marks an empty branch
    }
    __syncthreads();
    // Rank: a branch is kept when fewer than m live branches beat it (higher score, or the same
    // score and an earlier position). Empty branches (NaN) are never kept and never beat.
    int kept = 0;
    for (int k = 0; k < per_thread; ++k) {
      const int64_t i = int64_t(tid) * per_thread + k;
      int keep = 0;
      if (i < 2 * m && s.score[i] == s.score[i]) {
        const float si = s.score[i];
        int64_t rank = 0;
        for (int64_t j = 0; j < 2 * m; ++j) {
          const float sj = s.score[j];
          rank += (sj > si) || (sj == si && j < i);
        }
        keep = rank < m;
      }
      if (i < 2 * m) s.keep[i] = keep;
      kept += keep;
    }
    s.scan[tid] = kept;
    __syncthreads();
    for (int off = 1; off < kThreads; off *= 2) {  // inclusive prefix sum of the kept counts
      const int v = tid >= off ? s.scan[tid - off] : 0;
      __syncthreads();
      s.scan[tid] += v;
      __syncthreads();
    }
    int out = s.scan[tid] - kept;
    for (int k = 0; k < per_thread; ++k) {
      const int64_t i = int64_t(tid) * per_thread + k;
      if (i < 2 * m && s.keep[i]) s.chunks[out++] = s.br[i];
    }
    __syncthreads();
  }
  return int(m);
}

struct Region {
  int64_t key_end, block_begin, block_end;
};
__device__ Region region_of(const HipEstimateConfig& cfg, int64_t first) {
  Region r;
  r.key_end = first - cfg.window + 1 > cfg.sinks ? first - cfg.window + 1 : cfg.sinks;
  r.block_begin = cfg.sinks / cfg.b_k;
  const int64_t e = (r.key_end + cfg.b_k - 1) / cfg.b_k;
  r.block_end = r.key_end <= cfg.sinks ? r.block_begin : (e > r.block_begin ? e : r.block_begin);
  return r;
}

// Writes one row's R ranges: sinks, the count selected blocks, empty pads, the window.
__device__ void write_ranges(const HipEstimateConfig& cfg, const Smem& s, int count, int64_t key_end, int64_t sink_end,
                             int64_t win_end, int32_t* ranges) {
  const int64_t m = cfg.budget_blocks();
  for (int64_t i = threadIdx.x; i < m + 2; i += kThreads) {
    int32_t a, b;
    if (i == 0) a = 0, b = int32_t(sink_end);
    else if (i <= count) a = s.chunks[i - 1].a * cfg.b_k, b = a + cfg.b_k;
    else if (i <= m) a = b = int32_t(key_end);
    else a = int32_t(key_end), b = int32_t(win_end);
    ranges[2 * i] = a;
    ranges[2 * i + 1] = b;
  }
}

__device__ void load_q(const Smem& s, const __nv_bfloat16* q, int64_t q_row_stride, int n_qs, int b_sq, int rows,
                       int64_t pos0, int d) {
  for (int idx = threadIdx.x; idx < n_qs * d; idx += kThreads) {
    const int i = idx / d, e = idx % d;
    const int row = min(i * b_sq + b_sq - 1, rows - 1);
    s.q[idx] = __bfloat162float(q[row * q_row_stride + e]);
    if (e == 0) s.pos[i] = pos0 + row;
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads) prefill_kernel(HipPrefillParams p) {
  extern __shared__ __align__(16) char smem[];
  const HipEstimateConfig& cfg = p.cfg;
  const int h = blockIdx.y;
  const int64_t b = blockIdx.x, n_qblk = gridDim.x;
  const int64_t row0 = b * cfg.b_q;
  const int rows = int(p.n_q - row0 < cfg.b_q ? p.n_q - row0 : cfg.b_q);
  const int n_qs = (rows + cfg.b_sq - 1) / cfg.b_sq;
  const Smem s = carve(smem, (cfg.b_q + cfg.b_sq - 1) / cfg.b_sq, p.head_dim, cfg.budget_blocks());
  const auto* q = static_cast<const __nv_bfloat16*>(p.q) + (row0 * p.n_head + h) * p.head_dim;
  load_q(s, q, int64_t(p.n_head) * p.head_dim, n_qs, cfg.b_sq, rows, p.q_pos0 + row0, p.head_dim);
  const Region r = region_of(cfg, p.q_pos0 + row0);
  const Shape sh{n_qs, p.head_dim, r.block_begin, r.block_end, r.key_end < p.n_kv ? r.key_end : p.n_kv};
  const auto* k = static_cast<const __nv_bfloat16*>(p.k) + int64_t(h / (p.n_head / p.n_kv_head)) * p.head_dim;
  const int64_t k_stride = int64_t(p.n_kv_head) * p.head_dim;
  const int count = search(cfg, sh, s, [=](int64_t j) { return k + j * k_stride; });
  const int64_t e = int64_t(h) * n_qblk + b, m = cfg.budget_blocks();
  if (p.blocks)
    for (int i = threadIdx.x; i < count; i += kThreads) p.blocks[e * m + i] = s.chunks[i].a;
  if (p.n_blocks && threadIdx.x == 0) p.n_blocks[e] = count;
  if (p.ranges) {
    const int64_t end = min(p.q_pos0 + row0 + rows, p.n_kv), R = cfg.ranges_per_row();
    write_ranges(cfg, s, count, r.key_end, min(cfg.sinks, end), end, p.ranges + 2 * e * R);
    if (threadIdx.x == 0) {
      p.range_ptr[e + 1] = (e + 1) * R;
      p.col_ptr[e + 1] = 0;
      if (e == 0) p.range_ptr[0] = p.col_ptr[0] = 0;
    }
  }
}

__global__ void __launch_bounds__(kThreads) decode_kernel(HipDecodeParams p) {
  extern __shared__ __align__(16) char smem[];
  const HipEstimateConfig& cfg = p.cfg;
  const int h = blockIdx.x, seq = blockIdx.y;
  const int64_t r = int64_t(seq) * p.n_head + h, R = cfg.ranges_per_row();
  if (threadIdx.x == 0) {
    p.range_ptr[r + 1] = int32_t((r + 1) * R);
    p.col_ptr[r + 1] = 0;
    if (r == 0) p.range_ptr[0] = p.col_ptr[0] = 0;
  }
  const int64_t len = p.kv.seq_lens[seq], pos = len - 1;
  const int64_t last = p.refresh_pos[r];
  if (pos < 0 || !(last < 0 || pos < last || pos - last >= p.refresh)) return;  // cached step
  const Smem s = carve(smem, 1, p.kv.head_dim, cfg.budget_blocks());
  const int d = p.kv.head_dim;
  load_q(s, static_cast<const __nv_bfloat16*>(p.q) + r * d, 0, 1, 1, 1, pos, d);
  const Region rg = region_of(cfg, pos);
  const Shape sh{1, d, rg.block_begin, rg.block_end, rg.key_end < len ? rg.key_end : len};
  const auto* pool = static_cast<const __nv_bfloat16*>(p.kv.k_pool);
  const int32_t* table = p.kv.block_table + int64_t(seq) * p.kv.max_pages_per_seq;
  const int page = p.kv.page_size, n_kv_head = p.kv.n_kv_head, hk = h / (p.n_head / n_kv_head);
  const int count = search(cfg, sh, s, [=](int64_t j) {
    const int64_t row = int64_t(table[j / page]) * page + j % page;
    return pool + (row * n_kv_head + hk) * d;
  });
  const int64_t m = cfg.budget_blocks();
  if (p.blocks)
    for (int i = threadIdx.x; i < m; i += kThreads) p.blocks[r * m + i] = i < count ? s.chunks[i].a : -1;
  write_ranges(cfg, s, count, rg.key_end, cfg.sinks, kOpenEnd, p.ranges + 2 * r * R);
  if (threadIdx.x == 0) p.refresh_pos[r] = int32_t(pos);
}

void check_cfg(const HipEstimateConfig& c, int head_dim) {
  LC_REQUIRE(c.k >= 1 && c.b_q >= 1 && c.b_sq >= 1 && c.b_k >= 1 && c.b_sk >= 1 && c.k % c.b_k == 0 &&
                 c.b_k % c.b_sk == 0 && c.b_q % c.b_sq == 0,
             "internal: hip estimate with k=%lld b_q=%d b_sq=%d b_k=%d b_sk=%d", (long long)c.k, c.b_q, c.b_sq, c.b_k,
             c.b_sk);
  LC_REQUIRE(head_dim > 0 && head_dim % 8 == 0, "internal: hip estimate needs head_dim a multiple of 8, got %d", head_dim);
}

void set_smem(const void* kernel, size_t bytes) {
  int dev = 0, limit = 0;
  LC_CUDA_CHECK(cudaGetDevice(&dev), "hip estimate device");
  LC_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "hip estimate");
  LC_REQUIRE(bytes <= size_t(limit), "hip: k/b_k and b_q/b_sq need %zu bytes of shared memory per CTA, over the device's %d",
             bytes, limit);
  LC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
                "hip estimate smem %zu bytes", bytes);
}

}  // namespace

size_t hip_estimate_smem_bytes(const HipEstimateConfig& c, int head_dim) {
  return smem_bytes((c.b_q + c.b_sq - 1) / c.b_sq, head_dim, c.budget_blocks());
}

void hip_estimate_prefill(const HipPrefillParams& p, Stream s) {
  check_cfg(p.cfg, p.head_dim);
  if (p.n_q <= 0) return;
  const int64_t n_qblk = (p.n_q + p.cfg.b_q - 1) / p.cfg.b_q;
  const size_t bytes = hip_estimate_smem_bytes(p.cfg, p.head_dim);
  set_smem(reinterpret_cast<const void*>(prefill_kernel), bytes);
  prefill_kernel<<<dim3(unsigned(n_qblk), unsigned(p.n_head)), kThreads, bytes, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("hip_estimate_prefill n_q=%lld n_kv=%lld heads=%d", (long long)p.n_q, (long long)p.n_kv, p.n_head);
}

void hip_estimate_decode(const HipDecodeParams& p, Stream s) {
  check_cfg(p.cfg, p.kv.head_dim);
  LC_REQUIRE(p.kv.elem == KvElem::bf16, "hip: GPU decode estimation reads bf16 keys (the KV cache is not bf16)");
  if (p.kv.n_seq <= 0) return;
  const size_t bytes = smem_bytes(1, p.kv.head_dim, p.cfg.budget_blocks());
  set_smem(reinterpret_cast<const void*>(decode_kernel), bytes);
  decode_kernel<<<dim3(unsigned(p.n_head), unsigned(p.kv.n_seq)), kThreads, bytes, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("hip_estimate_decode n_seq=%d heads=%d", p.kv.n_seq, p.n_head);
}

}  // namespace longctx::cuda

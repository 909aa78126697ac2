// minference_block_sparse.cu (cuda): MInference's block-sparse estimate on the GPU: 64-token mean
// pooling and the pooled scores, the twin of pool_keys() / build_block_sparse_index() in
// sparse/block_sparse_index.cpp (the top-k is minference_select.cu).
//
// What:
//   pk[hk][c][t]   = mean over keys j in [64c, min(64c + 64, n_keys)) of K[j][hk][t]
//   qsum[s][b][t]  = sum over chunk rows i of query block b of Q[i][h][t]  (h = BS head of slot s)
//   score(b, c)    = (sum_t qsum[b][t] pk[c][t]) * (1 / rows_b) * scale  for c < n_cand(b),
//                    +inf for the forced diagonal blocks c >= diag0(b)
// written row by row to a scratch (rows padded to 8 floats) for the select kernel, with each
// group of 8 key blocks' maximum (gmax) for its filter.
// Why: pooled Q K^T approximates the block-averaged attention at 1/4096 of the cost; at 1M keys it
// is still 16K x 16K / 2 dot products of length 128 per head (0.55 TMAC for 32 heads), so it runs
// on tensor cores.
// How: pooling sums in the CPU's order (keys / rows ascending from 0.f, then one multiply), so
// pooled values are bit-identical to the CPU's. Scores: 128 x 64 output tiles, 4 warps of 32 rows
// x 64 columns, mma.sync m16n8k8 TF32 in the "3xTF32" split (x = hi + lo, both TF32;
// acc += a_lo b_hi + a_hi b_lo + a_hi b_hi), which keeps ~fp32 accuracy (relative error ~1e-6 of
// sum |a_t b_t|) at tensor-core speed. Operands are split once when staged (32-wide head-dim
// chunks, (hi, lo) pairs interleaved so a fragment element pair is one 64-bit load); CTAs above
// the causal triangle exit at once. A wave is a set of (BS slot, query rows) whose scores fit the
// scratch (sized to stay in L2, minference_index.cu), so the select kernel reads them back from L2.
#include <cuda_bf16.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/minference_kernels.cuh"

namespace longctx::cuda::mindex {
namespace {

using bf16 = __nv_bfloat16;

// ---- pooling ----------------------------------------------------------------------------------
constexpr int kPoolRowsPerCta = 4;  // pooled rows (key or query blocks) per CTA, D/2 threads each

__global__ void pool_k_kernel(const bf16* k, float* pk, uint64_t kv_mask, const Geom g) {
  const int hk = blockIdx.y;
  if (g.n_kv_head <= 64 && !((kv_mask >> hk) & 1u)) return;
  const int D = g.head_dim, half = D / 2;
  const int64_t c = int64_t(blockIdx.x) * kPoolRowsPerCta + threadIdx.x / half;
  const int t = (threadIdx.x % half) * 2;
  if (c >= g.nkb) return;
  const int64_t ldk = int64_t(g.n_kv_head) * D;
  const int64_t j0 = c * kBlk, j1 = min(j0 + kBlk, g.n_keys);
  const bf16* src = k + int64_t(hk) * D + t;
  float s0 = 0.f, s1 = 0.f;
#pragma unroll 8
  for (int64_t j = j0; j < j1; ++j) {
    const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(src + j * ldk));
    s0 += v.x;
    s1 += v.y;
  }
  const float inv = 1.f / float(j1 - j0);
  float* dst = pk + (int64_t(hk) * g.nkb + c) * D + t;
  dst[0] = s0 * inv;
  dst[1] = s1 * inv;
}

__global__ void pool_q_kernel(const bf16* q, const int32_t* bs_heads, float* qsum, const Geom g) {
  const int slot = blockIdx.y;
  const int h = bs_heads[slot];
  const int D = g.head_dim, half = D / 2;
  const int64_t b = int64_t(blockIdx.x) * kPoolRowsPerCta + threadIdx.x / half;
  const int t = (threadIdx.x % half) * 2;
  if (b >= g.n_qblk) return;
  const int64_t ldq = int64_t(g.n_head) * D;
  const int64_t i0 = b * kBlk, i1 = min(i0 + kBlk, g.n_q);
  const bf16* src = q + int64_t(h) * D + t;
  float s0 = 0.f, s1 = 0.f;
#pragma unroll 8
  for (int64_t i = i0; i < i1; ++i) {
    const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(src + i * ldq));
    s0 += v.x;
    s1 += v.y;
  }
  float* dst = qsum + (int64_t(slot) * g.n_qblk + b) * D + t;
  dst[0] = s0;
  dst[1] = s1;
}

// ---- scores ----------------------------------------------------------------------------------
constexpr int kTileRows = 128;               // query blocks per CTA tile (4 warps x 32 rows)
constexpr int kTileCols = 64;                // key blocks per CTA tile
constexpr int kKc = 32;                      // head-dim chunk staged in smem
constexpr int kPitch = kKc + 4;              // smem row pitch in (hi, lo) pairs: conflict-free 64-bit fragment loads
constexpr int kGemmThreads = 128;
constexpr size_t kGemmSmem = size_t(kTileRows + kTileCols) * kPitch * sizeof(uint2);  // 55 KB: 4 CTAs per SM
static_assert(kBsGroup == 8, "a score group is one mma n-tile of 8 key blocks");

__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  uint32_t h, l;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(h) : "f"(x));
  const float r = x - __uint_as_float(h);
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(l) : "f"(r));
  hi = h;
  lo = l;
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Stages rows [r0, r0 + nrows) x head-dim [kc, kc + kKc) of src ([n_src][D] fp32; rows >= n_src are
// zero) into dst[r][k] = (hi, lo) TF32 pairs.
template <int kRows>
__device__ __forceinline__ void stage_split(uint2* dst, const float* src, int64_t r0, int64_t n_src, int D, int kc) {
  constexpr int kVec = kKc / 4;  // float4 per row chunk
  for (int idx = threadIdx.x; idx < kRows * kVec; idx += kGemmThreads) {
    const int r = idx / kVec, c4 = (idx % kVec) * 4;
    const int64_t row = r0 + r;
    const float4 v = row < n_src ? *reinterpret_cast<const float4*>(src + row * D + kc + c4) : make_float4(0, 0, 0, 0);
    uint4 p, q;
    split_tf32(v.x, p.x, p.y);
    split_tf32(v.y, p.z, p.w);
    split_tf32(v.z, q.x, q.y);
    split_tf32(v.w, q.z, q.w);
    uint4* d = reinterpret_cast<uint4*>(dst + r * kPitch + c4);
    d[0] = p;
    d[1] = q;
  }
}

__global__ void __launch_bounds__(kGemmThreads) bs_score_kernel(const BsScoreArgs a) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint2* As = reinterpret_cast<uint2*>(smem_raw);  // [kTileRows][kPitch] (hi, lo)
  uint2* Bs = As + kTileRows * kPitch;             // [kTileCols][kPitch]
  const Geom& g = a.g;
  const int D = g.head_dim;
  const int64_t row0 = a.b0 + int64_t(blockIdx.y) * kTileRows;
  const int64_t col0 = int64_t(blockIdx.x) * kTileCols;
  const int s = a.s0 + blockIdx.z;
  const int64_t rlast = min(row0 + kTileRows, a.b1) - 1;
  if (col0 >= bs_n_cand(g, rlast)) return;  // the whole tile is past every row's candidates
  const int h = a.bs_heads[s];
  const int hk = h / g.group;
  const float* A = a.qsum + int64_t(s) * g.n_qblk * D;
  const float* B = a.pk + int64_t(hk) * g.nkb * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;

  float acc[2][kTileCols / 8][4];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int nt = 0; nt < kTileCols / 8; ++nt) acc[m][nt][0] = acc[m][nt][1] = acc[m][nt][2] = acc[m][nt][3] = 0.f;

  for (int kc = 0; kc < D; kc += kKc) {
    __syncthreads();
    stage_split<kTileRows>(As, A, row0, a.b1, D, kc);
    stage_split<kTileCols>(Bs, B, col0, g.nkb, D, kc);
    __syncthreads();
#pragma unroll
    for (int k8 = 0; k8 < kKc; k8 += 8) {
      uint32_t ahi[2][4], alo[2][4];
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const int ra = warp * 32 + m * 16 + gq;
        const uint2 p0 = As[ra * kPitch + k8 + tq], p1 = As[(ra + 8) * kPitch + k8 + tq];
        const uint2 p2 = As[ra * kPitch + k8 + tq + 4], p3 = As[(ra + 8) * kPitch + k8 + tq + 4];
        ahi[m][0] = p0.x, ahi[m][1] = p1.x, ahi[m][2] = p2.x, ahi[m][3] = p3.x;
        alo[m][0] = p0.y, alo[m][1] = p1.y, alo[m][2] = p2.y, alo[m][3] = p3.y;
      }
#pragma unroll
      for (int nt = 0; nt < kTileCols / 8; ++nt) {
        const int n = nt * 8 + gq;
        const uint2 q0 = Bs[n * kPitch + k8 + tq], q1 = Bs[n * kPitch + k8 + tq + 4];
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          mma_tf32(acc[m][nt], alo[m], q0.x, q1.x);
          mma_tf32(acc[m][nt], ahi[m], q0.y, q1.y);
          mma_tf32(acc[m][nt], ahi[m], q0.x, q1.x);
        }
      }
    }
  }

  // Epilogue: scale by 1/rows and the softmax scale (the CPU's s * inv * scale), force the
  // diagonal blocks, keep only each row's candidates; per 8 key blocks (one n-tile, a quad's 8
  // values) the maximum, for the select's filter.
  const int64_t base = int64_t(blockIdx.z) * a.span;  // this slot's rows; row b at cand_off[b] - cand_off[b0]
  constexpr float kInf = __builtin_huge_valf();
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = row0 + warp * 32 + m * 16 + gq + half * 8;
      const bool row_ok = row < a.b1;
      const int64_t rr = row_ok ? row : a.b0;
      const int64_t nc = row_ok ? bs_n_cand(g, rr) : 0, d0 = bs_diag0(g, rr);
      const float inv = 1.f / float(bs_rows(g, rr));
      const int64_t off = base + (a.cand_off[rr] - a.cand_off[a.b0]);
      float* orow = a.scratch + off;
#pragma unroll
      for (int nt = 0; nt < kTileCols / 8; ++nt) {
        float mx = -kInf;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t col = col0 + nt * 8 + 2 * tq + e;
          if (col >= nc) continue;
          const float v = col >= d0 ? kInf : acc[m][nt][half * 2 + e] * inv * g.scale;
          orow[col] = v;
          mx = fmaxf(mx, v);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const int64_t c8 = col0 + nt * 8;
        if (tq == 0 && c8 < nc) a.gmax[off / kBsGroup + c8 / kBsGroup] = mx;
      }
    }
}

}  // namespace

void bs_pool(const bf16* q, const bf16* k, const int32_t* bs_heads, int n_bs, uint64_t kv_mask, float* pk,
             float* qsum, const Geom& g, cudaStream_t s) {
  const int threads = kPoolRowsPerCta * (g.head_dim / 2);
  pool_k_kernel<<<dim3(unsigned((g.nkb + kPoolRowsPerCta - 1) / kPoolRowsPerCta), unsigned(g.n_kv_head)), threads, 0,
                  s>>>(k, pk, kv_mask, g);
  LC_LAUNCH_CHECK("pool_k_kernel nkb=%lld kv_heads=%d", (long long)g.nkb, g.n_kv_head);
  pool_q_kernel<<<dim3(unsigned((g.n_qblk + kPoolRowsPerCta - 1) / kPoolRowsPerCta), unsigned(n_bs)), threads, 0,
                  s>>>(q, bs_heads, qsum, g);
  LC_LAUNCH_CHECK("pool_q_kernel n_qblk=%lld bs_heads=%d", (long long)g.n_qblk, n_bs);
}

void bs_scores_wave(const BsScoreArgs& a, cudaStream_t s) {
  static const cudaError_t e =
      cudaFuncSetAttribute(bs_score_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kGemmSmem));
  LC_CUDA_CHECK(e, "bs_score_kernel: raising dynamic shared memory to %zu bytes", kGemmSmem);
  const int64_t cols = bs_n_cand(a.g, a.b1 - 1);  // candidates grow with the row
  const dim3 grid(unsigned((cols + kTileCols - 1) / kTileCols), unsigned((a.b1 - a.b0 + kTileRows - 1) / kTileRows),
                  unsigned(a.s1 - a.s0));
  bs_score_kernel<<<grid, kGemmThreads, kGemmSmem, s>>>(a);
  LC_LAUNCH_CHECK("bs_score_kernel rows=[%lld,%lld) slots=[%d,%d) grid=(%u,%u,%u)", (long long)a.b0,
                  (long long)a.b1, a.s0, a.s1, grid.x, grid.y, grid.z);
}

}  // namespace longctx::cuda::mindex

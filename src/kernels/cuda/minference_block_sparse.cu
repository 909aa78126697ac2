// minference_block_sparse.cu (cuda): MInference's block-sparse estimate on the GPU: 64-token mean
// pooling and the pooled scores, the twin of pool_keys() / build_block_sparse_index() in
// methods/minference/block_sparse_index.cpp (the top-k is minference_select.cu).
//
// What:
//   pk[hk][c][t]   = mean over keys j in [64c, min(64c + 64, n_keys)) of K[j][hk][t]
//   qsum[s][b][t]  = sum over chunk rows i of query block b of Q[i][h][t]  (h = BS head of slot s)
//   score(b, c)    = 2^(e_b + e_k) * sum_t qsum[b][t] pk[c][t]  for c < n_cand(b),
//                    +inf for the forced diagonal blocks c >= diag0(b)
// (e_b, e_k: the split's power-of-two scalings below) written row by row to a scratch (rows padded
// to kBsRowPad floats) with each group of 8 key blocks' maximum (gmax) for the select's filter.
// The CPU ranks s * (1 / rows_b) * scale with s = sum_t qsum[b][t] pk[c][t]: a positive factor per
// row (query block) away, so the same order within the row and the same top-k; the GPU leaves the
// dot products unscaled (three multiplies per score less; before 2026-11-22 it applied them, with
// the same selections up to rounding ties, which the tests allow as near-ties).
// Why: pooled Q K^T approximates the block-averaged attention at 1/4096 of the cost; at 1M keys it
// is still 16K x 16K / 2 dot products of length 128 per head (0.55 TMAC for 32 heads): tensor cores.
// How:
//   - pooling sums in the CPU's order (keys / rows ascending from 0.f, then one multiply), so the
//     pooled values are bit-identical to the CPU's;
//   - fp16 "3-term" split: every pooled row is scaled by an exact power of two 2^e (e per query
//     block; one per KV head for the keys) so its largest |x| lies in [2^14, 2^15), then
//     x 2^e = hi + lo with hi, lo fp16 (lo keeps the next 11 bits); a.b = a_hi b_hi + a_hi b_lo +
//     a_lo b_hi with fp32 accumulation, left scaled by 2^(e_a + e_b) (see "What"). Relative
//     error ~1e-6 of sum |a_t b_t| (as 3xTF32) at the fp16 tensor rate (m16n8k16). The split is
//     done once (pool_q writes q hi/lo, split_k writes k hi/lo), so the score kernel only copies;
//   - scores: a CTA (4 warps of 32 rows x 64 columns) keeps a 128-row query tile (hi/lo, all of D)
//     resident in swizzled smem and walks up to 4 key tiles of 64 blocks (cp.async, ldmatrix +
//     mma.sync), issuing the next key tile's copy before each tile's epilogue: per 128 x 64 tile
//     ~48 KB come from L2 instead of 96 KB (28.4 -> 17.8 ms at 1M keys on an H200; 8 key tiles
//     per CTA measured slower, 19.5 ms: fewer CTAs per wave). CTAs past the causal triangle exit
//     at once. A wave is a set of (BS slot, query rows) whose scores fit the scratch
//     (minference_index.cu);
//   - the epilogue has a warp-uniform fast path for tiles where every row of the warp sees 64
//     plain candidates (all but the ~2 diagonal tiles of a row): the values stored with no
//     per-element test, and the 32 group maxima of a thread reduced together as a reduce-scatter
//     over the quad (~350 instructions per thread and tile instead of ~1650 with 32 serialized
//     branches and the unscaling; the general path stays for the diagonal and partial tiles).
#include <cuda_bf16.h>

#include <algorithm>
#include <cuda_fp16.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/minference_kernels.cuh"
#include "kernels/cuda/mma.cuh"

namespace longctx::cuda::mindex {
namespace {

using bf16 = __nv_bfloat16;

// ---- pooling ----------------------------------------------------------------------------------
constexpr int kPoolRowsPerCta = 4;  // pooled rows (key or query blocks) per CTA, D/2 threads each

// Largest |value| as int bits (order-preserving for non-negative floats), for the fp16 scaling.
__device__ __forceinline__ int abs_bits(float x) { return __float_as_int(fabsf(x)); }

// x * 2^e as fp16 hi + lo.
__device__ __forceinline__ void split_f16(float x, int e, __half& hi, __half& lo) {
  const float v = ldexpf(x, e);
  hi = __float2half_rn(v);
  lo = __float2half_rn(v - __half2float(hi));
}

__global__ void pool_k_kernel(const bf16* k, float* pk, int* kmax, uint64_t kv_mask, const Geom g) {
  const int hk = blockIdx.y;
  if (g.n_kv_head <= 64 && !((kv_mask >> hk) & 1u)) return;
  const int D = g.head_dim, half = D / 2;
  const int64_t c = int64_t(blockIdx.x) * kPoolRowsPerCta + threadIdx.x / half;
  const int t = (threadIdx.x % half) * 2;
  int mx = 0;
  if (c < g.nkb) {
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
    s0 *= inv;
    s1 *= inv;
    float* dst = pk + (int64_t(hk) * g.nkb + c) * D + t;
    dst[0] = s0;
    dst[1] = s1;
    mx = max(abs_bits(s0), abs_bits(s1));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if ((threadIdx.x & 31) == 0 && mx > 0) atomicMax(kmax + hk, mx);
}

// pk -> fp16 hi/lo with the head's exponent (after every pool_k block has reported its maximum).
__global__ void split_k_kernel(const float* pk, const int* kmax, __half* khi, __half* klo, uint64_t kv_mask,
                               const Geom g) {
  const int hk = blockIdx.y;
  if (g.n_kv_head <= 64 && !((kv_mask >> hk) & 1u)) return;
  const int e = fp16_exponent(__int_as_float(kmax[hk]));
  const int64_t n = g.nkb * g.head_dim, base = int64_t(hk) * n;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    __half hi, lo;
    split_f16(pk[base + i], e, hi, lo);
    khi[base + i] = hi;
    klo[base + i] = lo;
  }
}

// Query-block sums scaled by their exponent (largest |sum| of the block into [2^14, 2^15)) as fp16
// hi/lo.
__global__ void pool_q_kernel(const bf16* q, const int32_t* bs_heads, __half* qhi, __half* qlo, const Geom g) {
  __shared__ int rmax[kPoolRowsPerCta];
  const int slot = blockIdx.y;
  const int h = bs_heads[slot];
  const int D = g.head_dim, half = D / 2;
  const int lr = threadIdx.x / half;
  const int64_t b = int64_t(blockIdx.x) * kPoolRowsPerCta + lr;
  const int t = (threadIdx.x % half) * 2;
  if (threadIdx.x < kPoolRowsPerCta) rmax[threadIdx.x] = 0;
  __syncthreads();
  float s0 = 0.f, s1 = 0.f;
  if (b < g.n_qblk) {
    const int64_t ldq = int64_t(g.n_head) * D;
    const int64_t i0 = b * kBlk, i1 = min(i0 + kBlk, g.n_q);
    const bf16* src = q + int64_t(h) * D + t;
#pragma unroll 8
    for (int64_t i = i0; i < i1; ++i) {
      const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(src + i * ldq));
      s0 += v.x;
      s1 += v.y;
    }
    atomicMax(&rmax[lr], max(abs_bits(s0), abs_bits(s1)));
  }
  __syncthreads();
  if (b < g.n_qblk) {
    const int e = fp16_exponent(__int_as_float(rmax[lr]));
    const int64_t o = (int64_t(slot) * g.n_qblk + b) * D + t;
    __half h0, l0, h1, l1;
    split_f16(s0, e, h0, l0);
    split_f16(s1, e, h1, l1);
    *reinterpret_cast<__half2*>(qhi + o) = __halves2half2(h0, h1);
    *reinterpret_cast<__half2*>(qlo + o) = __halves2half2(l0, l1);
  }
}

// ---- scores ----------------------------------------------------------------------------------
constexpr int kTileRows = 128;               // query blocks per CTA tile (4 warps x 32 rows)
constexpr int kTileCols = 64;                // key blocks per column tile
constexpr int kColTiles = 4;                 // column tiles per CTA (the query tile stays resident)
constexpr int kKc = 64;                      // head-dim chunk (one 128-byte swizzled smem row)
constexpr int kMaxChunks = 4;                // D <= 256 (Gemma 3's global layers)
constexpr int kGemmThreads = 128;
constexpr uint32_t kAChunk = kTileRows * kKc * 2;  // bytes of one [128][64] fp16 tile
constexpr uint32_t kBChunk = kTileCols * kKc * 2;  // bytes of one [64][64] fp16 tile
// Query hi/lo (all of D, resident) + key hi/lo (all of D, one column tile): 96 KB at D = 128
// (2 CTAs/SM), 192 KB at D = 256 (1 CTA/SM).
constexpr size_t gemm_smem(int D) { return size_t(2) * (D / kKc) * (kAChunk + kBChunk); }
constexpr size_t kGemmSmemMax = gemm_smem(kMaxChunks * kKc);
static_assert(kBsGroup == 8, "a score group is one mma n-tile of 8 key blocks");

// cp.async rows [r0, r0 + kRows) x head-dim [kc, kc + 64) of hi/lo ([n_src][D] fp16; rows >= n_src
// zero-filled) into swizzled smem tiles [kRows][64].
template <int kRows>
__device__ __forceinline__ void stage(uint32_t shi, uint32_t slo, const __half* hi, const __half* lo, int64_t r0,
                                      int64_t n_src, int D, int kc) {
  constexpr int kChunks = kKc / 8;  // 16-byte chunks per staged row
#pragma unroll
  for (int i = 0; i < kRows * kChunks / kGemmThreads; ++i) {
    const int idx = threadIdx.x + i * kGemmThreads;
    const int r = idx / kChunks, ch = idx % kChunks;
    const int64_t row = r0 + r;
    const bool ok = row < n_src;
    const int64_t o = (ok ? row : 0) * D + kc + ch * 8;
    mma::cp_async16(shi + mma::swz<kKc>(r, ch), hi + o, ok ? 16 : 0);
    mma::cp_async16(slo + mma::swz<kKc>(r, ch), lo + o, ok ? 16 : 0);
  }
}

// One CTA: query rows [row0, row0 + 128) of one BS slot against up to kColTiles column tiles of 64
// key blocks. The query tile (hi/lo, all of D) is staged once; per column tile the key tile is
// staged, the 128 x 64 scores computed (3 fp16 mma per product), and the next key tile's copy is
// issued before this tile's epilogue so that the copy overlaps the epilogue's stores.
__global__ void __launch_bounds__(kGemmThreads, 2) bs_score_kernel(const BsScoreArgs a) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  const uint32_t sA = mma::smem_u32(smem_raw);            // [chunk][hi, lo][128][64] fp16, swizzled
  const Geom& g = a.g;
  const int D = g.head_dim, n_chunks = D / kKc;
  const uint32_t sB = sA + n_chunks * 2 * kAChunk;        // [chunk][hi, lo][64][64]
  const int64_t row0 = a.b0 + int64_t(blockIdx.y) * kTileRows;
  const int64_t colA = int64_t(blockIdx.x) * (kColTiles * kTileCols);
  const int s = a.s0 + blockIdx.z;
  const int64_t rlast = min(row0 + kTileRows, a.b1) - 1;
  const int64_t cand_max = bs_n_cand(g, rlast);  // candidates grow with the row
  if (colA >= cand_max) return;  // every tile is past every row's candidates
  const int n_tiles = int(min(int64_t(kColTiles), (cand_max - colA + kTileCols - 1) / kTileCols));
  const int h = a.bs_heads[s];
  const int hk = h / g.group;
  const int64_t qoff = int64_t(s) * g.n_qblk * D, koff = int64_t(hk) * g.nkb * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gq = lane >> 2, tq = lane & 3;

  for (int c = 0; c < n_chunks; ++c) {
    stage<kTileRows>(sA + (2 * c) * kAChunk, sA + (2 * c + 1) * kAChunk, a.qhi + qoff, a.qlo + qoff, row0, a.b1, D,
                     c * kKc);
    stage<kTileCols>(sB + (2 * c) * kBChunk, sB + (2 * c + 1) * kBChunk, a.khi + koff, a.klo + koff, colA, g.nkb, D,
                     c * kKc);
  }
  mma::cp_async_commit();

  // This thread's 4 output rows (m, half): their candidates, first forced block, output offset.
  const int64_t base = int64_t(blockIdx.z) * a.span;  // this slot's rows; row b at cand_off[b] - cand_off[b0]
  int64_t r_nc[4], r_d0[4], r_off[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = i >> 1, half = i & 1;
    const int64_t row = row0 + warp * 32 + m * 16 + gq + half * 8;
    const bool row_ok = row < a.b1;
    const int64_t rr = row_ok ? row : a.b0;
    r_nc[i] = row_ok ? bs_n_cand(g, rr) : 0;
    r_d0[i] = bs_diag0(g, rr);
    r_off[i] = base + (a.cand_off[rr] - a.cand_off[a.b0]);
  }
  constexpr float kInf = __builtin_huge_valf();

  mma::cp_async_wait<0>();
  __syncthreads();
#pragma unroll 1
  for (int t = 0; t < n_tiles; ++t) {
    const int64_t col0 = colA + int64_t(t) * kTileCols;
    float acc[2][kTileCols / 8][4];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int nt = 0; nt < kTileCols / 8; ++nt) acc[m][nt][0] = acc[m][nt][1] = acc[m][nt][2] = acc[m][nt][3] = 0.f;

#pragma unroll 1
    for (int c = 0; c < n_chunks; ++c) {
      const uint32_t sAhi = sA + (2 * c) * kAChunk, sAlo = sAhi + kAChunk;
      const uint32_t sBhi = sB + (2 * c) * kBChunk, sBlo = sBhi + kBChunk;
#pragma unroll
      for (int k16 = 0; k16 < kKc / 16; ++k16) {
        uint32_t ahi[2][4], alo[2][4];
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          const int r = warp * 32 + m * 16 + (lane & 15), ch = k16 * 2 + (lane >> 4);
          mma::ldmatrix_x4(sAhi + mma::swz<kKc>(r, ch), ahi[m][0], ahi[m][1], ahi[m][2], ahi[m][3]);
          mma::ldmatrix_x4(sAlo + mma::swz<kKc>(r, ch), alo[m][0], alo[m][1], alo[m][2], alo[m][3]);
        }
#pragma unroll
        for (int np = 0; np < kTileCols / 16; ++np) {
          const int mat = lane >> 3;
          const int key = np * 16 + (mat >> 1) * 8 + (lane & 7), ch = k16 * 2 + (mat & 1);
          uint32_t bh0, bh1, bh2, bh3, bl0, bl1, bl2, bl3;
          mma::ldmatrix_x4(sBhi + mma::swz<kKc>(key, ch), bh0, bh1, bh2, bh3);
          mma::ldmatrix_x4(sBlo + mma::swz<kKc>(key, ch), bl0, bl1, bl2, bl3);
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            mma::mma_f16_16816(acc[m][2 * np], alo[m], bh0, bh1);
            mma::mma_f16_16816(acc[m][2 * np], ahi[m], bl0, bl1);
            mma::mma_f16_16816(acc[m][2 * np], ahi[m], bh0, bh1);
            mma::mma_f16_16816(acc[m][2 * np + 1], alo[m], bh2, bh3);
            mma::mma_f16_16816(acc[m][2 * np + 1], ahi[m], bl2, bl3);
            mma::mma_f16_16816(acc[m][2 * np + 1], ahi[m], bh2, bh3);
          }
        }
      }
    }

    // Every warp has read the key tile: start copying the next one, then the epilogue.
    __syncthreads();
    if (t + 1 < n_tiles) {
      for (int c = 0; c < n_chunks; ++c)
        stage<kTileCols>(sB + (2 * c) * kBChunk, sB + (2 * c + 1) * kBChunk, a.khi + koff, a.klo + koff,
                         col0 + kTileCols, g.nkb, D, c * kKc);
      mma::cp_async_commit();
    }

    // Epilogue: the raw dot products (see "scores" above), the diagonal blocks forced (+inf),
    // only each row's candidates kept; per 8 key blocks (one n-tile: a quad's 8 values) the
    // maximum, for the select's filter.
    // Fast path (warp-uniform): every row of the warp has all 64 columns of this tile as plain
    // candidates (no forced or missing block): every value stored with no per-element test, and
    // the 32 group maxima of this thread reduced together (independent shuffles instead of 32
    // serialized branches).
    bool plain = true;
#pragma unroll
    for (int i = 0; i < 4; ++i) plain = plain && col0 + kTileCols <= min(r_nc[i], r_d0[i]);
    if (__all_sync(0xffffffffu, plain)) {
      float mx[4][kTileCols / 8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int m = i >> 1, half = i & 1;
        float* orow = a.scratch + r_off[i] + col0 + 2 * tq;
#pragma unroll
        for (int nt = 0; nt < kTileCols / 8; ++nt) {
          const float v0 = acc[m][nt][half * 2], v1 = acc[m][nt][half * 2 + 1];
          *reinterpret_cast<float2*>(orow + nt * 8) = make_float2(v0, v1);
          mx[i][nt] = fmaxf(v0, v1);
        }
      }
      // The 8 groups' maxima over the quad as a reduce-scatter: lanes tq, tq ^ 1 swap half their
      // groups (each keeps the groups nt with nt & 1 == tq & 1), then lanes tq, tq ^ 2 swap half
      // of the rest; lane tq ends with groups tq and tq + 4. 6 shuffles per row instead of 16.
      const bool odd = tq & 1, hi2 = tq & 2;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float p[4];  // group 2j + (tq & 1) over lanes {tq, tq ^ 1}
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float send = odd ? mx[i][2 * j] : mx[i][2 * j + 1];
          const float keep = odd ? mx[i][2 * j + 1] : mx[i][2 * j];
          p[j] = fmaxf(keep, __shfl_xor_sync(0xffffffffu, send, 1));
        }
        float f[2];  // group 4q + tq over the quad
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const float send = hi2 ? p[2 * q] : p[2 * q + 1];
          const float keep = hi2 ? p[2 * q + 1] : p[2 * q];
          f[q] = fmaxf(keep, __shfl_xor_sync(0xffffffffu, send, 2));
        }
        float* gm = a.gmax + r_off[i] / kBsGroup + col0 / kBsGroup;
        gm[tq] = f[0];
        gm[tq + 4] = f[1];
      }
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int m = i >> 1, half = i & 1;
        const int64_t nc = r_nc[i], d0 = r_d0[i];
        float* orow = a.scratch + r_off[i];
#pragma unroll
        for (int nt = 0; nt < kTileCols / 8; ++nt) {
          const int64_t col = col0 + nt * 8 + 2 * tq;  // even; rows start at multiples of 8 floats
          float v[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            v[e] = col + e >= d0 ? kInf : acc[m][nt][half * 2 + e];
          }
          float mx = -kInf;
          if (col + 1 < nc) {
            *reinterpret_cast<float2*>(orow + col) = make_float2(v[0], v[1]);
            mx = fmaxf(v[0], v[1]);
          } else if (col < nc) {
            orow[col] = v[0];
            mx = v[0];
          }
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const int64_t c8 = col0 + nt * 8;
          if (tq == 0 && c8 < nc) a.gmax[r_off[i] / kBsGroup + c8 / kBsGroup] = mx;
        }
      }
    }

    if (t + 1 < n_tiles) {
      mma::cp_async_wait<0>();
      __syncthreads();
    }
  }
}

}  // namespace

void bs_pool(const bf16* q, const bf16* k, const int32_t* bs_heads, int n_bs, uint64_t kv_mask, const BsPooled& o,
             const Geom& g, cudaStream_t s) {
  const int threads = kPoolRowsPerCta * (g.head_dim / 2);
  LC_CUDA_CHECK(cudaMemsetAsync(o.kmax, 0, size_t(g.n_kv_head) * sizeof(int32_t), s), "pool_k: clearing the maxima");
  pool_k_kernel<<<dim3(unsigned((g.nkb + kPoolRowsPerCta - 1) / kPoolRowsPerCta), unsigned(g.n_kv_head)), threads, 0,
                  s>>>(k, o.pk, o.kmax, kv_mask, g);
  LC_LAUNCH_CHECK("pool_k_kernel nkb=%lld kv_heads=%d", (long long)g.nkb, g.n_kv_head);
  constexpr int kSplitThreads = 256;
  const int64_t per_head = g.nkb * g.head_dim;
  split_k_kernel<<<dim3(unsigned(std::min<int64_t>((per_head + kSplitThreads - 1) / kSplitThreads, 4096)),
                        unsigned(g.n_kv_head)),
                   kSplitThreads, 0, s>>>(o.pk, o.kmax, o.khi, o.klo, kv_mask, g);
  LC_LAUNCH_CHECK("split_k_kernel nkb=%lld kv_heads=%d", (long long)g.nkb, g.n_kv_head);
  pool_q_kernel<<<dim3(unsigned((g.n_qblk + kPoolRowsPerCta - 1) / kPoolRowsPerCta), unsigned(n_bs)), threads, 0,
                  s>>>(q, bs_heads, o.qhi, o.qlo, g);
  LC_LAUNCH_CHECK("pool_q_kernel n_qblk=%lld bs_heads=%d", (long long)g.n_qblk, n_bs);
}

void bs_scores_wave(const BsScoreArgs& a, cudaStream_t s) {
  static const cudaError_t e =
      cudaFuncSetAttribute(bs_score_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kGemmSmemMax));
  LC_CUDA_CHECK(e, "bs_score_kernel: raising dynamic shared memory to %zu bytes", kGemmSmemMax);
  LC_REQUIRE(a.g.head_dim % kKc == 0 && a.g.head_dim <= kMaxChunks * kKc, "bs_score_kernel: head_dim %d unsupported",
             a.g.head_dim);
  const int64_t cols = bs_n_cand(a.g, a.b1 - 1);  // candidates grow with the row
  constexpr int64_t kCtaCols = int64_t(kColTiles) * kTileCols;
  const dim3 grid(unsigned((cols + kCtaCols - 1) / kCtaCols), unsigned((a.b1 - a.b0 + kTileRows - 1) / kTileRows),
                  unsigned(a.s1 - a.s0));
  bs_score_kernel<<<grid, kGemmThreads, gemm_smem(a.g.head_dim), s>>>(a);
  LC_LAUNCH_CHECK("bs_score_kernel rows=[%lld,%lld) slots=[%d,%d) grid=(%u,%u,%u)", (long long)a.b0,
                  (long long)a.b1, a.s0, a.s1, grid.x, grid.y, grid.z);
}

}  // namespace longctx::cuda::mindex

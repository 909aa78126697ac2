// minference_vs_estimate.cu (cuda): MInference's vertical-slash estimate on the GPU, the twin of
// estimate_vs_scores() in methods/minference/vs_estimate.cpp.
//
// What: for every vertical-slash query head h, with the chunk's last R = min(64, n_q) queries
// (absolute positions P0 .. P0 + R - 1, P0 = q_pos0 + n_q - R) against the n_keys = q_pos0 + n_q
// keys: A = scale * Q_last K^T, causal (row r sees keys <= P0 + r), softmax per row in fp32, then
//   vscore[h][j] = sum_r A[r][j]          (column sums: vertical scores)
//   sscore[h][o] = sum_r A[r][P0 + r - o] (diagonal sums: slash scores, offset o = q - k)
// with the forced lines already +inf (j < 30, o < 100), ready for the top-k.
// Why on the GPU: it is a 64 x n_keys product per head; at 1M keys it must stay within a few ms.
// How: two passes over K, each CTA = one KV head x up to 4 query heads sharing it (K read once
// per pass for the whole GQA group) x one chunk of keys, 16 warps = 4 heads x 4 m-tiles of 16 rows;
// K tiles of 64 keys (double-buffered cp.async, swizzled), S by mma.sync bf16 (fp32 accumulate).
//   pass 1: per row the running max and sum of exp over the chunk (online softmax) -> part[];
//   combine: per row the global max m and 1 / sum (fixed chunk order: deterministic);
//   pass 2: w = exp(s - m) / sum into smem W [head][row][key], then per key column sums and per
//     diagonal sums. A diagonal crosses 64 consecutive keys, so target key j* = key of the last
//     row (o = n_keys - 1 - j*) is owned by the tile holding j*: its contributions from the 63
//     keys before the tile come from the previous tile as "pending" partial sums (smem), and each
//     chunk starts with one warm-up tile (the 64 keys before it) that only produces pending.
// Summation order equals the CPU's (rows ascending from 0.f, for columns and for diagonals), so
// with equal weights the sums are bit-identical; weights differ from the CPU's only by the dot
// product's accumulation order and exp (relative ~1e-6).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/minference_kernels.cuh"
#include "kernels/cuda/mma.cuh"

namespace longctx::cuda::mindex {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kT = 64;                          // keys per tile (>= R - 1: pending fits one tile)
constexpr int kMTiles = kBlk / 16;              // m16 tiles per head (64 rows)
constexpr int kWarps = kVsHeadsPerCta * kMTiles;  // 16: one m-tile of one head per warp
constexpr int kThreads = kWarps * 32;           // 512
constexpr int kWStride = kT + 8;                // W row pitch (floats): conflict-free float2 fragment stores
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kInf = __builtin_huge_valf();

template <int D>
constexpr size_t smem_bytes(bool scores) {
  return size_t(2) * kT * D * sizeof(bf16) +
         (scores ? size_t(kVsHeadsPerCta) * kBlk * kWStride * 4 + size_t(2) * kVsHeadsPerCta * kBlk * 4 : 0);
}

// K tile [64 keys][D] of KV head hk starting at key j0 into a swizzled smem buffer (zeros past
// the visible keys or before 0).
template <int D>
__device__ __forceinline__ void load_k_tile(bf16* ks, const bf16* k, int64_t j0, int hk, const Geom& g) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per key row
  const int64_t ldk = int64_t(g.n_kv_head) * D;
  const uint32_t base = mma::smem_u32(ks);
  for (int c = threadIdx.x; c < kT * kChunks; c += kThreads) {
    const int key = c / kChunks, ch = c % kChunks;
    const int64_t j = j0 + key;
    const bool ok = j >= 0 && j < g.n_keys;
    const bf16* src = k + (ok ? j : 0) * ldk + int64_t(hk) * D + ch * 8;
    mma::cp_async16(base + mma::swz<D>(key, ch), src, ok ? 16 : 0);
  }
  mma::cp_async_commit();
}

template <int D, bool kScores>
__global__ void __launch_bounds__(kThreads, 1) vs_pass_kernel(const VsEstimateArgs a) {
  extern __shared__ __align__(128) uint8_t smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);                                       // [2][kT][D] swizzled
  float* W = reinterpret_cast<float*>(smem + size_t(2) * kT * D * sizeof(bf16));  // [4][64][kWStride]
  float* pend = W + kVsHeadsPerCta * kBlk * kWStride;                             // [2][4][64]

  const Geom& g = a.g;
  const VsBatch& bt = a.batches[blockIdx.y];  // read in place (a local copy indexed at run time would live in local memory)
  const int c = blockIdx.x;
  const int64_t kc0 = int64_t(c) * a.chunk_keys;
  const int64_t kc1 = min(kc0 + a.chunk_keys, g.n_keys);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gq = lane >> 2, tq = lane & 3;  // fragment row group, thread in group
  const int hh = warp / kMTiles, mt = warp % kMTiles;
  const bool active = hh < bt.nh && mt * 16 < g.R;
  const int h = bt.h[hh < bt.nh ? hh : 0];
  const int R = g.R;
  const int64_t r0 = g.n_q - R;         // first estimating row (chunk-relative)
  const int64_t P0 = g.q_pos0 + r0;     // its absolute position
  const int ra = mt * 16 + gq, rb = ra + 8;  // this thread's two rows (0..63)

  // Q fragments of this warp's 16 rows (rows >= R are zero), kept in registers.
  uint32_t qa[D / 16][4];
  {
    const int64_t ldq = int64_t(g.n_head) * D;
    auto ld = [&](int row, int col) -> uint32_t {
      if (!active || row >= R) return 0u;
      return *reinterpret_cast<const uint32_t*>(a.q + (r0 + row) * ldq + int64_t(h) * D + col);
    };
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      qa[kk][0] = ld(ra, kk * 16 + 2 * tq);
      qa[kk][1] = ld(rb, kk * 16 + 2 * tq);
      qa[kk][2] = ld(ra, kk * 16 + 8 + 2 * tq);
      qa[kk][3] = ld(rb, kk * 16 + 8 + 2 * tq);
    }
  }

  // Pass 1 state: running max (shared by the quad) and this thread's partial sum per row.
  float m_a = -kInf, m_b = -kInf, l_a = 0.f, l_b = 0.f;
  // Pass 2 state: the rows' max and 1 / sum.
  float inv_a = 0.f, inv_b = 0.f;
  if constexpr (kScores) {
    if (active) {
      const float2 sa = a.rowstat[int64_t(h) * kBlk + ra], sb = a.rowstat[int64_t(h) * kBlk + rb];
      m_a = sa.x, inv_a = sa.y, m_b = sb.x, inv_b = sb.y;
    }
    for (int i = threadIdx.x; i < 2 * kVsHeadsPerCta * kBlk; i += kThreads) pend[i] = 0.f;
  }
  const float scale = g.scale;

  // Tiles: [first, kc1) in steps of 64; pass 2 starts one tile early (warm-up) unless at key 0.
  const int64_t first = (kScores && kc0 > 0) ? kc0 - kT : kc0;
  const int n_tiles = int((kc1 - first + kT - 1) / kT);
  load_k_tile<D>(ks, a.k, first, bt.hk, g);

  for (int it = 0; it < n_tiles; ++it) {
    const int64_t j0 = first + int64_t(it) * kT;
    const bool warm = kScores && j0 < kc0;
    bf16* cur = ks + (it & 1) * kT * D;
    __syncthreads();  // everyone is done with the buffer the next load overwrites (and with W)
    if (it + 1 < n_tiles) {
      load_k_tile<D>(ks + ((it + 1) & 1) * kT * D, a.k, j0 + kT, bt.hk, g);
      mma::cp_async_wait<1>();
    } else {
      mma::cp_async_wait<0>();
    }
    __syncthreads();

    if (active) {
      float acc[kT / 8][4];
#pragma unroll
      for (int nt = 0; nt < kT / 8; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
      const uint32_t kbase = mma::smem_u32(cur);
      const int mat = lane >> 3, mr = lane & 7;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
        for (int np = 0; np < kT / 16; ++np) {
          const int key = np * 16 + (mat >> 1) * 8 + mr;
          uint32_t b0, b1, b2, b3;
          mma::ldmatrix_x4(kbase + mma::swz<D>(key, kk * 2 + (mat & 1)), b0, b1, b2, b3);
          mma::mma_bf16_16816(acc[2 * np], qa[kk], b0, b1);
          mma::mma_bf16_16816(acc[2 * np + 1], qa[kk], b2, b3);
        }
      }
      // Scores, causal mask (row r sees keys <= P0 + r; rows >= R see nothing).
      const int64_t lim_a = ra < R ? P0 + ra : -1, lim_b = rb < R ? P0 + rb : -1;
      if constexpr (!kScores) {
        float mx_a = -kInf, mx_b = -kInf;
#pragma unroll
        for (int nt = 0; nt < kT / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t j = j0 + nt * 8 + 2 * tq + (e & 1);
            const bool ok = j <= ((e < 2) ? lim_a : lim_b);
            const float sv = ok ? acc[nt][e] * scale : -kInf;
            acc[nt][e] = sv;
            if (e < 2) mx_a = fmaxf(mx_a, sv);
            else mx_b = fmaxf(mx_b, sv);
          }
        mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
        mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
        mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
        mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
        const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
        if (mn_a != -kInf) {
          l_a *= exp2f((m_a - mn_a) * kLog2e);
          m_a = mn_a;
        }
        if (mn_b != -kInf) {
          l_b *= exp2f((m_b - mn_b) * kLog2e);
          m_b = mn_b;
        }
#pragma unroll
        for (int nt = 0; nt < kT / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float sv = acc[nt][e];
            if (sv == -kInf) continue;
            if (e < 2) l_a += exp2f((sv - m_a) * kLog2e);
            else l_b += exp2f((sv - m_b) * kLog2e);
          }
      } else {
        float* Wh = W + hh * kBlk * kWStride;
#pragma unroll
        for (int nt = 0; nt < kT / 8; ++nt) {
          float w[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t j = j0 + nt * 8 + 2 * tq + (e & 1);
            const bool ok = j >= 0 && j <= ((e < 2) ? lim_a : lim_b);
            // w = exp(s - m) * (1 / sum), as the CPU: row[j] = exp(row[j] - mx); row[j] * inv.
            w[e] = ok ? exp2f((acc[nt][e] * scale - ((e < 2) ? m_a : m_b)) * kLog2e) * ((e < 2) ? inv_a : inv_b)
                      : 0.f;
          }
          *reinterpret_cast<float2*>(Wh + ra * kWStride + nt * 8 + 2 * tq) = make_float2(w[0], w[1]);
          *reinterpret_cast<float2*>(Wh + rb * kWStride + nt * 8 + 2 * tq) = make_float2(w[2], w[3]);
        }
      }
    }

    if constexpr (kScores) {
      __syncthreads();  // W complete
      // Thread (hx, t): diagonal target t of head hx (t < 64: key j0 + t of this tile; t >= 64:
      // pending for the next tile), and for t < 64 the column sum of key j0 + t.
      const int hx = threadIdx.x / 128, t = threadIdx.x % 128;
      if (hx < bt.nh) {
        const int hq = bt.h[hx];
        const float* Wh = W + hx * kBlk * kWStride;
        const float* pin = pend + ((it & 1) * kVsHeadsPerCta + hx) * kBlk;
        float* pout = pend + (((it + 1) & 1) * kVsHeadsPerCta + hx) * kBlk;
        if (t < kT + R - 1) {
          // Rows whose key (j* - (R-1-r)) lies in this tile: r in [R-1-t, R-1-t+63] n [0, R-1].
          // Rows before that (keys in the previous tile) are already summed in pending.
          float acc = t < R - 1 ? pin[t] : 0.f;
          const int rlo = max(0, R - 1 - t), rhi = min(R - 1, R - 1 - t + kT - 1);
          for (int r = rlo; r <= rhi; ++r) acc += Wh[r * kWStride + t - (R - 1 - r)];
          if (t < kT) {
            const int64_t js = j0 + t;
            if (!warm && js < g.n_keys) {
              const int64_t o = g.n_keys - 1 - js;
              a.sscore[int64_t(hq) * a.stride + o] = o < kForcedDiags ? kInf : acc;
            }
          } else {
            pout[t - kT] = acc;
          }
        }
        if (t < kT) {
          const int64_t j = j0 + t;
          if (!warm && j < g.n_keys) {
            float v = 0.f;
            for (int r = 0; r < R; ++r) v += Wh[r * kWStride + t];
            a.vscore[int64_t(hq) * a.stride + j] = j < kForcedCols ? kInf : v;
          }
        }
      }
    }
  }

  if constexpr (!kScores) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
    if (active && tq == 0) {
      float2* p = a.part + (int64_t(c) * g.n_head + h) * kBlk;
      p[ra] = make_float2(m_a, l_a);
      p[rb] = make_float2(m_b, l_b);
    }
  }
}

// Per (VS head, estimating row): global max and 1 / sum over the chunks, in chunk order.
__global__ void vs_combine_kernel(const VsEstimateArgs a) {
  const int h = blockIdx.x, r = threadIdx.x;
  if (a.heads[h].kind != kKindVS || r >= a.g.R) return;
  float m = -kInf;
  for (int c = 0; c < a.n_chunks; ++c) m = fmaxf(m, a.part[(int64_t(c) * a.g.n_head + h) * kBlk + r].x);
  float l = 0.f;
  for (int c = 0; c < a.n_chunks; ++c) {
    const float2 p = a.part[(int64_t(c) * a.g.n_head + h) * kBlk + r];
    if (p.x != -kInf) l += p.y * exp2f((p.x - m) * kLog2e);
  }
  a.rowstat[int64_t(h) * kBlk + r] = make_float2(m, 1.f / l);
}

template <int D>
void launch(const VsEstimateArgs& a, cudaStream_t s) {
  static const cudaError_t e1 =
      cudaFuncSetAttribute(vs_pass_kernel<D, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes<D>(false)));
  static const cudaError_t e2 =
      cudaFuncSetAttribute(vs_pass_kernel<D, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes<D>(true)));
  LC_CUDA_CHECK(e1, "vs_pass_kernel<%d>: raising dynamic shared memory", D);
  LC_CUDA_CHECK(e2, "vs_pass_kernel<%d>: raising dynamic shared memory", D);
  const dim3 grid(unsigned(a.n_chunks), unsigned(a.n_batches));
  vs_pass_kernel<D, false><<<grid, kThreads, smem_bytes<D>(false), s>>>(a);
  LC_LAUNCH_CHECK("vs_pass_kernel<%d, stats> chunks=%d batches=%d n_keys=%lld", D, a.n_chunks, a.n_batches,
                  (long long)a.g.n_keys);
  vs_combine_kernel<<<unsigned(a.g.n_head), kBlk, 0, s>>>(a);
  LC_LAUNCH_CHECK("vs_combine_kernel heads=%d", a.g.n_head);
  vs_pass_kernel<D, true><<<grid, kThreads, smem_bytes<D>(true), s>>>(a);
  LC_LAUNCH_CHECK("vs_pass_kernel<%d, scores> chunks=%d batches=%d n_keys=%lld", D, a.n_chunks, a.n_batches,
                  (long long)a.g.n_keys);
}

}  // namespace

void vs_chunking(int64_t n_keys, int n_batches, int num_sms, int64_t& chunk_keys, int& n_chunks) {
  // Enough CTAs for ~4 per SM over all batches (one CTA of 512 threads fits an SM at a time,
  // so several waves balance the uneven tails), but at least kMinTiles tiles per chunk so the
  // warm-up tile of pass 2 costs at most 1/kMinTiles extra.
  constexpr int64_t kMinTiles = 4;
  const int64_t tiles = (n_keys + kT - 1) / kT;
  int64_t want = (int64_t(4) * std::max(num_sms, 1) + n_batches - 1) / std::max(n_batches, 1);
  want = std::clamp<int64_t>(want, 1, std::max<int64_t>(1, tiles / kMinTiles));
  want = std::min<int64_t>(want, kVsMaxChunks);
  const int64_t tiles_per = (tiles + want - 1) / want;
  chunk_keys = tiles_per * kT;
  n_chunks = int((n_keys + chunk_keys - 1) / chunk_keys);
}

void vs_estimate(const VsEstimateArgs& a, cudaStream_t s) {
  if (a.n_batches == 0) return;
  if (a.g.head_dim == 128) launch<128>(a, s);
  else if (a.g.head_dim == 64) launch<64>(a, s);
  else if (a.g.head_dim == 256) launch<256>(a, s);
  else LC_REQUIRE(false, "minference index: head_dim %d unsupported (64, 128 or 256)", a.g.head_dim);
}

}  // namespace longctx::cuda::mindex

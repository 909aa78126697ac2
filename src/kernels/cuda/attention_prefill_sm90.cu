// attention_prefill_sm90.cu (cuda): dense (causal) prefill attention for Hopper, FA3-style.
//
// What: the same function as attention_prefill.cu (attention.h: bf16 Q/K/V/O, fp32 LSE, GQA,
// causal with q_pos0, paged KV), head_dim 128 and 256 without a window; attention_prefill()
// picks this kernel on sm_90 for those and the mma.sync kernel otherwise. Tested against the fp64
// twin in tests/cuda/test_attention.cpp (every variant x ring depth x tile), timed by
// bench/bench_cuda.cu (attention_sm90.h records the measured choice of variant and tile).
//
// How (ideas from FlashAttention-3, written from the PTX ISA):
// - Warp specialisation: CTA = 2 consumer warpgroups + 1 producer warpgroup. One producer
//   thread issues TMA bulk tensor copies (Q once, then K and V tiles) into a ring of 2-3 stages
//   guarded by mbarriers (full: TMA transaction bytes; K-empty and V-empty: released by the 256
//   consumer threads, K as soon as S is computed). setmaxnreg moves registers from the producer
//   (24) to the consumers (240).
// - Each consumer warpgroup owns 64 query rows: S = Q K^T with wgmma m64nNk16 (N = the tile's
//   keys; A = Q and B = K from shared memory, K-major, 128-byte swizzle written by TMA), online
//   softmax in registers (log2 domain), then O += P V with wgmma m64n128k16 per 128 columns of O
//   (A = P from registers: the accumulator layout of S is the register-A layout of P; B = V from
//   shared memory, MN-major via the transpose bit, so V needs no transpose pass).
// - Tiles (Sm90Tile): d 128 with 128-key tiles; d 256 with 64- or 80-key tiles and O as two
//   128-column accumulators (128 registers per thread).
// - The two consumer warpgroups run unsynchronised (or take turns: ping-pong), so one's softmax
//   overlaps the other's tensor-core work. Query blocks run heaviest-first.
// Shared memory: every operand tile is stored as 64-dim panels of [rows][64 dims] (the TMA box:
// 128-byte rows), each with the 128-byte swizzle (16-byte chunk c of row r at c ^ (r % 8)), every
// panel 1024-byte aligned, as the swizzle requires.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <utility>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_sm90.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/sm90.cuh"

namespace longctx::cuda {
namespace {

using namespace sm90;

using bf16 = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;

// Tile shapes: kD (head dim) x kBlockN (keys per K/V tile). All: 128 queries per CTA (2 consumer
// warpgroups x 64 rows), 1 producer warpgroup, operands in shared memory as panels of 64 dims (one
// TMA box each, 128-byte rows, 128-byte swizzle), O accumulated in registers as kD/128 parts of
// [64 x 128] fp32.
//   d = 128: K/V tiles of 128 keys; a stage (K + V) is 64 KB, so the ring holds 2 or 3 stages.
//   d = 256: O is 128 registers per thread, so S shrinks to 64 or 80 keys (32 / 40 registers;
//            128 keys would need O 128 + S 64 + P 32 > the 240 a consumer gets). With Q's 64 KB
//            only 2 stages fit: 64 keys = 192 KB, 80 keys = 224 KB (96 would be 256 KB > 227 KB).
//            80-key tiles straddle 64-key pages, so paged KV takes 64.
template <int kD, int kBlockN_>
struct Sm90Tile {
  static_assert((kD == 128 && kBlockN_ == 128) || (kD == 256 && (kBlockN_ == 64 || kBlockN_ == 80)),
                "Hopper prefill: head_dim 128 x 128 keys or 256 x 64 / 80 keys");
  static constexpr int kBlockN = kBlockN_;   // keys per pipeline stage (wgmma N of S)
  static constexpr int kPanels = kD / 64;                 // 64-dim panels (TMA boxes) per row
  static constexpr int kParts = kD / 128;                 // 128-column parts of the O accumulator
  static constexpr int kPanelQ = 128 * 128;               // [128 queries][64 dims] bf16: 16 KB
  static constexpr int kPanelKV = kBlockN * 128;          // [kBlockN keys][64 dims] bf16
  static constexpr int kTileQ = kPanels * kPanelQ;
  static constexpr int kTileKV = kPanels * kPanelKV;
};
constexpr int kBlockM = 128;         // queries per CTA: 2 consumer warpgroups x 64 rows
constexpr int kThreads = 384;        // 2 consumer warpgroups (warps 0-7) + 1 producer warpgroup (8-11)
constexpr int kSmemQ = 0;
// Shared memory: Q tile, then the K ring, the V ring and the mbarriers. d = 128: 2 stages = 160
// KB, 3 stages = 225 KB (the most a block may opt into is 227 KB); d = 256, 2 stages: 192 / 224 KB.
template <int kD, int kBlockN, int kStages>
struct Sm90Smem {
  using T = Sm90Tile<kD, kBlockN>;
  static constexpr int kSmemK = kSmemQ + T::kTileQ;
  static constexpr int kSmemV = kSmemK + kStages * T::kTileKV;
  static constexpr int kSmemBar = kSmemV + kStages * T::kTileKV;
  // q_full, k_full[s], v_full[s], k_empty[s], v_empty[s]: K and V slots are released separately
  // (K once S is done, V once P V is), so the producer refills K while P V still reads V.
  static constexpr int kNumBars = 1 + 4 * kStages;
  static constexpr int kBytes = kSmemBar + kNumBars * 8 + 1024;  // + slack to align the base to 1024
  static_assert(kBytes <= 227 * 1024, "shared memory per block");
};
constexpr int kConsumerThreads = 256;
// Register split by setmaxnreg: 128 x 24 (producer) + 256 x 240 (consumers) = 384 x 168, what the
// CTA holds at launch (sm90::setmaxnreg_split_fits). The consumer loop needs ~200 (d = 128: O 64 +
// S 64 + P 32 + addressing; d = 256: O 128 + S 32 + P 16 + addressing); ptxas allocates per branch
// only when the producer/consumer roles are the two arms of one if/else with setmaxnreg at the
// top of each (an early-return producer in warpgroup 0 left everything at 168 registers and
// spilling). A kernel of 288 threads is not an alternative: ptxas rounds wgmma kernels to warpgroups.
constexpr int kProducerRegs = 24, kConsumerRegs = 240;
static_assert(setmaxnreg_split_fits(kThreads, 128, kProducerRegs, kConsumerRegs), "register split");

struct Sm90Args {
  bf16* o;
  float* lse;
  int64_t n_q, n_kv, q_pos0;
  int n_head, group, n_mblocks;
  float scale_log2;
  bool causal;
  const int32_t* page_table;  // optional (paged KV pools), page_size a multiple of kBlockN
  int page_size;
};

// Named barriers 1 and 2 order the two consumer warpgroups' wgmma issue (ping-pong): one
// warpgroup bar.syncs on its own id, the other bar.arrives on it (256 threads in all).
__device__ __forceinline__ void named_sync(int id) { asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void named_arrive(int id) { asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory"); }

template <int kD, int kBlockN, bool kOverlap, bool kPingPong, int kStages>
__global__ void __launch_bounds__(kThreads, 1)
    attn_prefill_sm90_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                             const __grid_constant__ CUtensorMap tm_v, const Sm90Args a) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (mma::smem_u32(smem_raw) + 1023u) & ~1023u;
  using L = Sm90Smem<kD, kBlockN, kStages>;
  using T = Sm90Tile<kD, kBlockN>;
  constexpr int kPanelQ = T::kPanelQ, kPanelKV = T::kPanelKV, kTileKV = T::kTileKV;
  constexpr int kSN = kBlockN / 2;  // S accumulator registers per thread ([64 x kBlockN] fp32)
  const uint32_t sQ = base + kSmemQ, sK = base + L::kSmemK, sV = base + L::kSmemV;
  const uint32_t bar_q = base + L::kSmemBar;
  auto bar_k = [&](int s) { return base + L::kSmemBar + 8u * (1 + s); };
  auto bar_v = [&](int s) { return base + L::kSmemBar + 8u * (1 + kStages + s); };
  auto bar_ek = [&](int s) { return base + L::kSmemBar + 8u * (1 + 2 * kStages + s); };
  auto bar_ev = [&](int s) { return base + L::kSmemBar + 8u * (1 + 3 * kStages + s); };

  const int h = blockIdx.x;
  const int64_t m0 = int64_t(a.n_mblocks - 1 - int(blockIdx.y)) * kBlockM;  // heaviest first
  const int kvh = h / a.group;
  const int tid = threadIdx.x;
  const int wg = tid / 128;

  const int64_t m_end = min(m0 + kBlockM, a.n_q);
  const int64_t n_keys = a.causal ? min(a.n_kv, a.q_pos0 + m_end) : a.n_kv;
  const int n_tiles = int((n_keys + kBlockN - 1) / kBlockN);

  if (tid == 0) {
    mbar_init(bar_q, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(bar_k(s), 1);
      mbar_init(bar_v(s), 1);
      mbar_init(bar_ek(s), kConsumerThreads);
      mbar_init(bar_ev(s), kConsumerThreads);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 2) {
    // ---------------- producer ----------------
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if (tid == kConsumerThreads) {
      mbar_expect_tx(bar_q, T::kTileQ);
#pragma unroll
      for (int pn = 0; pn < T::kPanels; ++pn) tma_load_3d(sQ + pn * kPanelQ, &tm_q, bar_q, 64 * pn, h, int(m0));
      for (int t = 0; t < n_tiles; ++t) {
        const int s = t % kStages;
        const uint32_t empty_par = ((t / kStages) & 1) ^ 1;
        const int n0 = t * kBlockN;
        const int row0 = a.page_table ? a.page_table[n0 / a.page_size] * a.page_size + n0 % a.page_size : n0;
        if (t >= kStages) mbar_wait(bar_ek(s), empty_par);
        mbar_expect_tx(bar_k(s), kTileKV);
#pragma unroll
        for (int pn = 0; pn < T::kPanels; ++pn)
          tma_load_3d(sK + s * kTileKV + pn * kPanelKV, &tm_k, bar_k(s), 64 * pn, kvh, row0);
        if (t >= kStages) mbar_wait(bar_ev(s), empty_par);
        mbar_expect_tx(bar_v(s), kTileKV);
#pragma unroll
        for (int pn = 0; pn < T::kPanels; ++pn)
          tma_load_3d(sV + s * kTileKV + pn * kPanelKV, &tm_v, bar_v(s), 64 * pn, kvh, row0);
      }
    }
  } else {
  // ---------------- consumers ----------------
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
  const int cw = wg;                     // consumer warpgroup: query rows 64*cw .. 64*cw+63
  const int ltid = tid - 128 * wg;       // thread within the warpgroup
  const int warp = ltid / 32, lane = ltid % 32;
  const int g = lane / 4, tq = lane % 4;
  const int64_t row0 = m0 + 64 * cw + 16 * warp + g;  // rows row0 and row0 + 8
  const int64_t vis0 = a.q_pos0 + row0;
  const int64_t cw_first_row = m0 + 64 * cw;

  float o[T::kParts][64];  // O columns 128*part .. 128*part + 127
#pragma unroll
  for (int part = 0; part < T::kParts; ++part)
#pragma unroll
    for (int i = 0; i < 64; ++i) o[part][i] = 0.f;
  auto fence_o = [&] {
#pragma unroll
    for (int part = 0; part < T::kParts; ++part) fence_regs(o[part]);
  };
  // Running row max of the raw scores (rows g, g+8) and this thread's partial row sums.
  float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.f, 0.f};

  const uint32_t q_rows = sQ + uint32_t(cw) * 64u * 128u;  // this warpgroup's 64 rows in each panel
  auto issue_s = [&](float (&sc)[kSN], uint32_t k_tile) {     // S = Q K^T, async
    fence_regs(sc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {  // 16 dims = 32 bytes of a 128-byte panel row
      const uint32_t off_q = (kk / 4) * kPanelQ + (kk % 4) * 32, off_k = (kk / 4) * kPanelKV + (kk % 4) * 32;
      wgmma_ss(sc, desc_sw128(q_rows + off_q, 16), desc_sw128(k_tile + off_k, 16), kk > 0);
    }
    wgmma_commit();
  };
  // O += P V, async. The caller fences o and p first, before any wgmma of the stage is in
  // flight: register moves between in-flight wgmmas make ptxas serialise them (C7513).
  // Part i of O reads V's panels 2i and 2i+1 (LBO: the stride between the two).
  auto issue_pv = [&](uint32_t (&p)[kBlockN / 16][4], uint32_t v_tile) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)  // 16 keys = 16 rows of 128 B = 2048 B per step
#pragma unroll
      for (int part = 0; part < T::kParts; ++part)
        wgmma_rs_tb(o[part], p[kk], desc_sw128(v_tile + 2 * part * kPanelKV + kk * 2048, kPanelKV));
    wgmma_commit();
  };
  // Online softmax of tile t, in place: mask, new row max, S <- exp2(S*scale*log2e - m*scale*log2e),
  // l updated; corr = the factor O must be multiplied by.
  auto softmax = [&](float (&sc)[kSN], int t, float (&corr)[2]) {
    const int64_t n0 = int64_t(t) * kBlockN;
    const bool need_mask = (n0 + kBlockN > a.n_kv) || (a.causal && n0 + kBlockN - 1 > a.q_pos0 + cw_first_row);
    if (need_mask) {
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t key = n0 + 8 * j + 2 * tq + (e & 1);
          if (key >= a.n_kv || (a.causal && key > vis0 + (e >> 1) * 8)) sc[4 * j + e] = -INFINITY;
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) mx = fmaxf(mx, fmaxf(sc[4 * j + 2 * r], sc[4 * j + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_r[r], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // fully masked so far: avoid inf - inf
      corr[r] = fast_exp2((m_r[r] - m_use) * a.scale_log2);
      m_r[r] = m_new;
      const float ms = m_use * a.scale_log2;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
        sc[4 * j + 2 * r] = fast_exp2(fmaf(sc[4 * j + 2 * r], a.scale_log2, -ms));
        sc[4 * j + 2 * r + 1] = fast_exp2(fmaf(sc[4 * j + 2 * r + 1], a.scale_log2, -ms));
        sum += sc[4 * j + 2 * r] + sc[4 * j + 2 * r + 1];
      }
      l_r[r] = l_r[r] * corr[r] + sum;
    }
  };
  auto to_p = [&](const float (&sc)[kSN], uint32_t (&p)[kBlockN / 16][4]) {  // P as bf16 register-A fragments
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      p[kk][0] = mma::pack_bf16(sc[8 * kk + 0], sc[8 * kk + 1]);
      p[kk][1] = mma::pack_bf16(sc[8 * kk + 2], sc[8 * kk + 3]);
      p[kk][2] = mma::pack_bf16(sc[8 * kk + 4], sc[8 * kk + 5]);
      p[kk][3] = mma::pack_bf16(sc[8 * kk + 6], sc[8 * kk + 7]);
    }
  };
  auto rescale_o = [&](const float (&corr)[2]) {
#pragma unroll
    for (int part = 0; part < T::kParts; ++part)
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        o[part][4 * j + 0] *= corr[0];
        o[part][4 * j + 1] *= corr[0];
        o[part][4 * j + 2] *= corr[1];
        o[part][4 * j + 3] *= corr[1];
      }
  };

  // Paged KV: pool rows past n_kv in the last page are not ours and may hold anything (NaN
  // included); P is 0 there but 0 * NaN is NaN, so this warpgroup zeroes those V rows of the
  // tile before its P V (contiguous KV needs nothing: TMA zero-fills past the tensor's end).
  // Both warpgroups write the same zeros; each orders its own writes before its wgmma reads.
  auto fix_v_tail = [&](int t, uint32_t v_tile) {
    const int64_t n0 = int64_t(t) * kBlockN;
    if (!a.page_table || n0 + kBlockN <= a.n_kv) return;
    const int valid = int(a.n_kv - n0);
    for (int i = ltid; i < T::kPanels * (kBlockN - valid) * 8; i += 128) {  // 16-byte chunks, every panel
      const int panel = i / ((kBlockN - valid) * 8), rem = i % ((kBlockN - valid) * 8);
      const uint32_t addr = v_tile + panel * kPanelKV + (valid + rem / 8) * 128 + (rem % 8) * 16;
      asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0u) : "memory");
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("bar.sync %0, 128;\n" ::"r"(3 + cw) : "memory");
  };

  mbar_wait(bar_q, 0);
  if constexpr (kOverlap) {
    // FA3's intra-warpgroup overlap: S(t) = Q K(t)^T and O += P(t-1) V(t-1) are in flight
    // together; the softmax of S(t) runs while P(t-1) V(t-1) still computes.
    // P is rebuilt from the exponentiated S only after the previous P V has completed, so one P
    // buffer suffices (o 64 + S 64 + P 32 registers live); register moves of P next to in-flight
    // wgmmas would make ptxas serialise them (C7513).
    uint32_t p[kBlockN / 16][4];
    float corr[2];
    {
      float sc[kSN];
      mbar_wait(bar_k(0), 0);
      issue_s(sc, sK);
      wgmma_wait<0>();
      mbar_arrive(bar_ek(0));  // K(0) no longer read by this thread
      fence_regs(sc);
      softmax(sc, 0, corr);  // O is still zero: no rescale
      to_p(sc, p);
    }
    // Ping-pong (FA3): the warpgroups take turns issuing their GEMMs, so one's softmax runs
    // while the other's GEMMs hold the tensor cores. Warpgroup 0 goes first; each warpgroup
    // syncs on its own barrier n_tiles-1 times and the other arrives on it as often.
    const int my_bar = 1 + cw, other_bar = 2 - cw;
    if (kPingPong && cw == 1 && n_tiles > 1) named_arrive(1);
    for (int t = 1; t < n_tiles; ++t) {
      const int s = t % kStages, sp = (t - 1) % kStages;
      float sc[kSN];
      fence_o();
      fence_p(p);
      mbar_wait(bar_k(s), (t / kStages) & 1);
      mbar_wait(bar_v(sp), ((t - 1) / kStages) & 1);
      fix_v_tail(t - 1, sV + sp * kTileKV);
      if (kPingPong) named_sync(my_bar);
      issue_s(sc, sK + s * kTileKV);
      issue_pv(p, sV + sp * kTileKV);
      if (kPingPong && (cw == 0 || t + 1 < n_tiles)) named_arrive(other_bar);
      wgmma_wait<1>();  // S(t) done; P(t-1) V(t-1) may still run
      mbar_arrive(bar_ek(s));
      fence_regs(sc);
      softmax(sc, t, corr);
      wgmma_wait<0>();
      fence_o();
      fence_p(p);
      mbar_arrive(bar_ev(sp));  // V(t-1) no longer read by this thread
      rescale_o(corr);
      to_p(sc, p);
    }
    const int sl = (n_tiles - 1) % kStages;
    fence_o();
    fence_p(p);
    mbar_wait(bar_v(sl), ((n_tiles - 1) / kStages) & 1);
    fix_v_tail(n_tiles - 1, sV + sl * kTileKV);
    issue_pv(p, sV + sl * kTileKV);
    wgmma_wait<0>();
    fence_o();
    fence_p(p);
    mbar_arrive(bar_ev(sl));
  } else {
    for (int t = 0; t < n_tiles; ++t) {
      const int s = t % kStages;
      const uint32_t par = (t / kStages) & 1;
      float sc[kSN];
      uint32_t p[kBlockN / 16][4];
      float corr[2];
      mbar_wait(bar_k(s), par);
      issue_s(sc, sK + s * kTileKV);
      wgmma_wait<0>();
      mbar_arrive(bar_ek(s));  // this thread no longer reads K of stage s
      fence_regs(sc);
      softmax(sc, t, corr);
      to_p(sc, p);
      rescale_o(corr);
      fence_o();
      fence_p(p);
      mbar_wait(bar_v(s), par);
      fix_v_tail(t, sV + s * kTileKV);
      issue_pv(p, sV + s * kTileKV);
      wgmma_wait<0>();
      fence_o();
      fence_p(p);
      mbar_arrive(bar_ev(s));  // nor V
    }
  }

  // Epilogue: normalise and store straight from the accumulator layout (4-byte stores).
  store_o_lse_parts<T::kParts>(o, l_r, m_r, row0, tq, h, a.n_q, a.n_head, a.scale_log2, a.o, a.lse);
  }  // consumers
}

}  // namespace

bool attention_prefill_sm90_supported(const PrefillParams& p) {
  static const bool hopper = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    return major == 9 && minor == 0;
  }();
  if (p.head_dim != 128 && p.head_dim != 256) return false;
  const int page_keys = p.head_dim == 128 ? 128 : 64;  // the tile of paged KV
  return hopper && p.window == 0 && p.n_kv > 0 && p.n_q > 0 && p.n_q <= 0x7fffffff && p.n_kv <= 0x7fffffff &&
         (!p.page_table || (p.page_size > 0 && p.page_size % page_keys == 0 && p.kv_pool_rows > 0 &&
                            p.kv_pool_rows <= 0x7fffffff));
}

int sm90_max_stages(int head_dim) { return head_dim == 256 ? 2 : 3; }

using Sm90Kernel = void (*)(const CUtensorMap, const CUtensorMap, const CUtensorMap, const Sm90Args);

template <int kD, int kBlockN, bool kOverlap, bool kPingPong, int kStages>
std::pair<Sm90Kernel, int> sm90_entry() {
  Sm90Kernel k = attn_prefill_sm90_kernel<kD, kBlockN, kOverlap, kPingPong, kStages>;
  const int smem = Sm90Smem<kD, kBlockN, kStages>::kBytes;
  static const cudaError_t err =
      cudaFuncSetAttribute(attn_prefill_sm90_kernel<kD, kBlockN, kOverlap, kPingPong, kStages>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  LC_CUDA_CHECK(err, "attn_prefill_sm90_kernel<d=%d,n=%d,%d,%d,%d>: raising dynamic shared memory to %d bytes", kD,
                kBlockN, int(kOverlap), int(kPingPong), kStages, smem);
  return {k, smem};
}
template <int kD, int kBlockN, int kStages>
std::pair<Sm90Kernel, int> sm90_entry(int mode) {
  return mode == 0   ? sm90_entry<kD, kBlockN, false, false, kStages>()
         : mode == 1 ? sm90_entry<kD, kBlockN, true, false, kStages>()
                     : sm90_entry<kD, kBlockN, true, true, kStages>();
}

void attention_prefill_sm90(const PrefillParams& p, Stream s, Sm90Variant variant, int stages, int block_n) {
  LC_REQUIRE(attention_prefill_sm90_supported(p), "attention_prefill_sm90: unsupported shape (head_dim %d)",
             p.head_dim);
  LC_REQUIRE(stages >= 2 && stages <= sm90_max_stages(p.head_dim),
             "attention_prefill_sm90: stages %d (2..%d at head_dim %d)", stages, sm90_max_stages(p.head_dim),
             p.head_dim);
  const int mode = int(variant);
  LC_REQUIRE(mode >= 0 && mode < 3, "attention_prefill_sm90: bad variant %d", mode);
  const int d = p.head_dim;
  if (block_n == 0) block_n = sm90_default_block_n(d, p.page_table != nullptr);
  LC_REQUIRE(d == 128 ? block_n == 128 : (block_n == 64 || (block_n == 80 && !p.page_table)),
             "attention_prefill_sm90: %d-key tiles at head_dim %d%s (128 at d 128; 64, or 80 without paging, at d 256)",
             block_n, d, p.page_table ? " with paged KV" : "");
  const std::pair<Sm90Kernel, int> e = d == 256 ? (block_n == 80 ? sm90_entry<256, 80, 2>(mode) : sm90_entry<256, 64, 2>(mode))
                                       : stages == 2 ? sm90_entry<128, 128, 2>(mode)
                                                     : sm90_entry<128, 128, 3>(mode);
  const CUtensorMap tq = make_map(p.q, p.n_q, p.n_head, kBlockM, "attention_prefill_sm90: q", d);
  const int64_t kv_rows = p.page_table ? p.kv_pool_rows : p.n_kv;
  const CUtensorMap tk = make_map(p.k, kv_rows, p.n_kv_head, block_n, "attention_prefill_sm90: k", d);
  const CUtensorMap tv = make_map(p.v, kv_rows, p.n_kv_head, block_n, "attention_prefill_sm90: v", d);
  Sm90Args a{};
  a.o = static_cast<bf16*>(p.o);
  a.lse = p.lse;
  a.n_q = p.n_q;
  a.n_kv = p.n_kv;
  a.q_pos0 = p.q_pos0;
  a.n_head = p.n_head;
  a.group = p.n_head / p.n_kv_head;
  a.n_mblocks = int((p.n_q + kBlockM - 1) / kBlockM);
  const float scale = p.scale > 0.f ? p.scale : 1.f / std::sqrt(float(d));
  a.scale_log2 = scale * kLog2e;
  a.causal = p.causal;
  a.page_table = p.page_table;
  a.page_size = p.page_size;
  const dim3 grid(p.n_head, a.n_mblocks);
  e.first<<<grid, kThreads, e.second, static_cast<cudaStream_t>(s)>>>(tq, tk, tv, a);
  LC_LAUNCH_CHECK("attn_prefill_sm90_kernel<d=%d,n=%d,variant=%d,stages=%d> n_q=%lld n_kv=%lld q_pos0=%lld heads=%d/%d grid=(%d,%d)",
                  d, block_n, mode, stages, (long long)p.n_q, (long long)p.n_kv, (long long)p.q_pos0, p.n_head, p.n_kv_head,
                  grid.x, grid.y);
}

}  // namespace longctx::cuda

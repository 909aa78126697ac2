// attention_prefill.cu (cuda): dense (causal) prefill attention, FlashAttention-2 style.
//
// What: O = softmax(scale * Q K^T + causal mask) V and the row LSE, bf16 in/out, fp32 math,
// GQA, head_dim 16/32/64/128/256, queries at positions q_pos0.. (chunked prefill over a KV
// prefix), optionally a sliding window (a CTA streams only the key tiles its rows' windows touch).
// Layout and semantics: attention.h. Tested by tests/cuda/test_attention.cpp (fp64 CPU twin),
// timed by bench/bench_cuda.cu.
//
// How: one CTA = (query head, 128-query block), 8 warps x 16 query rows. Q fragments stay in
// registers; K/V tiles of 64 keys stream through shared memory with cp.async double buffering
// (tile t+1 loads while tile t computes). S = Q K^T and O += P V use mma.sync m16n8k16 (bf16 in,
// fp32 accumulate) fed by ldmatrix from a swizzled layout (mma.cuh); P never leaves registers
// (the C fragment of S is the A fragment of P V). Online softmax in the log2 domain. Blocks run
// heaviest-first (causal work grows with the query block index) to shorten the tail.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_sm90.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/fa2_tile.cuh"
#include "kernels/cuda/mma.cuh"

namespace longctx::cuda {
namespace {

using bf16 = __nv_bfloat16;
using namespace mma;

constexpr float kLog2e = 1.4426950408889634f;

template <int D>
struct PrefillTile {
  static constexpr int kWarps = 8;                 // 8 x 16 rows: K/V tile reused by 128 queries
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockM = 16 * kWarps;      // queries per CTA (one m16 tile per warp)
  static constexpr int kBlockN = 64;               // keys per pipeline stage
  static constexpr int kStages = 2;                // double buffering of K and V
  static constexpr int kChunks = D / 8;            // 16-byte chunks per row
  static constexpr int kSmemQ = kBlockM * D * 2;   // bytes
  static constexpr int kSmemKV = kBlockN * D * 2;  // bytes of one K (or V) tile
  static constexpr int kSmem = kSmemQ + 2 * kStages * kSmemKV;
};

struct PrefillArgs {
  const bf16* q;
  const bf16* k;
  const bf16* v;
  bf16* o;
  float* lse;
  int64_t n_q, n_kv, q_pos0;
  int n_head, n_kv_head, group, n_mblocks;
  float scale_log2;  // scale * log2(e)
  bool causal;
  int64_t window;    // > 0: row at position p sees keys (p - window, p]
  const int32_t* page_table;  // optional (paged KV pools), page_size a multiple of kBlockN
  int page_size;
};

template <int D>
__global__ void __launch_bounds__(PrefillTile<D>::kThreads, 1) attn_prefill_kernel(const PrefillArgs a) {
  using T = PrefillTile<D>;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sQ = smem_u32(smem);
  const uint32_t sK = sQ + T::kSmemQ;                 // stage s at sK + s * kSmemKV
  const uint32_t sV = sK + T::kStages * T::kSmemKV;

  const int h = blockIdx.x;
  const int64_t m0 = int64_t(a.n_mblocks - 1 - int(blockIdx.y)) * T::kBlockM;  // heaviest first
  const int kvh = h / a.group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t ldq = int64_t(a.n_head) * D, ldk = int64_t(a.n_kv_head) * D;
  const bf16* qg = a.q + m0 * ldq + int64_t(h) * D;
  const bf16* kg = a.k + int64_t(kvh) * D;
  const bf16* vg = a.v + int64_t(kvh) * D;

  const int64_t m_end = min(m0 + T::kBlockM, a.n_q);
  const int64_t n_keys = a.causal ? min(a.n_kv, a.q_pos0 + m_end) : a.n_kv;
  // Sliding window: the block's first row (position q_pos0 + m0) sees the lowest key.
  const int64_t key_lo = a.window > 0 ? max(int64_t(0), a.q_pos0 + m0 - a.window + 1) : 0;
  const int t_lo = int(key_lo / T::kBlockN);  // first tile streamed
  const int n_tiles = max(0, int((n_keys + T::kBlockN - 1) / T::kBlockN) - t_lo);

  // Q tile (rows past n_q zero-filled), then K/V tile 0: two commit groups.
  for (int i = tid; i < T::kBlockM * T::kChunks; i += T::kThreads) {
    const int r = i / T::kChunks, c = i % T::kChunks;
    const bool ok = m0 + r < a.n_q;
    cp_async16(sQ + swz<D>(r, c), ok ? qg + r * ldq + c * 8 : a.q, ok ? 16 : 0);
  }
  cp_async_commit();
  auto load_kv = [&](int i, int stage) {  // i: the i-th streamed tile
    const int64_t n0 = int64_t(t_lo + i) * T::kBlockN;
    int64_t row0 = n0;  // pool row of key n0 (a tile never straddles a page)
    if (a.page_table) row0 = int64_t(a.page_table[n0 / a.page_size]) * a.page_size + n0 % a.page_size;
    for (int i = tid; i < T::kBlockN * T::kChunks; i += T::kThreads) {
      const int r = i / T::kChunks, c = i % T::kChunks;
      const bool ok = n0 + r < n_keys;  // zero-fill: masked keys then hold finite values
      const int64_t off = (row0 + r) * ldk + c * 8;
      cp_async16(sK + stage * T::kSmemKV + swz<D>(r, c), ok ? kg + off : a.k, ok ? 16 : 0);
      cp_async16(sV + stage * T::kSmemKV + swz<D>(r, c), ok ? vg + off : a.v, ok ? 16 : 0);
    }
  };
  if (n_tiles > 0) load_kv(0, 0);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();

  // head_dim 256 reads Q from shared memory per tile (fa2::qk_tile_smem_q: registers).
  constexpr bool kQInSmem = D >= 256;
  uint32_t qf[kQInSmem ? 1 : D / 16][4];
  if constexpr (!kQInSmem) fa2::load_q_frags<D>(qf, sQ, warp, lane);

  float oacc[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.f;
  float m_r[2] = {-INFINITY, -INFINITY};  // running max of the scaled log2 scores, rows g, g+8
  float l_r[2] = {0.f, 0.f};              // this thread's partial row sums (quad-reduced at the end)
  const int64_t row0 = m0 + warp * 16 + (lane >> 2);  // query index of rows g (and g+8)
  const int64_t vis0 = a.q_pos0 + row0;               // last visible key of row g

  for (int t = 0; t < n_tiles; ++t) {
    const int st = t & 1;
    if (t + 1 < n_tiles) load_kv(t + 1, st ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    const uint32_t kbase = sK + st * T::kSmemKV, vbase = sV + st * T::kSmemKV;
    float s[8][4];
    if constexpr (kQInSmem)
      fa2::qk_tile_smem_q<D>(s, sQ, warp, kbase, lane);
    else
      fa2::qk_tile<D>(s, qf, kbase, lane);

    const int64_t n0 = int64_t(t_lo + t) * T::kBlockN;
    const bool need_mask = (n0 + T::kBlockN > a.n_kv) || (a.causal && n0 + T::kBlockN - 1 > a.q_pos0 + m0) ||
                           (a.window > 0 && n0 < a.q_pos0 + m_end - a.window);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * a.scale_log2;
        if (need_mask) {
          const int64_t key = n0 + nt * 8 + 2 * (lane & 3) + (e & 1);
          const int64_t vis = vis0 + (e >> 1) * 8;
          if (key >= a.n_kv || (a.causal && key > vis) || (a.window > 0 && key <= vis - a.window)) x = -INFINITY;
        }
        s[nt][e] = x;
      }
    }
    fa2::softmax_update<D>(s, m_r, l_r, oacc);
    fa2::pv_tile<D>(s, vbase, oacc, lane);
    __syncthreads();  // stage st is overwritten by the load issued in iteration t+1
  }
  cp_async_wait<0>();

  // Epilogue: normalise, stage the warp's 16 rows in its own part of the Q buffer, 16B stores.
  fa2::stage_output<D>(oacc, l_r, sQ, warp, lane);
  fa2::write_output<D>(smem, a.o, a.lse, h, ldq, m0 + warp * 16, row0, a.n_q, warp, lane, m_r, l_r);
}

template <int D>
void launch_prefill(const PrefillArgs& a, cudaStream_t stream) {
  using T = PrefillTile<D>;
  static const cudaError_t attr_err =
      cudaFuncSetAttribute(attn_prefill_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmem);
  LC_CUDA_CHECK(attr_err, "attn_prefill_kernel<d=%d>: raising dynamic shared memory to %d bytes", D, T::kSmem);
  const dim3 grid(a.n_head, a.n_mblocks);
  attn_prefill_kernel<D><<<grid, T::kThreads, T::kSmem, stream>>>(a);
  LC_LAUNCH_CHECK("attn_prefill_kernel<d=%d> n_q=%lld n_kv=%lld q_pos0=%lld heads=%d/%d grid=(%d,%d)", D,
                  (long long)a.n_q, (long long)a.n_kv, (long long)a.q_pos0, a.n_head, a.n_kv_head, grid.x, grid.y);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

void attention_prefill_fa2(const PrefillParams& p, Stream s) {
  LC_REQUIRE(p.q && p.k && p.v && p.o, "attention_prefill: null q/k/v/o pointer");
  LC_REQUIRE(aligned16(p.q) && aligned16(p.k) && aligned16(p.v) && aligned16(p.o),
             "attention_prefill: q/k/v/o must be 16-byte aligned");
  LC_REQUIRE(p.head_dim == 16 || p.head_dim == 32 || p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256,
             "attention_prefill: head_dim %d unsupported (16, 32, 64, 128 or 256)", p.head_dim);
  LC_REQUIRE(p.window >= 0 && (p.window == 0 || p.causal), "attention_prefill: window %lld needs causal attention",
             (long long)p.window);
  LC_REQUIRE(p.n_head > 0 && p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0,
             "attention_prefill: n_head %d must be a positive multiple of n_kv_head %d", p.n_head, p.n_kv_head);
  LC_REQUIRE(p.n_q >= 0 && p.n_kv >= 0 && p.q_pos0 >= 0, "attention_prefill: negative size");
  LC_REQUIRE(!p.causal || p.q_pos0 + p.n_q <= p.n_kv,
             "attention_prefill: causal queries reach position %lld but only %lld keys are given",
             (long long)(p.q_pos0 + p.n_q - 1), (long long)p.n_kv);
  LC_REQUIRE(!p.page_table || (p.page_size > 0 && p.page_size % PrefillTile<128>::kBlockN == 0),
             "attention_prefill: paged KV needs page_size a multiple of %d (got %d)", PrefillTile<128>::kBlockN,
             p.page_size);
  if (p.n_q == 0) return;
  constexpr int kBlockM = PrefillTile<128>::kBlockM;
  const int64_t n_mblocks = (p.n_q + kBlockM - 1) / kBlockM;
  LC_REQUIRE(n_mblocks <= 65535 && p.n_head <= 65535, "attention_prefill: n_q %lld too large for one launch",
             (long long)p.n_q);
  PrefillArgs a{};
  a.q = static_cast<const bf16*>(p.q);
  a.k = static_cast<const bf16*>(p.k);
  a.v = static_cast<const bf16*>(p.v);
  a.o = static_cast<bf16*>(p.o);
  a.lse = p.lse;
  a.n_q = p.n_q;
  a.n_kv = p.n_kv;
  a.q_pos0 = p.q_pos0;
  a.n_head = p.n_head;
  a.n_kv_head = p.n_kv_head;
  a.group = p.n_head / p.n_kv_head;
  a.n_mblocks = int(n_mblocks);
  const float scale = p.scale > 0.f ? p.scale : 1.f / std::sqrt(float(p.head_dim));
  a.scale_log2 = scale * kLog2e;
  a.causal = p.causal;
  a.window = p.window;
  a.page_table = p.page_table;
  a.page_size = p.page_size;
  auto stream = static_cast<cudaStream_t>(s);
  switch (p.head_dim) {
    case 256: return launch_prefill<256>(a, stream);
    case 128: return launch_prefill<128>(a, stream);
    case 64: return launch_prefill<64>(a, stream);
    case 32: return launch_prefill<32>(a, stream);
    default: return launch_prefill<16>(a, stream);
  }
}

void attention_prefill(const PrefillParams& p, Stream s) {
  switch (p.impl) {
    case PrefillImpl::fa2_mma_sync:
      return attention_prefill_fa2(p, s);
    case PrefillImpl::sm90_wgmma:
      return attention_prefill_sm90(p, s);
    case PrefillImpl::automatic:
      break;
  }
  if (attention_prefill_sm90_supported(p)) {
    // Same argument checks as the FA2 path (the Hopper kernel assumes them).
    LC_REQUIRE(p.q && p.k && p.v && p.o && aligned16(p.q) && aligned16(p.k) && aligned16(p.v) && aligned16(p.o),
               "attention_prefill: q/k/v/o must be non-null and 16-byte aligned");
    LC_REQUIRE(p.n_head > 0 && p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0 && p.n_head <= 65535,
               "attention_prefill: n_head %d must be a positive multiple of n_kv_head %d", p.n_head, p.n_kv_head);
    LC_REQUIRE(p.q_pos0 >= 0 && (!p.causal || p.q_pos0 + p.n_q <= p.n_kv),
               "attention_prefill: causal queries reach position %lld but only %lld keys are given",
               (long long)(p.q_pos0 + p.n_q - 1), (long long)p.n_kv);
    return attention_prefill_sm90(p, s);
  }
  attention_prefill_fa2(p, s);
}

}  // namespace longctx::cuda

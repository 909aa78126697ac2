// sparse_attention_generic.cu (cuda): sparse prefill attention for head_dim 64/128/256 on sm_80+;
// see sparse_attention_generic.h (semantics: sparse_attention.h).
//
// Two kernels:
// - plan (sparse_plan.h, shared with the Hopper kernel): each block's ranges and columns made
//   canonical in the workspace (disjoint merged ranges within the causal frontier; columns
//   unique and outside them), with counts per row.
// - attention, FlashAttention-2 style like attention_prefill.cu: CTA = (query head h, 64-row
//   block b), 4 warps x 16 rows, Q fragments in registers (head_dim 256: read from shared memory
//   per tile, as in attention_prefill.cu: 64 more registers next to O's 128 would spill); the CTA
//   walks its canonical lists as a sequence of 64-key tiles (each merged range cut into tiles from its own start, no
//   alignment; then the columns, 64 per tile), K/V rows of each tile cp.async'ed (double
//   buffered) into the swizzled layout of mma.cuh, with the tile's key positions (-1 = empty
//   slot) in shared memory for the masks. S = Q K^T and O += P V by mma.sync m16n8k16, online
//   softmax in the log2 domain. Tiles whose keys are all real and visible to every row of the
//   block skip the mask. CTAs run latest block first (causal work grows with b), all heads of
//   a block next to each other (GQA heads share K/V rows in L2).
// fp8 K/V tiles (p.kv_dtype fp8_e4m3, the fp8 cache's codes): each tile's e4m3 rows are
// cp.async'ed (double buffered, 16-byte chunks of 16 codes) into a row-major byte tile, then
// widened to bf16 (exact: every e4m3 value is a bf16) into one swizzled bf16 K/V tile that the
// same mma code reads. k_scale is folded into the softmax scale (scores = code_q . code_k *
// k_scale * scale), v_scale into O at the end: attention over the dequantized K/V. Shared memory
// is the bf16 kernel's: 2 stages x 64 x D bytes each for K and V plus one bf16 K and V tile.
#include "kernels/cuda/sparse_attention_generic.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/fa2_tile.cuh"
#include "kernels/cuda/fp8_vec.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/sparse_plan.h"

namespace longctx::cuda {
namespace {

using bf16 = __nv_bfloat16;
using namespace mma;

constexpr int kBQ = kSparseQBlock;  // 64 query rows per CTA
constexpr int kBK = 64;             // keys per tile

template <int D, bool kFp8>
struct GTile {
  static constexpr int kWarps = 4;  // 4 x 16 rows = one query block
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kStages = 2;
  // CTAs per SM (caps registers at 128 / 255 / 255); d = 256: the 160 KB of shared memory allow one
  static constexpr int kMinBlocks = D == 64 ? 4 : D == 128 ? 2 : 1;
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static constexpr int kSmemQ = kBQ * D * 2;
  static constexpr int kSmemKV = kBK * D * 2;  // one bf16 K (or V) tile
  static constexpr int kSmemRaw = kBK * D;     // one e4m3 K (or V) tile (fp8 path)
  static constexpr int kChunks8 = D / 16;      // 16-byte chunks per e4m3 row
  // bf16: the K/V tiles of each stage. fp8: each stage's e4m3 K/V, then one widened bf16 K/V.
  static constexpr int kSmemPipe = kFp8 ? 2 * kStages * kSmemRaw + 2 * kSmemKV : 2 * kStages * kSmemKV;
  static constexpr int kSmemKeys = kStages * kBK * 4;
  static constexpr int kSmem = kSmemQ + kSmemPipe + kSmemKeys + kStages * 4;
};

// Arguments of the attention kernel: the shared ones plus V's dequantization scale (fp8 only;
// K's scale is inside scale_log2).
struct GenericArgs : SparseKernelArgs {
  float v_scale;
};

// 16 e4m3 codes (one uint4) -> 16 bf16 (two uint4), exact (e4m3 -> fp16 -> fp32 -> bf16 loses
// nothing: 3 mantissa bits, exponents 2^-9 .. 2^8).
__device__ __forceinline__ void widen16(const uint4 raw, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t out[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint2 f4 = fp8vec::e4m3x4_to_f16x4(w[i]);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(k == 0 ? &f4.x : &f4.y));
      out[2 * i + k] = pack_bf16(f.x, f.y);
    }
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

// ---- attention kernel --------------------------------------------------------------------------
using MainArgs = GenericArgs;

// The CTA's walk over its tiles: merged ranges first (each cut into 64-key tiles from its own
// start), then the columns 64 at a time. Every thread holds the same cursor.
struct TileCursor {
  const int32_t* R;  // canonical ranges (start, end)
  int nr, ri;
  int32_t pos, end;  // next key of range ri, its end
  int nc, cb;        // column count, next column index
  __device__ bool next(bool& is_col, int32_t& first, int& cnt) {
    if (ri < nr) {
      is_col = false;
      first = pos;
      cnt = min(kBK, end - pos);
      pos += kBK;
      if (pos >= end && ++ri < nr) {
        pos = __ldg(R + 2 * ri);
        end = __ldg(R + 2 * ri + 1);
      }
      return true;
    }
    if (cb < nc) {
      is_col = true;
      first = cb;  // index into the column list
      cnt = min(kBK, nc - cb);
      cb += kBK;
      return true;
    }
    return false;
  }
};

// kWindow: the row-level window (SparseAttnParams::window): row i also masks keys <=
// q_pos0 + i - window, every tile masked (the plan already dropped keys below the block's first
// row's bound). A separate instantiation, so calls without a window run the code they had.
template <int D, bool kFp8, bool kWindow>
__global__ void __launch_bounds__(GTile<D, kFp8>::kThreads, GTile<D, kFp8>::kMinBlocks)
    sparse_generic_kernel(const MainArgs a) {
  using T = GTile<D, kFp8>;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sQ = smem_u32(smem);
  // bf16: stage s of K at sK + s * kSmemKV (V likewise). fp8: stage s of the e4m3 K at
  // sKr + s * kSmemRaw (V likewise), widened into the single bf16 tiles sK / sV.
  const uint32_t sKr = sQ + T::kSmemQ;
  const uint32_t sVr = sKr + T::kStages * T::kSmemRaw;
  const uint32_t sK = kFp8 ? sVr + T::kStages * T::kSmemRaw : sQ + T::kSmemQ;
  const uint32_t sV = kFp8 ? sK + T::kSmemKV : sK + T::kStages * T::kSmemKV;
  int32_t* s_keys = reinterpret_cast<int32_t*>(smem + T::kSmemQ + T::kSmemPipe);  // [stage][64]
  int32_t* s_cnt = s_keys + T::kStages * kBK;                                                     // [stage]

  const int64_t cta = blockIdx.x;
  const int h = int(cta % a.n_head);
  const int64_t b = a.n_qblk - 1 - cta / a.n_head;  // latest block first
  const int64_t m0 = b * kBQ;
  const int kvh = h / a.group;
  const int64_t row = int64_t(h / a.heads_per_index) * a.n_qblk + b;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t ldq = int64_t(a.n_head) * D, ldk = int64_t(a.n_kv_head) * D;
  const bf16* qg = a.q + m0 * ldq + int64_t(h) * D;
  const bf16* kg = a.k + int64_t(kvh) * D;
  const bf16* vg = a.v + int64_t(kvh) * D;
  const uint8_t* kg8 = reinterpret_cast<const uint8_t*>(a.k) + int64_t(kvh) * D;  // fp8: one byte an element
  const uint8_t* vg8 = reinterpret_cast<const uint8_t*>(a.v) + int64_t(kvh) * D;

  TileCursor cur;
  cur.R = a.ranges + 2 * a.range_ptr[row];
  cur.nr = a.n_r[row];
  cur.ri = 0;
  cur.pos = cur.nr > 0 ? __ldg(cur.R) : 0;
  cur.end = cur.nr > 0 ? __ldg(cur.R + 1) : 0;
  cur.nc = a.n_c[row];
  cur.cb = 0;
  const int32_t* C = a.cols + a.col_ptr[row];

  // Q tile (rows past n_q zero-filled).
  for (int i = tid; i < kBQ * T::kChunks; i += T::kThreads) {
    const int r = i / T::kChunks, c = i % T::kChunks;
    const bool ok = m0 + r < a.n_q;
    cp_async16(sQ + swz<D>(r, c), ok ? qg + r * ldq + c * 8 : a.q, ok ? 16 : 0);
  }
  cp_async_commit();

  // One tile's K/V rows (empty slots zero-filled, so masked scores stay finite) and key positions.
  // fp8: the e4m3 rows land row-major in the stage's byte tiles (widen_tile makes them bf16).
  auto load_tile = [&](int stage, bool is_col, int32_t first, int cnt) {
    if constexpr (kFp8) {
      for (int i = tid; i < kBK * T::kChunks8; i += T::kThreads) {
        const int r = i / T::kChunks8, c = i % T::kChunks8;
        int32_t key = -1;
        if (r < cnt) key = is_col ? __ldg(C + first + r) : first + r;
        const bool ok = key >= 0;
        const int64_t off = int64_t(ok ? key : 0) * ldk + c * 16;
        const uint32_t dst = uint32_t(stage * T::kSmemRaw + r * D + c * 16);
        cp_async16(sKr + dst, ok ? kg8 + off : kg8, ok ? 16 : 0);
        cp_async16(sVr + dst, ok ? vg8 + off : vg8, ok ? 16 : 0);
      }
    } else {
      for (int i = tid; i < kBK * T::kChunks; i += T::kThreads) {
        const int r = i / T::kChunks, c = i % T::kChunks;
        int32_t key = -1;
        if (r < cnt) key = is_col ? __ldg(C + first + r) : first + r;
        const bool ok = key >= 0;
        const int64_t off = int64_t(ok ? key : 0) * ldk + c * 8;
        cp_async16(sK + stage * T::kSmemKV + swz<D>(r, c), ok ? kg + off : a.k, ok ? 16 : 0);
        cp_async16(sV + stage * T::kSmemKV + swz<D>(r, c), ok ? vg + off : a.v, ok ? 16 : 0);
      }
    }
    if (tid < kBK) s_keys[stage * kBK + tid] = tid < cnt ? (is_col ? __ldg(C + first + tid) : first + tid) : -1;
    if (tid == 0) s_cnt[stage] = cnt;
  };

  bool is_col;
  int32_t first;
  int cnt;
  bool have = cur.next(is_col, first, cnt);
  if (have) load_tile(0, is_col, first, cnt);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();

  constexpr bool kQInSmem = D >= 256;
  uint32_t qf[kQInSmem ? 1 : D / 16][4];
  if constexpr (!kQInSmem) fa2::load_q_frags<D>(qf, sQ, warp, lane);

  float oacc[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.f;
  float m_r[2] = {-INFINITY, -INFINITY};  // running max of the scaled log2 scores, rows g, g+8
  float l_r[2] = {0.f, 0.f};              // this thread's partial row sums
  const int64_t row0 = m0 + warp * 16 + (lane >> 2);  // query index of rows g (and g+8)
  // last visible key of row g (int32: keys are int32; clamped for padding rows of a huge last block)
  const int32_t vis0 = int32_t(min(a.q_pos0 + row0, int64_t(INT_MAX - 8)));
  const int32_t vis_first = int32_t(min(a.q_pos0 + m0, int64_t(INT_MAX)));  // visible to every row

  // fp8: stage st's e4m3 K/V -> the bf16 tiles sK / sV (16 codes -> two swizzled 16-byte chunks).
  auto widen_tile = [&](int stage) {
    const uint8_t* rk = smem + T::kSmemQ + stage * T::kSmemRaw;
    const uint8_t* rv = rk + T::kStages * T::kSmemRaw;
    for (int i = tid; i < kBK * T::kChunks8; i += T::kThreads) {
      const int r = i / T::kChunks8, c = i % T::kChunks8;
      uint4 lo, hi;
      widen16(*reinterpret_cast<const uint4*>(rk + r * D + c * 16), lo, hi);
      *reinterpret_cast<uint4*>(smem + (sK - sQ) + swz<D>(r, 2 * c)) = lo;
      *reinterpret_cast<uint4*>(smem + (sK - sQ) + swz<D>(r, 2 * c + 1)) = hi;
      widen16(*reinterpret_cast<const uint4*>(rv + r * D + c * 16), lo, hi);
      *reinterpret_cast<uint4*>(smem + (sV - sQ) + swz<D>(r, 2 * c)) = lo;
      *reinterpret_cast<uint4*>(smem + (sV - sQ) + swz<D>(r, 2 * c + 1)) = hi;
    }
  };

  int st = 0;
  while (have) {
    bool n_is_col;
    int32_t n_first;
    int n_cnt;
    const bool have_next = cur.next(n_is_col, n_first, n_cnt);
    if (have_next) load_tile(st ^ 1, n_is_col, n_first, n_cnt);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if constexpr (kFp8) {
      widen_tile(st);
      __syncthreads();
    }

    const uint32_t kbase = kFp8 ? sK : sK + st * T::kSmemKV, vbase = kFp8 ? sV : sV + st * T::kSmemKV;
    const int32_t* keys = s_keys + st * kBK;
    float s[8][4];
    if constexpr (kQInSmem)
      fa2::qk_tile_smem_q<D>(s, sQ, warp, kbase, lane);
    else
      fa2::qk_tile<D>(s, qf, kbase, lane);

    const int tcnt = s_cnt[st];
    // keys ascend within a tile (range: consecutive; columns: sorted), so keys[63] is the largest
    const bool need_mask = kWindow || tcnt < kBK || (a.causal && keys[kBK - 1] > vis_first);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * a.scale_log2;
        if (need_mask) {
          const int32_t key = keys[nt * 8 + 2 * (lane & 3) + (e & 1)];
          const int32_t vis = vis0 + (e >> 1) * 8;
          if (key < 0 || (a.causal && key > vis)) x = -INFINITY;
          if constexpr (kWindow) {
            if (int64_t(key) <= int64_t(vis) - a.window) x = -INFINITY;
          }
        }
        s[nt][e] = x;
      }
    }
    fa2::softmax_update<D>(s, m_r, l_r, oacc);
    fa2::pv_tile<D>(s, vbase, oacc, lane);
    __syncthreads();  // stage st (and its keys; fp8: the bf16 tiles) is overwritten next iteration
    st ^= 1;
    have = have_next;
  }
  cp_async_wait<0>();
  if constexpr (kFp8) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) oacc[i][e] *= a.v_scale;
  }

  // Epilogue: normalise, stage the warp's 16 rows in its own part of the Q buffer, 16B stores.
  fa2::stage_output<D>(oacc, l_r, sQ, warp, lane);
  fa2::write_output<D>(smem, a.o, a.lse, h, ldq, m0 + warp * 16, row0, a.n_q, warp, lane, m_r, l_r);
}

// ---- host side ---------------------------------------------------------------------------------
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

void check_params(const SparseAttnParams& p) {
  const int sm = current_sm();
  LC_REQUIRE(sm >= 80, "sparse_attention_generic: needs an sm_80+ GPU (found sm_%d)", sm);
  LC_REQUIRE(p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256,
             "sparse_attention_generic: head_dim %d unsupported (64, 128 or 256)", p.head_dim);
  LC_REQUIRE(p.q && p.k && p.v && p.o, "sparse_attention_generic: null q/k/v/o pointer");
  LC_REQUIRE(aligned16(p.q) && aligned16(p.k) && aligned16(p.v) && aligned16(p.o),
             "sparse_attention_generic: q/k/v/o must be 16-byte aligned");
  check_sparse_params(p, "sparse_attention_generic");  // fp8: the scales finite and > 0
}

template <int D, bool kFp8, bool kWindow>
void launch_main(const MainArgs& a, int64_t n_cta, cudaStream_t stream) {
  using T = GTile<D, kFp8>;
  static const cudaError_t err = cudaFuncSetAttribute(sparse_generic_kernel<D, kFp8, kWindow>,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmem);
  LC_CUDA_CHECK(err, "sparse_generic_kernel<d=%d, fp8=%d, window=%d>: raising dynamic shared memory to %d bytes", D,
                int(kFp8), int(kWindow), T::kSmem);
  sparse_generic_kernel<D, kFp8, kWindow><<<unsigned(n_cta), T::kThreads, T::kSmem, stream>>>(a);
  LC_LAUNCH_CHECK(
      "sparse_generic_kernel<d=%d, fp8=%d, window=%d> n_q=%lld n_kv=%lld q_pos0=%lld window=%lld heads=%d/%d "
      "grid=%lld",
      D, int(kFp8), int(kWindow), (long long)a.n_q, (long long)a.n_kv, (long long)a.q_pos0, (long long)a.window,
      a.n_head, a.n_kv_head, (long long)n_cta);
}

// The window variant exists for bf16 K/V only (check_sparse_params refuses fp8 with a window).
template <bool kFp8, bool kWindow>
void launch_for_dim(const MainArgs& a, int head_dim, int64_t n_cta, cudaStream_t stream) {
  if (head_dim == 256)
    launch_main<256, kFp8, kWindow>(a, n_cta, stream);
  else if (head_dim == 128)
    launch_main<128, kFp8, kWindow>(a, n_cta, stream);
  else
    launch_main<64, kFp8, kWindow>(a, n_cta, stream);
}

}  // namespace

size_t sparse_attention_generic_workspace_bytes(const DeviceSparseIndex& index) { return sparse_plan_layout(index).total; }

void sparse_attention_generic_plan(const SparseAttnParams& p, Stream s) {
  check_params(p);
  launch_sparse_plan(p, s, "sparse_attention_generic");
}

void sparse_attention_generic_run(const SparseAttnParams& p, Stream s) {
  check_params(p);
  const bool fp8 = p.kv_dtype == KvDtype::fp8_e4m3;
  MainArgs a{sparse_kernel_args(p)};
  a.v_scale = fp8 ? p.v_scale : 1.f;
  if (fp8) a.scale_log2 *= p.k_scale;
  const int64_t n_cta = int64_t(p.n_head) * p.index.n_qblk;
  LC_REQUIRE(n_cta <= 0x7fffffff, "sparse_attention_generic: %lld CTAs exceed the grid limit", (long long)n_cta);
  auto stream = static_cast<cudaStream_t>(s);
  if (fp8)
    launch_for_dim<true, false>(a, p.head_dim, n_cta, stream);
  else if (p.window > 0)
    launch_for_dim<false, true>(a, p.head_dim, n_cta, stream);
  else
    launch_for_dim<false, false>(a, p.head_dim, n_cta, stream);
}

void sparse_attention_generic(const SparseAttnParams& p, Stream s) {
  sparse_attention_generic_plan(p, s);
  sparse_attention_generic_run(p, s);
}

}  // namespace longctx::cuda

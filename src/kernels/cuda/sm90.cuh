// sm90.cuh (cuda): the Hopper building blocks shared by the warp-specialised attention kernels
// (attention_prefill_sm90.cu dense, sparse_attention_sm90.cu sparse): mbarrier, TMA bulk tensor
// copies, wgmma issue/commit/wait, register fences, the 128-byte-swizzle shared-memory matrix
// descriptor, the S = Q K^T and P V wgmmas, and the host-side tensor-map encoder.
// Why one header: both kernels must agree on the shared-memory layout (128-byte swizzle, 1024-byte
// aligned tiles, TMA boxes of 64 dims) and on the PTX they issue; one copy keeps them identical.
// Written from the PTX ISA (mbarrier, cp.async.bulk.tensor, wgmma.mma_async sections). Hopper only
// (sm_90a): include it from .cu files compiled for that target.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/mma.cuh"

namespace longctx::cuda::sm90 {

// setmaxnreg: a CTA of `threads` threads (__launch_bounds__(threads, 1)) starts with threads x R
// registers, R = 65536 / threads rounded down to 8; the consumers' setmaxnreg.inc waits until the
// producers' .dec has freed enough, so a split that takes more than it frees hangs the kernel
// (seen on an H100, 2026-11-24: 128 x 80 + 256 x 216 = 65536 > 384 x 168).
constexpr bool setmaxnreg_split_fits(int threads, int producer_threads, int producer_regs, int consumer_regs) {
  return producer_threads * producer_regs + (threads - producer_threads) * consumer_regs <=
         threads * (65536 / threads / 8 * 8);
}

// ---- mbarrier and TMA ------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "LC_WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra LC_WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// 3-D bulk tensor copy global -> shared, completion counted in transaction bytes on bar.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                            int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// ---- wgmma -------------------------------------------------------------------------------------
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keep the compiler from moving accumulator accesses across wgmma issue/wait, and keep the
// register A operand (P) alive and unmodified until the wgmma that reads it has completed.
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_p(uint32_t (&p)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(p[i][j])::"memory");
}
// 2^x on the SFU, flush-to-zero (inputs are <= 0 in softmax; results below 2^-126 are noise).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Shared-memory matrix descriptors, 128-byte swizzle (PTX ISA "matrix descriptor"):
// start address >> 4 in bits 0-13, leading byte offset >> 4 in 16-29, stride byte offset >> 4
// in 32-45, swizzle mode 1 (128B) in 62-63. SBO = 1024: the next group of 8 rows (8 x 128 B).
// K-major: LBO unused (1). MN-major: LBO = stride between 64-element panels of the N dim.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr, uint32_t lbo_bytes) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(lbo_bytes >> 4) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}

// S = Q K^T tiles: D[64 x N] (+)= A[64 x 16] * B[16 x N] for N = 128, 80, 64 (the key tiles of
// head_dim 128 and 256), A and B from shared memory, both K-major.
// D[64 x 128] (+)= A[64 x 16] * B[16 x 128], A and B from shared memory, both K-major.
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17,"
      " %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33,"
      " %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49,"
      " %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(scale_d));
}

// D[64 x 80] (+)= A[64 x 16] * B[16 x 80], A and B from shared memory, both K-major.
__device__ __forceinline__ void wgmma_ss(float (&d)[40], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %42, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17,"
      " %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33,"
      " %34, %35, %36, %37, %38, %39}, %40, %41, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
      : "l"(da), "l"(db), "r"(scale_d));
}
// D[64 x 64] (+)= A[64 x 16] * B[16 x 64], A and B from shared memory, both K-major.
__device__ __forceinline__ void wgmma_ss(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17,"
      " %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(scale_d));
}

// D[64 x 32] (+)= A[64 x 16] (registers: the m16n8k16 A-fragment layout per warp, rows 16 warp + g,
// + 8; columns 2 tq, + 1, + 8, + 9) * B[16 x 32] (shared memory, K-major): InfiniteHiP's prefill
// scorer (queries x probe keys), whose 16 accumulators a thread leave room for the queries' registers.
__device__ __forceinline__ void wgmma_rs_n32(float (&d)[16], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

// D[64 x 128] += A[64 x 16] (registers) * B[16 x 128], B MN-major (transpose bit set): O += P V.
__device__ __forceinline__ void wgmma_rs_tb(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17,"
      " %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33,"
      " %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49,"
      " %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

// ---- epilogue ----------------------------------------------------------------------------------
// One consumer warpgroup's 64 rows; the thread holds rows row0 and row0 + 8, columns 8j + 2tq, +1
// of each 128-column accumulator part. finish_row_sums reduces the row sums l_r over the quad (in
// place) and gives 1 / l (0 for a row with no attended key, so its O is 0).
__device__ __forceinline__ void finish_row_sums(float (&l_r)[2], float (&inv_l)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_r[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    l_r[r] = l;
    inv_l[r] = l > 0.f ? 1.f / l : 0.f;
  }
}
// O / l as bf16 straight from the accumulator layout (4-byte stores) into out [n_q, n_head, kD] at
// head h (kD = 128 * kParts: part i holds columns 128i..128i+127), and the natural-log LSE (m in
// raw-score units, scale_log2 = scale * log2(e)) into lse [n_head, n_q] if given; LSE = -inf for
// a row with no attended key. l_r: the thread's partial row sums (reduced here).
template <int kParts>
__device__ __forceinline__ void store_o_lse_parts(const float (&o)[kParts][64], float (&l_r)[2], const float (&m_r)[2],
                                                  int64_t row0, int tq, int h, int64_t n_q, int n_head,
                                                  float scale_log2, __nv_bfloat16* out, float* lse) {
  constexpr float kLn2f = 0.6931471805599453f;
  constexpr int kD = 128 * kParts;
  float inv_l[2];
  finish_row_sums(l_r, inv_l);
  const int64_t ldo = int64_t(n_head) * kD;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t qi = row0 + 8 * r;
    if (qi < n_q) {
      __nv_bfloat16* orow = out + qi * ldo + int64_t(h) * kD + 2 * tq;
#pragma unroll
      for (int part = 0; part < kParts; ++part)
#pragma unroll
        for (int j = 0; j < 16; ++j)
          *reinterpret_cast<uint32_t*>(orow + 128 * part + 8 * j) =
              mma::pack_bf16(o[part][4 * j + 2 * r] * inv_l[r], o[part][4 * j + 2 * r + 1] * inv_l[r]);
      if (lse && tq == 0)
        lse[int64_t(h) * n_q + qi] = l_r[r] > 0.f ? m_r[r] * scale_log2 * kLn2f + logf(l_r[r]) : -INFINITY;
    }
  }
}
// The head_dim 128 case with one accumulator (the sparse kernel's).
__device__ __forceinline__ void store_o_lse(const float (&o)[64], float (&l_r)[2], const float (&m_r)[2], int64_t row0,
                                            int tq, int h, int64_t n_q, int n_head, float scale_log2,
                                            __nv_bfloat16* out, float* lse) {
  store_o_lse_parts<1>(reinterpret_cast<const float(&)[1][64]>(o), l_r, m_r, row0, tq, h, n_q, n_head, scale_log2, out,
                       lse);
}

// ---- host: tensor maps through the driver entry point (no libcuda link needed) ---------------
inline PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    LC_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q),
                  "looking up cuTensorMapEncodeTiled");
    LC_REQUIRE(p && q == cudaDriverEntryPointSuccess, "cuTensorMapEncodeTiled unavailable");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// 3-D map over a token-major [n_tok, n_heads, head_dim] bf16 tensor; box = box_tokens tokens x 1
// head x 64 dims (128-byte rows, 128-byte swizzle: one 64-dim panel of a [tokens][head_dim] tile
// per copy).
inline CUtensorMap make_map(const void* ptr, int64_t n_tok, int n_heads, int box_tokens, const char* what,
                            int head_dim = 128) {
  CUtensorMap m;
  const cuuint64_t dims[3] = {cuuint64_t(head_dim), cuuint64_t(n_heads), cuuint64_t(n_tok)};
  const cuuint64_t strides[2] = {cuuint64_t(head_dim) * 2, cuuint64_t(n_heads) * head_dim * 2};  // bytes, dims 1..2
  const cuuint32_t box[3] = {64, 1, cuuint32_t(box_tokens)};
  const cuuint32_t estr[3] = {1, 1, 1};
  const CUresult r = encode_fn()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(ptr), dims, strides, box,
                                 estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  LC_REQUIRE(r == CUDA_SUCCESS, "%s: cuTensorMapEncodeTiled(tokens=%lld, heads=%d, box=%d) failed: %d", what,
             (long long)n_tok, n_heads, box_tokens, int(r));
  return m;
}

}  // namespace longctx::cuda::sm90

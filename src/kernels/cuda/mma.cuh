// mma.cuh (cuda, internal): inline-PTX helpers for the sm_80+ tensor-core path shared by the
// attention kernels: cp.async (16-byte global->shared copies), ldmatrix, mma.sync m16n8k16
// bf16 with fp32 accumulators, and a swizzled shared-memory layout for [rows][head_dim] tiles.
//
// Fragment layouts (PTX ISA, "mma.m16n8k16"), lane = threadIdx.x % 32, g = lane/4, t = lane%4:
//   A 16x16 (row-major): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 8+2t..), a3 = (g+8, 8+2t..)
//   B 16x8  (k x n):     b0 = (k=2t..2t+1, n=g), b1 = (k=8+2t.., n=g)
//   C 16x8:              c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
// so a C tile pair (n-tiles 2j, 2j+1) converts in registers to the A fragment of k-step j.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace longctx::cuda::mma {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy; src_bytes = 0 zero-fills the destination (rows past the end).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// The same, zero-filling the 16 bytes instead of reading src when flag < 0 (src must still be a
// valid address): the test is the copy's own predicate (one compare, no byte count to select).
__device__ __forceinline__ void cp_async16_zfill_if_negative(uint32_t dst, const void* src, int flag) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.lt.s32 p, %2, 0;\n\tcp.async.cg.shared.global [%0], [%1], 16, p;\n\t}" ::"r"(dst),
      "l"(src), "r"(flag));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                                  uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// d += a * b, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += a * b, fp16 inputs, fp32 accumulators (the fp8-KV decode path: e4m3 -> fp16 is exact).
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo (lower address)
  return *reinterpret_cast<uint32_t*>(&v);
}

// Swizzled [rows][D] bf16 tile: 16-byte chunk c of row r lives at chunk (c ^ (r & 7)), so the
// 8 row addresses of one ldmatrix 8x8 matrix (same c, 8 consecutive rows) hit 8 distinct
// 16-byte bank groups: conflict-free for D = 64, 128 and 256 (row pitch a multiple of 128
// bytes). Rows of D = 16 or 32 (2 or 4 chunks: tiny test models) swizzle within their own
// chunks, (c ^ (r & (chunks - 1))), which keeps each row in place (not conflict-free).
template <int D>
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  constexpr int kMask = (D / 8 < 8 ? D / 8 : 8) - 1;
  return uint32_t(row * D + ((chunk ^ (row & kMask)) << 3)) * 2u;  // byte offset
}

}  // namespace longctx::cuda::mma

// compact_kv.cu: see compact_kv.h.
// How: compact_kv runs one CTA per output key: the first head_dim/2 threads put (cos, sin) of the
// key's new position in shared memory, then every thread rotates pairs (i, i + head_dim/2) of
// the gathered row across the KV heads and copies the V row (fp8 pools: both rows widened from
// e4m3 times their scale first, V eight elements per 8-byte load). selection_query runs one CTA per
// query head and block of 16 rotation pairs; the rotated rows are summed in fp32 by interleaved row groups, then the groups'
// sums in order (the CPU twin sums in row order: the tests allow fp32 reassociation).
#include <cuda_bf16.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/compact_kv.h"
#include "kernels/cuda/fp8_vec.cuh"

namespace longctx::cuda {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kMaxHalf = 128;  // head_dim <= 256
constexpr int kThreads = 128;

__device__ __forceinline__ void rope_angle(int64_t pos, float inv_freq, float factor, float& c, float& s) {
  float sn, cs;
  sincosf(float(pos) * inv_freq, &sn, &cs);  // fp32 product, as HF and the CPU twin
  c = cs * factor;
  s = sn * factor;
}

// The pool's elements: bf16, or e4m3 times a scale (the fp8 cache).
template <bool FP8>
__device__ __forceinline__ float pool_at(const void* base, int64_t i, float scale) {
  if constexpr (FP8) return fp8vec::from_e4m3(static_cast<const uint8_t*>(base)[i]) * scale;
  else return __bfloat162float(static_cast<const bf16*>(base)[i]);
}

template <bool FP8>
__global__ void __launch_bounds__(kThreads) compact_kv_kernel(CompactKvParams p) {
  __shared__ float cs[kMaxHalf], sn[kMaxHalf];
  const int64_t j = blockIdx.x;
  const int half = p.head_dim / 2;
  for (int i = threadIdx.x; i < half; i += kThreads) rope_angle(j, p.inv_freq[i], p.attn_factor, cs[i], sn[i]);
  __syncthreads();
  const int32_t pos = p.keys[j];
  const int64_t row = p.slots ? int64_t(p.slots[pos]) : int64_t(pos);
  const int64_t width = int64_t(p.n_kv_head) * p.head_dim;
  const int64_t k0 = row * width;  // the row's first element in the pools
  bf16* ko = static_cast<bf16*>(p.k_out) + j * width;
  bf16* vo = static_cast<bf16*>(p.v_out) + j * width;
  for (int e = threadIdx.x; e < p.n_kv_head * half; e += kThreads) {
    const int h = e / half, i = e % half;
    const float a = pool_at<FP8>(p.k_pool, k0 + h * p.head_dim + i, p.k_scale);
    const float b = pool_at<FP8>(p.k_pool, k0 + h * p.head_dim + i + half, p.k_scale);
    ko[h * p.head_dim + i] = __float2bfloat16(a * cs[i] - b * sn[i]);
    ko[h * p.head_dim + i + half] = __float2bfloat16(b * cs[i] + a * sn[i]);
  }
  uint4* vo4 = reinterpret_cast<uint4*>(vo);  // 8 bf16
  if constexpr (FP8) {
    const uint2* v8 = reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(p.v_pool) + k0);  // 8 e4m3
    for (int e = threadIdx.x; e < width / 8; e += kThreads) vo4[e] = fp8vec::dequantize8(v8[e], p.v_scale);
  } else {
    const uint4* v4 = reinterpret_cast<const uint4*>(static_cast<const bf16*>(p.v_pool) + k0);
    for (int e = threadIdx.x; e < width / 8; e += kThreads) vo4[e] = v4[e];
  }
}

// kRowGroups threads per rotation pair split the rows (thread group g takes rows g, g + kRowGroups,
// ...), then their partial sums are added in group order: deterministic. A CTA takes
// kPairsPerCta rotation pairs of one head (grid: heads x pair blocks), so a 512-row chunk of 32
// heads runs as 128 CTAs of 16-row walks (one CTA per head walking 64 rows per thread: 0.020 ms
// on an H100; one thread per pair walking all rows: 0.14 ms).
constexpr int kRowGroups = 32;
constexpr int kPairsPerCta = 16;

__global__ void __launch_bounds__(kRowGroups * kPairsPerCta) selection_query_kernel(SelectionQueryParams p) {
  __shared__ float part_a[kRowGroups][kPairsPerCta], part_b[kRowGroups][kPairsPerCta];
  const int h = blockIdx.x, half = p.head_dim / 2;
  const int g = threadIdx.x / kPairsPerCta, il = threadIdx.x % kPairsPerCta, i = blockIdx.y * kPairsPerCta + il;
  const int64_t stride = int64_t(p.n_head) * p.head_dim;
  const bf16* q = static_cast<const bf16*>(p.q) + int64_t(h) * p.head_dim;
  float sa = 0.f, sb = 0.f;
  if (i < half) {
    const float f = p.inv_freq[i];
    for (int64_t r = g; r < p.n_rows; r += kRowGroups) {
      float c, s;
      rope_angle(p.pos0 + r, f, p.attn_factor, c, s);
      const float a = __bfloat162float(q[r * stride + i]), b = __bfloat162float(q[r * stride + i + half]);
      sa += a * c - b * s;
      sb += b * c + a * s;
    }
  }
  part_a[g][il] = sa;
  part_b[g][il] = sb;
  __syncthreads();
  if (threadIdx.x < kPairsPerCta && i < half) {
    float ta = 0.f, tb = 0.f;
    for (int gg = 0; gg < kRowGroups; ++gg) ta += part_a[gg][il], tb += part_b[gg][il];
    p.out[int64_t(h) * p.head_dim + i] = ta / float(p.n_rows);
    p.out[int64_t(h) * p.head_dim + i + half] = tb / float(p.n_rows);
  }
}

__global__ void budget_key_ranges_kernel(BudgetKeyRanges p) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < p.n_init) p.keys[t] = int32_t(t);
  const int64_t n_kv = p.n_kv_dev ? int64_t(*p.n_kv_dev) : p.n_kv;
  if (t < p.n_local) p.keys[p.n_init + p.n_select + t] = int32_t(n_kv - p.n_local + t);
}

}  // namespace

void compact_kv(const CompactKvParams& p, Stream s) {
  LC_REQUIRE(p.head_dim > 0 && p.head_dim % 8 == 0 && p.head_dim / 2 <= kMaxHalf,
             "compact_kv: head_dim %d (a multiple of 8, <= %d)", p.head_dim, 2 * kMaxHalf);
  LC_REQUIRE(p.n_kv_head > 0 && p.inv_freq, "compact_kv: %d KV heads, inv_freq %s", p.n_kv_head,
             p.inv_freq ? "set" : "missing");
  LC_REQUIRE(!p.fp8 || (p.k_scale > 0.f && p.v_scale > 0.f), "compact_kv: fp8 scales %g / %g", double(p.k_scale),
             double(p.v_scale));
  if (p.n_keys <= 0) return;
  const auto st = static_cast<cudaStream_t>(s);
  if (p.fp8) compact_kv_kernel<true><<<unsigned(p.n_keys), kThreads, 0, st>>>(p);
  else compact_kv_kernel<false><<<unsigned(p.n_keys), kThreads, 0, st>>>(p);
  LC_LAUNCH_CHECK("compact_kv (%lld keys, %d KV heads, d %d, %s)", (long long)p.n_keys, p.n_kv_head, p.head_dim,
                  p.fp8 ? "e4m3" : "bf16");
}

void selection_query(const SelectionQueryParams& p, Stream s) {
  LC_REQUIRE(p.head_dim > 0 && p.head_dim % 2 == 0 && p.head_dim / 2 <= kMaxHalf,
             "selection_query: head_dim %d (even, <= %d)", p.head_dim, 2 * kMaxHalf);
  LC_REQUIRE(p.n_rows > 0 && p.n_head > 0 && p.inv_freq, "selection_query: %lld rows, %d heads",
             (long long)p.n_rows, p.n_head);
  const dim3 grid(unsigned(p.n_head), unsigned((p.head_dim / 2 + kPairsPerCta - 1) / kPairsPerCta));
  selection_query_kernel<<<grid, kRowGroups * kPairsPerCta, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("selection_query (%lld rows, %d heads, d %d)", (long long)p.n_rows, p.n_head, p.head_dim);
}

void budget_key_ranges(const BudgetKeyRanges& p, Stream s) {
  LC_REQUIRE(p.n_init >= 0 && p.n_local >= 0 && p.n_kv >= p.n_init + p.n_select + p.n_local,
             "budget_key_ranges: %lld + %lld + %lld keys of %lld", (long long)p.n_init, (long long)p.n_select,
             (long long)p.n_local, (long long)p.n_kv);
  const int64_t n = p.n_init > p.n_local ? p.n_init : p.n_local;
  if (n == 0) return;
  budget_key_ranges_kernel<<<unsigned((n + 255) / 256), 256, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("budget_key_ranges");
}

}  // namespace longctx::cuda

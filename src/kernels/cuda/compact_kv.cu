// compact_kv.cu: see compact_kv.h.
// How: compact_kv runs one CTA per output key: the first head_dim/2 threads put (cos, sin) of the
// key's new position in shared memory, then every thread rotates pairs (i, i + head_dim/2) of
// the gathered row across the KV heads and copies the V row. selection_query runs one CTA per
// query head and block of 16 rotation pairs; the rotated rows are summed in fp32 by interleaved row groups, then the groups'
// sums in order (the CPU twin sums in row order: the tests allow fp32 reassociation).
#include <cuda_bf16.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/compact_kv.h"

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

__global__ void __launch_bounds__(kThreads) compact_kv_kernel(CompactKvParams p) {
  __shared__ float cs[kMaxHalf], sn[kMaxHalf];
  const int64_t j = blockIdx.x;
  const int half = p.head_dim / 2;
  for (int i = threadIdx.x; i < half; i += kThreads) rope_angle(j, p.inv_freq[i], p.attn_factor, cs[i], sn[i]);
  __syncthreads();
  const int32_t pos = p.keys[j];
  const int64_t row = p.slots ? int64_t(p.slots[pos]) : int64_t(pos);
  const int64_t width = int64_t(p.n_kv_head) * p.head_dim;
  const bf16* k = static_cast<const bf16*>(p.k_pool) + row * width;
  const bf16* v = static_cast<const bf16*>(p.v_pool) + row * width;
  bf16* ko = static_cast<bf16*>(p.k_out) + j * width;
  bf16* vo = static_cast<bf16*>(p.v_out) + j * width;
  for (int e = threadIdx.x; e < p.n_kv_head * half; e += kThreads) {
    const int h = e / half, i = e % half;
    const float a = __bfloat162float(k[h * p.head_dim + i]), b = __bfloat162float(k[h * p.head_dim + i + half]);
    ko[h * p.head_dim + i] = __float2bfloat16(a * cs[i] - b * sn[i]);
    ko[h * p.head_dim + i + half] = __float2bfloat16(b * cs[i] + a * sn[i]);
  }
  const uint4* v4 = reinterpret_cast<const uint4*>(v);
  uint4* vo4 = reinterpret_cast<uint4*>(vo);
  for (int e = threadIdx.x; e < width / 8; e += kThreads) vo4[e] = v4[e];
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
  if (p.n_keys <= 0) return;
  compact_kv_kernel<<<unsigned(p.n_keys), kThreads, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("compact_kv (%lld keys, %d KV heads, d %d)", (long long)p.n_keys, p.n_kv_head, p.head_dim);
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

// paged_dot.cu: see paged_dot.h.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/paged_dot.h"

namespace longctx::cuda {

namespace {

// One thread per gathered key row: the row's head_dim bf16 values arrive as head_dim/8 16-byte
// loads, all issued before any arithmetic (a thread keeps one whole row in registers), so each
// thread has a full row in flight and no cross-lane reduction is needed; the GQA group's g
// queries sit in shared memory as fp32 and are read as broadcasts. Why not a warp per row (each
// lane 8 bytes of the row, then g five-step shuffle reductions): measured on an H100 at 1M
// candidates (bench/bench_tokenselect.cu) it streamed keys at 1.76 TB/s, bound by the shuffles.
constexpr int kThreads = 256;

template <int D, int G>
__global__ void __launch_bounds__(kThreads) paged_dot_kernel(const __nv_bfloat16* __restrict__ q,
                                                             const float* __restrict__ q_f32,
                                                             const __nv_bfloat16* __restrict__ k,
                                                             const int32_t* __restrict__ slots,
                                                             float* __restrict__ scores, int64_t n_slot,
                                                             int n_kv_head) {
  constexpr int V = D / 8;  // 16-byte vectors per key row
  __shared__ float4 qs[G][D / 4];
  const int kvh = blockIdx.y;
  for (int i = threadIdx.x; i < G * D / 4; i += kThreads) {
    const int64_t e = int64_t(kvh) * G * D + 4 * i;
    qs[i / (D / 4)][i % (D / 4)] =
        q_f32 ? make_float4(q_f32[e], q_f32[e + 1], q_f32[e + 2], q_f32[e + 3])
              : make_float4(__bfloat162float(q[e]), __bfloat162float(q[e + 1]), __bfloat162float(q[e + 2]),
                            __bfloat162float(q[e + 3]));
  }
  __syncthreads();
  const int64_t j = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= n_slot) return;
  const uint4* row = reinterpret_cast<const uint4*>(k + (int64_t(slots[j]) * n_kv_head + kvh) * D);
  uint4 raw[V];
#pragma unroll
  for (int v = 0; v < V; ++v) raw[v] = __ldg(row + v);
  float acc[G];
#pragma unroll
  for (int hh = 0; hh < G; ++hh) acc[hh] = 0.f;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw[v]);
    const float2 a = __bfloat1622float2(pairs[0]), b = __bfloat1622float2(pairs[1]);
    const float2 c = __bfloat1622float2(pairs[2]), d = __bfloat1622float2(pairs[3]);
#pragma unroll
    for (int hh = 0; hh < G; ++hh) {
      const float4 q0 = qs[hh][2 * v], q1 = qs[hh][2 * v + 1];
      float x = acc[hh];
      x = fmaf(q0.x, a.x, x);
      x = fmaf(q0.y, a.y, x);
      x = fmaf(q0.z, b.x, x);
      x = fmaf(q0.w, b.y, x);
      x = fmaf(q1.x, c.x, x);
      x = fmaf(q1.y, c.y, x);
      x = fmaf(q1.z, d.x, x);
      x = fmaf(q1.w, d.y, x);
      acc[hh] = x;
    }
  }
#pragma unroll
  for (int hh = 0; hh < G; ++hh) scores[(int64_t(kvh) * G + hh) * n_slot + j] = acc[hh];
}

template <int D, int G>
void launch(const PagedDotParams& p, cudaStream_t s) {
  const dim3 grid(unsigned((p.n_slot + kThreads - 1) / kThreads), unsigned(p.n_kv_head));
  paged_dot_kernel<D, G><<<grid, kThreads, 0, s>>>(static_cast<const __nv_bfloat16*>(p.q), p.q_f32,
                                                   static_cast<const __nv_bfloat16*>(p.k_pool), p.slots, p.scores,
                                                   p.n_slot, p.n_kv_head);
}

template <int D>
void dispatch_g(const PagedDotParams& p, int g, cudaStream_t s) {
  switch (g) {
    case 1: return launch<D, 1>(p, s);
    case 2: return launch<D, 2>(p, s);
    case 4: return launch<D, 4>(p, s);
    case 7: return launch<D, 7>(p, s);
    case 8: return launch<D, 8>(p, s);
    default: LC_REQUIRE(false, "paged_dot: GQA group %d is not built (1, 2, 4, 7, 8)", g);
  }
}

}  // namespace

void paged_dot(const PagedDotParams& p, Stream s) {
  LC_REQUIRE(p.q || p.q_f32, "paged_dot: no query");
  LC_REQUIRE(p.n_head > 0 && p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0, "paged_dot: heads %d / %d", p.n_head, p.n_kv_head);
  LC_REQUIRE(p.head_dim == 64 || p.head_dim == 128, "paged_dot: head_dim %d (64 or 128)", p.head_dim);
  if (p.n_slot <= 0) return;
  const auto st = static_cast<cudaStream_t>(s);
  const int g = p.n_head / p.n_kv_head;
  if (p.head_dim == 128) dispatch_g<128>(p, g, st);
  else dispatch_g<64>(p, g, st);
  LC_LAUNCH_CHECK("paged_dot (n_slot %lld, heads %d/%d, d %d)", (long long)p.n_slot, p.n_head, p.n_kv_head, p.head_dim);
}

}  // namespace longctx::cuda

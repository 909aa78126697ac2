// head_error.cu (cuda): per-head error sums of two bf16 attention outputs. What/layout:
// head_error.h. Tested in tests/cuda/test_head_error.cpp.
// How: pass 1, grid (kHeadErrorParts, n_head) x 256 threads: CTA (part, h) walks the head's
// n_rows * head_dim elements e = part * 256 + tid, stepping kHeadErrorParts * 256 (element e is
// row e / head_dim, dim e % head_dim), accumulates both sums in fp64, reduces them by warp
// shuffles and shared memory and writes its pair to the workspace. Pass 2, one warp per head,
// adds the parts in a fixed order. Memory-bound: each element of a and b is read once.
#include <cuda_bf16.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/head_error.h"

namespace longctx::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ double warp_sum(double x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

__global__ void __launch_bounds__(kThreads) head_error_parts(const HeadErrorParams p) {
  const int part = blockIdx.x, h = blockIdx.y;
  const bf16* a = static_cast<const bf16*>(p.a);
  const bf16* b = static_cast<const bf16*>(p.b);
  const int64_t ld = int64_t(p.n_head) * p.head_dim;
  const int64_t n = p.n_rows * p.head_dim;
  double d2 = 0, n2 = 0;
  for (int64_t e = int64_t(part) * kThreads + threadIdx.x; e < n; e += int64_t(kHeadErrorParts) * kThreads) {
    const int64_t i = e / p.head_dim, t = e % p.head_dim;
    const int64_t at = i * ld + int64_t(h) * p.head_dim + t;
    const double bv = double(__bfloat162float(b[at]));
    const double d = double(__bfloat162float(a[at])) - bv;
    d2 += d * d;
    n2 += bv * bv;
  }
  d2 = warp_sum(d2);
  n2 = warp_sum(n2);
  __shared__ double sd[kWarps], sn[kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sd[warp] = d2, sn[warp] = n2;
  __syncthreads();
  if (threadIdx.x == 0) {
    double td = 0, tn = 0;
    for (int w = 0; w < kWarps; ++w) td += sd[w], tn += sn[w];
    double* ws = static_cast<double*>(p.workspace) + (int64_t(h) * kHeadErrorParts + part) * 2;
    ws[0] = td;
    ws[1] = tn;
  }
}

__global__ void head_error_total(const HeadErrorParams p) {
  static_assert(kHeadErrorParts % 32 == 0, "parts are added by one warp, 32 at a time");
  const int h = blockIdx.x, lane = threadIdx.x;
  const double* ws = static_cast<const double*>(p.workspace) + int64_t(h) * kHeadErrorParts * 2;
  double d2 = 0, n2 = 0;
  for (int i = lane; i < kHeadErrorParts; i += 32) d2 += ws[2 * i], n2 += ws[2 * i + 1];
  d2 = warp_sum(d2);
  n2 = warp_sum(n2);
  if (lane == 0) p.out[2 * h] = d2, p.out[2 * h + 1] = n2;
}

}  // namespace

size_t head_error_workspace_bytes(int n_head) { return size_t(n_head > 0 ? n_head : 0) * kHeadErrorParts * 2 * sizeof(double); }

void head_error_sums(const HeadErrorParams& p, Stream s) {
  LC_REQUIRE(p.n_head > 0 && p.head_dim > 0 && p.n_rows >= 0, "head_error_sums: bad shape (rows %lld, heads %d, head_dim %d)",
             (long long)p.n_rows, p.n_head, p.head_dim);
  LC_REQUIRE(p.out && p.workspace && (p.n_rows == 0 || (p.a && p.b)), "head_error_sums: missing a device pointer");
  LC_REQUIRE(p.workspace_bytes >= head_error_workspace_bytes(p.n_head),
             "head_error_sums: workspace of %zu bytes, %zu needed for %d heads", p.workspace_bytes,
             head_error_workspace_bytes(p.n_head), p.n_head);
  const cudaStream_t st = static_cast<cudaStream_t>(s);
  head_error_parts<<<dim3(kHeadErrorParts, unsigned(p.n_head)), kThreads, 0, st>>>(p);
  LC_LAUNCH_CHECK("head_error_parts (rows %lld, heads %d, head_dim %d)", (long long)p.n_rows, p.n_head, p.head_dim);
  head_error_total<<<unsigned(p.n_head), 32, 0, st>>>(p);
  LC_LAUNCH_CHECK("head_error_total (heads %d)", p.n_head);
}

}  // namespace longctx::cuda

// ihip_decode_cache.cu: see ihip_decode_cache.h.
#include "kernels/cuda/ihip_decode_cache.h"

#include <cuda_runtime.h>

#include "kernels/cuda/check.h"

namespace longctx::cuda {

namespace {

constexpr int kCommitThreads = 256;
constexpr int kCommitMaxCtas = 64;  // a cached list is at most a stage's k (32K entries for the 3K preset)

__global__ void plan_kernel(IhipDecodePlanParams p) {
  const int N = p.n_stage;
  const int64_t len = *p.seq_len, pos = len - 1;
  const int64_t cand_end = pos - p.n_stream + 1 > p.n_sink ? pos - p.n_stream + 1 : p.n_sink;
  const bool dense = cand_end - p.n_sink <= p.min_k;  // InfiniteHipMethod::route's rule at this position
  int first = N;
  for (int i = 0; i < N && first == N; ++i) {
    const int64_t r = p.refresh_pos[i];
    if (r < 0 || pos < r || pos - r >= p.refresh[i]) first = i;
  }
  if (dense) {
    first = 0;
  } else {
    for (int i = first; i < N; ++i) p.refresh_pos[i] = int32_t(pos);
    ++p.counts[first];  // first == N: a cached step
  }
  for (int i = 0; i < N; ++i) {
    p.refreshes[i] = i >= first;
    if (i > 0) p.in_len[i] = i == first ? p.cache_len[i - 1] : 0;  // later stages: their commit sets it
  }
  *p.stage0_len = first == 0 ? int32_t(len) : 0;
  if (first == 0) *p.win_begin = int32_t(cand_end);
}

__global__ void commit_kernel(IhipDecodeCommitParams p) {
  if (!p.refreshes[p.stage]) return;
  const int32_t n = *p.out_len;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p.cache[i] = p.out[i];
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    p.cache_len[p.stage] = n;
    if (p.stage + 1 < p.n_stage) p.in_len[p.stage + 1] = n;  // a refreshed stage refreshes every later one
  }
}

__global__ void keys_kernel(IhipDecodeKeysParams p) {
  const int64_t len = *p.seq_len;
  if (!p.sel) {
    if (threadIdx.x == 0) *p.n_keys = int32_t(len), *p.q_pos = int32_t(len - 1);
    return;
  }
  const int64_t sink_end = p.n_sink < len ? p.n_sink : len, n_sel = *p.sel_len;
  const int64_t w = *p.win_begin > sink_end ? *p.win_begin : sink_end;
  int64_t L = sink_end + n_sel + (len - w);
  if (L > p.cap) __trap();  // the host bound is broken: never write past the list
  for (int64_t i = threadIdx.x; i < p.cap; i += blockDim.x)
    p.keys[i] = int32_t(i < sink_end ? i : i < sink_end + n_sel ? p.sel[i - sink_end] : i < L ? w + (i - sink_end - n_sel) : 0);
  if (threadIdx.x == 0) *p.n_keys = int32_t(L), *p.q_pos = int32_t(L - 1);
}

}  // namespace

void ihip_decode_keys(const IhipDecodeKeysParams& p, Stream s) {
  LC_REQUIRE(p.seq_len && p.n_keys && p.q_pos && (!p.sel || (p.sel_len && p.win_begin && p.keys && p.cap >= 1)),
             "internal: ihip decode keys params");
  keys_kernel<<<1, 1024, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("ihip decode keys cap %lld", (long long)p.cap);
}

void ihip_decode_plan(const IhipDecodePlanParams& p, Stream s) {
  LC_REQUIRE(p.n_stage >= 1 && p.n_stage <= kIhipMaxStages, "infinitehip: %d stages (1..%d)", p.n_stage,
             kIhipMaxStages);
  plan_kernel<<<1, 1, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("ihip decode plan N=%d", p.n_stage);
}

void ihip_decode_commit(const IhipDecodeCommitParams& p, Stream s) {
  LC_REQUIRE(p.stage >= 0 && p.stage < p.n_stage && p.cap >= 1, "internal: ihip commit stage %d of %d, cap %lld",
             p.stage, p.n_stage, (long long)p.cap);
  const int64_t want = (p.cap + kCommitThreads - 1) / kCommitThreads;
  const unsigned ctas = unsigned(want < kCommitMaxCtas ? want : kCommitMaxCtas);
  commit_kernel<<<ctas, kCommitThreads, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("ihip decode commit stage %d cap %lld", p.stage, (long long)p.cap);
}

}  // namespace longctx::cuda

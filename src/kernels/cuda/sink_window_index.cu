// sink_window_index.cu (cuda): builds the sinks + window decode index (A-shape / StreamingLLM)
// on the device from the sequences' lengths, so a captured decode step follows them on replay.
// Format: kernels/params/decode_index.h; API: sparse_decode.h. One thread per sequence writes
// its two ranges; the pointer arrays are a function of the sequence number alone.
#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/sparse_decode.h"

namespace longctx::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) sink_window_index_kernel(const SinkWindowIndexParams p) {
  const int s = blockIdx.x * kThreads + threadIdx.x;
  if (s > p.n_seq) return;
  p.range_ptr[s] = 2 * s;
  p.col_ptr[s] = 0;
  if (s == p.n_seq) return;
  const int len = max(p.seq_lens[s], 0);
  // Sorted by start (0 <= len - window); they overlap when len < sinks + window.
  reinterpret_cast<int2*>(p.ranges)[2 * s] = make_int2(0, min(p.sinks, len));
  reinterpret_cast<int2*>(p.ranges)[2 * s + 1] = make_int2(max(len - p.window, 0), len);
}

}  // namespace

void build_sink_window_index(const SinkWindowIndexParams& p, Stream s) {
  LC_REQUIRE(p.seq_lens && p.range_ptr && p.ranges && p.col_ptr && p.n_seq > 0 && p.sinks >= 0 && p.window >= 0,
             "build_sink_window_index: null array, n_seq %d, sinks %d or window %d invalid", p.n_seq, p.sinks,
             p.window);
  const unsigned blocks = unsigned((p.n_seq + 1 + kThreads - 1) / kThreads);
  sink_window_index_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(s)>>>(p);
  LC_LAUNCH_CHECK("sink_window_index_kernel n_seq=%d", p.n_seq);
}

DecodeIndex sink_window_index_view(const SinkWindowIndexParams& p) {
  DecodeIndex ix;
  ix.n_seq = p.n_seq;
  ix.n_index_head = 1;
  ix.range_ptr = p.range_ptr;
  ix.ranges = p.ranges;
  ix.col_ptr = p.col_ptr;
  ix.cols = nullptr;
  ix.range_capacity = 2 * int64_t(p.n_seq);
  ix.col_capacity = 0;
  ix.on_device = true;
  return ix;
}

}  // namespace longctx::cuda

// prefill_residual.h: where the layer-major prefill keeps the prompt's residual stream (bf16
// [T, n_embd]) while it goes through the layers one at a time (gpu_transformer.h).
//
// What: two placements behind one interface. Resident: the whole stream in GPU memory (the
// staging block's x part), chunk i is rows [i*C, i*C + n) of it and nothing moves. Host (KV
// offload, GpuOptions::kv_offload.host_residual): the stream lives in pinned host memory and
// the GPU holds two chunk buffers [2, C, n_embd]; a side stream copies chunk i + 2 in while the
// main stream computes chunk i + 1, and copies chunk i back out once it is computed, so GPU
// memory for the stream is O(C) instead of O(T) (8 GiB at 1M tokens of Llama-3-8B, 24 GiB at 3M,
// become 256 MiB at C = 16K) and the copies overlap the layer's compute.
// Why bit-identical: every chunk runs the same kernels on the same bytes; only where the bytes
// wait between layers changes.
// How (one pass per layer, all stream-ordered, no host sync):
//   r.begin_pass(T);                       // loads of chunks 0 and 1 queued
//   for chunk i: x = r.chunk(i); <compute on x [n, E]>; r.done(i);
//   r.end_pass();                          // the main stream waits for the last copies out
// Embeddings: x = r.chunk_target(i) (no load), embed into it, r.done(i), inside a pass begun
// with begin_pass(T, false). Logits: rows(r0, m) puts rows on the device (host: a copy into a
// chunk buffer) and returns them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda/runtime.h"

namespace longctx::gpu {

// Chunk buffers a host-placed stream needs on the GPU: double buffering.
inline constexpr int kResidualBuffers = 2;

struct PrefillResidualShape {
  int64_t rows = 0;    // the longest prompt (the sequence's capacity)
  int64_t n_embd = 0;
  int64_t chunk = 0;   // the prefill chunk C
};

class PrefillResidual {
 public:
  // Resident: dev is [rows, n_embd] bf16. Host: dev is [kResidualBuffers, chunk, n_embd] bf16 and
  // the pinned host stream is allocated here (Error when it cannot be).
  PrefillResidual(const PrefillResidualShape& shape, void* dev, bool on_host, cuda::Stream main);
  ~PrefillResidual();
  PrefillResidual(const PrefillResidual&) = delete;
  PrefillResidual& operator=(const PrefillResidual&) = delete;

  bool on_host() const { return host_ != nullptr; }
  static size_t host_bytes(const PrefillResidualShape& s);  // pinned bytes of a host stream
  static size_t device_bytes(const PrefillResidualShape& s, bool on_host);

  // A pass over the chunks of a prompt of T tokens; load: the chunks hold a previous layer's output.
  void begin_pass(int64_t T, bool load = true);
  void* chunk(int64_t i);  // device [n, n_embd] of chunk i, once loaded (the main stream waits)
  void done(int64_t i);    // chunk i computed on the main stream: copy out, prefetch chunk i + 2
  void end_pass();
  // Rows [r0, r0 + m) on the device (m <= chunk), after end_pass.
  const void* rows(int64_t r0, int64_t m);

 private:
  void load(int64_t i);  // side stream: chunk i into its buffer
  void release() noexcept;

  PrefillResidualShape shape_;
  char* dev_ = nullptr;
  char* host_ = nullptr;      // pinned [rows, n_embd], host placement only
  cuda::Stream main_ = nullptr;
  cuda::Stream side_ = nullptr;
  std::vector<void*> loaded_, computed_;  // cudaEvent_t per buffer
  int64_t T_ = 0;
  bool load_ = true;
};

}  // namespace longctx::gpu

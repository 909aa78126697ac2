// prefill_residual.cpp: see prefill_residual.h. Host placement, per buffer b = i % 2: the side
// stream waits for chunk i's compute (computed_[b]), copies it out, copies chunk i + 2 in and
// records loaded_[b]; the main stream waits for loaded_[b] before it touches buffer b again.
#include "gpu/prefill_residual.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "util/error.h"

namespace longctx::gpu {

namespace {

constexpr size_t kBf16 = 2;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("GPU prefill residual stream: {} failed: {}", what, cudaGetErrorString(e));
}
cudaStream_t cs(cuda::Stream s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t ce(void* e) { return static_cast<cudaEvent_t>(e); }

}  // namespace

size_t PrefillResidual::host_bytes(const PrefillResidualShape& s) {
  return size_t(std::max<int64_t>(s.rows, 1)) * size_t(s.n_embd) * kBf16;
}

size_t PrefillResidual::device_bytes(const PrefillResidualShape& s, bool on_host) {
  return on_host ? size_t(kResidualBuffers) * size_t(s.chunk) * size_t(s.n_embd) * kBf16 : host_bytes(s);
}

PrefillResidual::PrefillResidual(const PrefillResidualShape& shape, void* dev, bool on_host, cuda::Stream main)
    : shape_(shape), dev_(static_cast<char*>(dev)), main_(main) {
  if (!on_host) return;
  void* h = nullptr;
  if (cudaHostAlloc(&h, host_bytes(shape_), cudaHostAllocPortable) != cudaSuccess) {
    (void)cudaGetLastError();
    fail("cannot pin {} MiB of host memory for the prefill's residual stream ({} tokens x {} x bf16)",
         host_bytes(shape_) >> 20, shape_.rows, shape_.n_embd);
  }
  host_ = static_cast<char*>(h);
  try {
    side_ = cuda::stream_create();
    // per buffer, and one more each: the pass's start (computed_) and its end (loaded_)
    for (int b = 0; b < kResidualBuffers + 1; ++b)
      for (std::vector<void*>* v : {&loaded_, &computed_}) {
        cudaEvent_t e = nullptr;
        check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
        v->push_back(e);
      }
  } catch (...) {
    release();
    throw;
  }
}

void PrefillResidual::release() noexcept {  // never throws (a destructor's)
  for (std::vector<void*>* v : {&loaded_, &computed_})
    for (void* e : *v) (void)cudaEventDestroy(ce(e));
  loaded_.clear();
  computed_.clear();
  if (side_) (void)cudaStreamDestroy(cs(side_));
  if (host_) (void)cudaFreeHost(host_);
  side_ = nullptr;
  host_ = nullptr;
}

PrefillResidual::~PrefillResidual() { release(); }

void PrefillResidual::load(int64_t i) {
  const int64_t C = shape_.chunk, n = std::min(C, T_ - i * C);
  const size_t row = size_t(shape_.n_embd) * kBf16;
  check(cudaMemcpyAsync(dev_ + size_t(i % kResidualBuffers) * size_t(C) * row, host_ + size_t(i * C) * row,
                        size_t(n) * row, cudaMemcpyHostToDevice, cs(side_)),
        "copying a chunk in");
}

void PrefillResidual::begin_pass(int64_t T, bool load_chunks) {
  T_ = T;
  load_ = load_chunks;
  if (!host_) return;
  // The side stream starts after everything the main stream queued so far (the buffers' last use).
  void* start = computed_[kResidualBuffers];
  check(cudaEventRecord(ce(start), cs(main_)), "cudaEventRecord");
  check(cudaStreamWaitEvent(cs(side_), ce(start), 0), "cudaStreamWaitEvent");
  const int64_t n_chunks = (T + shape_.chunk - 1) / shape_.chunk;
  for (int64_t i = 0; i < kResidualBuffers; ++i) {
    if (load_ && i < n_chunks) load(i);
    check(cudaEventRecord(ce(loaded_[size_t(i)]), cs(side_)), "cudaEventRecord");
  }
}

void* PrefillResidual::chunk(int64_t i) {
  const size_t row = size_t(shape_.n_embd) * kBf16;
  if (!host_) return dev_ + size_t(i * shape_.chunk) * row;
  const size_t b = size_t(i % kResidualBuffers);
  check(cudaStreamWaitEvent(cs(main_), ce(loaded_[b]), 0), "cudaStreamWaitEvent");
  return dev_ + b * size_t(shape_.chunk) * row;
}

void PrefillResidual::done(int64_t i) {
  if (!host_) return;
  const int64_t C = shape_.chunk, n = std::min(C, T_ - i * C);
  const size_t b = size_t(i % kResidualBuffers), row = size_t(shape_.n_embd) * kBf16;
  check(cudaEventRecord(ce(computed_[b]), cs(main_)), "cudaEventRecord");
  check(cudaStreamWaitEvent(cs(side_), ce(computed_[b]), 0), "cudaStreamWaitEvent");
  check(cudaMemcpyAsync(host_ + size_t(i * C) * row, dev_ + b * size_t(C) * row, size_t(n) * row,
                        cudaMemcpyDeviceToHost, cs(side_)),
        "copying a chunk out");
  if (load_ && (i + kResidualBuffers) * C < T_) load(i + kResidualBuffers);
  check(cudaEventRecord(ce(loaded_[b]), cs(side_)), "cudaEventRecord");
}

void PrefillResidual::end_pass() {
  if (!host_) return;
  void* finished = loaded_[kResidualBuffers];
  check(cudaEventRecord(ce(finished), cs(side_)), "cudaEventRecord");
  check(cudaStreamWaitEvent(cs(main_), ce(finished), 0), "cudaStreamWaitEvent");
}

const void* PrefillResidual::rows(int64_t r0, int64_t m) {
  const size_t row = size_t(shape_.n_embd) * kBf16;
  if (!host_) return dev_ + size_t(r0) * row;
  if (m > shape_.chunk) fail("internal: {} residual rows at once, the chunk buffers hold {}", m, shape_.chunk);
  check(cudaMemcpyAsync(dev_, host_ + size_t(r0) * row, size_t(m) * row, cudaMemcpyHostToDevice, cs(main_)),
        "copying rows in");
  return dev_;
}

}  // namespace longctx::gpu

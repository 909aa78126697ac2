// runtime.cpp (cuda): see runtime.h. Host code only (compiled by the C++ compiler).
#include "kernels/cuda/runtime.h"

#include <cuda_runtime.h>

#include <cstdarg>
#include <cstdio>
#include <vector>

#include "kernels/cuda/check.h"
#include "util/error.h"  // longctx::Error only (messages are printf-formatted here: no {fmt} link)

namespace longctx::cuda {
namespace detail {

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string s(n > 0 ? size_t(n) : 0, '\0');
  if (n > 0) std::vsnprintf(s.data(), s.size() + 1, fmt, ap2);
  va_end(ap2);
  return s;
}

void raise_cuda(cudaError_t err, const char* call, const char* file, int line, const std::string& context) {
  throw Error(format("CUDA error in %s: %s (%s) [%s at %s:%d]", context.c_str(), cudaGetErrorString(err),
                     cudaGetErrorName(err), call, file, line));
}

void raise_msg(const std::string& msg) { throw Error(msg); }

}  // namespace detail

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver"/"no device" error
    return 0;
  }
  return n;
}

DeviceInfo device_info(int device) {
  cudaDeviceProp prop{};
  LC_CUDA_CHECK(cudaGetDeviceProperties(&prop, device), "device_info(device=%d)", device);
  DeviceInfo d;
  d.name = prop.name;
  d.sm_major = prop.major;
  d.sm_minor = prop.minor;
  d.num_sms = prop.multiProcessorCount;
  d.total_mem = prop.totalGlobalMem;
  d.l2_bytes = size_t(prop.l2CacheSize);
  d.smem_per_block_optin = prop.sharedMemPerBlockOptin;
  size_t free_b = 0, total_b = 0;
  LC_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b), "device_info: cudaMemGetInfo");
  d.free_mem = free_b;
  return d;
}

void require_hopper() {
  if (device_count() == 0) throw Error("no CUDA device found (the CUDA backend needs an NVIDIA Hopper GPU, sm_90)");
  const DeviceInfo d = device_info(0);
  if (d.sm_major != 9 || d.sm_minor != 0)
    throw Error(detail::format("GPU '%s' is sm_%d%d; longctx's CUDA kernels are built for Hopper (sm_90a) only; "
                               "use the CPU path",
                               d.name.c_str(), d.sm_major, d.sm_minor));
}

void* dev_malloc(size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    throw Error(detail::format("out of GPU memory: cudaMalloc of %.2f GiB failed (%s); %.2f GiB free of %.2f GiB",
                               double(bytes) / (1ull << 30), cudaGetErrorString(err), double(free_b) / (1ull << 30),
                               double(total_b) / (1ull << 30)));
  }
  return p;
}

void dev_free(void* p) {
  if (p) LC_CUDA_CHECK(cudaFree(p), "dev_free(%p)", p);
}

static cudaStream_t st(Stream s) { return static_cast<cudaStream_t>(s); }

void copy_h2d(void* dst, const void* src, size_t bytes, Stream s) {
  LC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st(s)), "copy_h2d(%zu bytes)", bytes);
  if (!s) LC_CUDA_CHECK(cudaStreamSynchronize(nullptr), "copy_h2d sync");
}
void copy_d2h(void* dst, const void* src, size_t bytes, Stream s) {
  LC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, st(s)), "copy_d2h(%zu bytes)", bytes);
  if (!s) LC_CUDA_CHECK(cudaStreamSynchronize(nullptr), "copy_d2h sync");
}
void copy_d2d(void* dst, const void* src, size_t bytes, Stream s) {
  LC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st(s)), "copy_d2d(%zu bytes)", bytes);
}
void memset_async(void* dst, int byte, size_t bytes, Stream s) {
  LC_CUDA_CHECK(cudaMemsetAsync(dst, byte, bytes, st(s)), "memset_async(%zu bytes)", bytes);
}

Stream stream_create() {
  cudaStream_t s = nullptr;
  LC_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream_create");
  return s;
}
void stream_destroy(Stream s) {
  if (s) LC_CUDA_CHECK(cudaStreamDestroy(st(s)), "stream_destroy");
}
void stream_sync(Stream s) { LC_CUDA_CHECK(cudaStreamSynchronize(st(s)), "stream_sync"); }
void device_sync() { LC_CUDA_CHECK(cudaDeviceSynchronize(), "device_sync"); }
void check_last_error(const char* what) { LC_CUDA_CHECK(cudaGetLastError(), "%s", what); }

DeviceArena::DeviceArena(size_t capacity_bytes) : capacity_(capacity_bytes) {
  base_ = dev_malloc(capacity_bytes);
}
DeviceArena::~DeviceArena() {
  if (base_) (void)cudaFree(base_);  // never throw from a destructor
}
void* DeviceArena::alloc(size_t bytes, size_t align) {
  LC_REQUIRE(align && (align & (align - 1)) == 0, "DeviceArena::alloc: alignment %zu is not a power of two", align);
  const size_t start = (used_ + align - 1) & ~(align - 1);
  if (start + bytes > capacity_)
    detail::raise_msg(detail::format("GPU arena full: %zu bytes requested, %zu of %zu used; raise the arena size",
                                     bytes, used_, capacity_));
  used_ = start + bytes;
  if (used_ > peak_) peak_ = used_;
  return static_cast<char*>(base_) + start;
}
void DeviceArena::rewind(size_t mark) {
  LC_REQUIRE(mark <= used_, "DeviceArena::rewind: mark %zu is past the used size %zu", mark, used_);
  used_ = mark;
}

CudaGraph::~CudaGraph() {
  if (exec_) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) (void)cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

void CudaGraph::begin_capture(Stream s) {
  LC_REQUIRE(s != nullptr, "CudaGraph::begin_capture: capture needs a stream from stream_create(), not the default stream");
  LC_CUDA_CHECK(cudaStreamBeginCapture(st(s), cudaStreamCaptureModeThreadLocal), "CudaGraph::begin_capture");
}

void CudaGraph::end_capture(Stream s) {
  cudaGraph_t g = nullptr;
  LC_CUDA_CHECK(cudaStreamEndCapture(st(s), &g), "CudaGraph::end_capture (a kernel launch inside the capture failed?)");
  if (exec_) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(static_cast<cudaGraphExec_t>(exec_), g, &info) == cudaSuccess) {
      if (graph_) LC_CUDA_CHECK(cudaGraphDestroy(static_cast<cudaGraph_t>(graph_)), "CudaGraph: destroy old graph");
      graph_ = g;
      return;
    }
    (void)cudaGetLastError();  // topology changed: build a new executable graph
    LC_CUDA_CHECK(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_)), "CudaGraph: destroy old exec");
    exec_ = nullptr;
  }
  if (graph_) LC_CUDA_CHECK(cudaGraphDestroy(static_cast<cudaGraph_t>(graph_)), "CudaGraph: destroy old graph");
  graph_ = g;
  cudaGraphExec_t e = nullptr;
  LC_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0), "CudaGraph::end_capture: instantiate");
  exec_ = e;
}

void CudaGraph::launch(Stream s) {
  LC_REQUIRE(exec_ != nullptr, "CudaGraph::launch: nothing captured");
  LC_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), st(s)), "CudaGraph::launch");
}

}  // namespace longctx::cuda

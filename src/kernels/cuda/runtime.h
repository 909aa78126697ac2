// runtime.h (cuda): device discovery, memory, streams and a bump arena, as plain C++.
//
// Why: the engine is compiled by the host compiler and must run (and fail clearly) on machines
// without a GPU, so nothing here exposes CUDA types. A Stream is a cudaStream_t in disguise
// (nullptr = the legacy default stream). Every function throws longctx::Error with the CUDA
// error string and what was being done; device_count() alone never throws (0 = no usable GPU).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace longctx::cuda {

using Stream = void*;  // opaque cudaStream_t; nullptr = default stream

struct DeviceInfo {
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int num_sms = 0;
  size_t total_mem = 0, free_mem = 0;
  size_t l2_bytes = 0;
  size_t smem_per_block_optin = 0;  // largest dynamic shared memory one block may opt into
};

// Number of visible CUDA devices; 0 when there is no driver, no device or any error.
int device_count();
DeviceInfo device_info(int device = 0);
// Throws unless device 0 exists and is Hopper (sm_90): the kernels are built for sm_90a only.
void require_hopper();

void* dev_malloc(size_t bytes);  // throws Error naming the size and the free memory
void dev_free(void* p);          // nullptr is fine
void copy_h2d(void* dst, const void* src, size_t bytes, Stream s = nullptr);
void copy_d2h(void* dst, const void* src, size_t bytes, Stream s = nullptr);
void copy_d2d(void* dst, const void* src, size_t bytes, Stream s = nullptr);
void memset_async(void* dst, int byte, size_t bytes, Stream s = nullptr);

Stream stream_create();
void stream_destroy(Stream s);
void stream_sync(Stream s);
void device_sync();

// Throws Error if a kernel launched earlier failed asynchronously (call after a sync point).
void check_last_error(const char* what);

// DeviceArena: one cudaMalloc up front, then bump allocation (256-byte aligned), so that
// decode loops never call cudaMalloc. mark()/rewind() free everything allocated after a mark
// (per-step scratch); reset() frees everything. Not thread-safe: one arena per stream.
class DeviceArena {
 public:
  explicit DeviceArena(size_t capacity_bytes);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  static constexpr size_t kDefaultAlign = 256;  // cudaMalloc's own alignment; covers 16B vectors and TMA
  // Throws Error (requested, used, capacity) when the arena is full.
  void* alloc(size_t bytes, size_t align = kDefaultAlign);
  template <class T>
  T* alloc_n(size_t n) { return static_cast<T*>(alloc(n * sizeof(T))); }

  size_t mark() const { return used_; }
  void rewind(size_t mark);
  void reset() { used_ = 0; }

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }
  void* base() const { return base_; }

 private:
  void* base_ = nullptr;
  size_t capacity_ = 0, used_ = 0, peak_ = 0;
};

// CudaGraph: capture the kernels a stream issues (e.g. one decode step) once, then replay them
// with one launch: no per-kernel CPU launch cost, and the device runs the step back to back.
// Replays read whatever the captured pointers hold at replay time, so a decode loop keeps its
// buffers fixed (arena) and only rewrites their contents. Capture needs a non-default stream
// (stream_create()); kernels' one-time setup (smem attributes) must have run before capture,
// which one eager call of the step does. A second capture into the same object updates the
// executable graph in place when the topology is unchanged, else re-instantiates it.
class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  void begin_capture(Stream s);
  void end_capture(Stream s);
  void launch(Stream s);
  bool ready() const { return exec_ != nullptr; }

 private:
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
};

}  // namespace longctx::cuda

// infinitehip_attend_gpu.h: the attention of InfiniteHiP's rope=on steps on the GPU (the paper's
// StreamingLLM-style positions), the device twin of methods/run_cpu.h's attend_compacted_ref for
// one key set: the set's keys gathered from the un-rotated cache and rotated at 0..L-1
// (cuda::compact_kv), the rows' queries rotated at L - C .. L - 1, then the dense kernels over the
// L keys (causal; decode: the split-KV decode kernel with L read from the device, so a replayed
// CUDA graph follows the step's key count).
// Memory (IhipCompactAttention::bytes): the gathered K and V for `capacity` keys (a dense step
// gathers every key), the rotated queries of one chunk, the identity position list 0..capacity-1
// and the decode kernel's workspace.
// Tensors (bf16, device): k/v [>= n_kv, n_kv_head, head_dim] un-rotated, position = row;
// q/o [rows, n_head, head_dim]; keys int32 [L] sorted positions.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/runtime.h"
#include "methods/method.h"

namespace longctx {

struct IhipCompactRows {
  const void* q = nullptr;  // un-rotated rows
  void* o = nullptr;
  int64_t n_rows = 0;
  const int32_t* keys = nullptr;  // device [L]; ends with the rows' own positions
  int64_t n_keys = 0;             // L (host)
  const void* k = nullptr;
  const void* v = nullptr;
  const float* inv_freq = nullptr;  // device [head_dim / 2]
  float rope_factor = 1.f;
  float scale = 0.f;
};

// A decode row whose key count is on the device: keys [bound] (entries past *n_keys_dev are
// gathered and ignored), *n_keys_dev keys attended, the query rotated at *q_pos_dev.
struct IhipCompactDecode {
  const void* q = nullptr;
  void* o = nullptr;
  const int32_t* keys = nullptr;
  int64_t bound = 0;
  const int32_t* n_keys_dev = nullptr;
  const int32_t* q_pos_dev = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const float* inv_freq = nullptr;
  float rope_factor = 1.f;
  float scale = 0.f;
};

class IhipCompactAttention {
 public:
  static size_t bytes(const MethodContext& m, int64_t chunk, int64_t capacity);
  void allocate(const MethodContext& m, int64_t chunk, int64_t capacity, cuda::Stream s);
  void release();
  ~IhipCompactAttention() { release(); }
  const int32_t* iota() const { return iota_; }  // 0..capacity-1
  void attend_rows(const IhipCompactRows& r, cuda::Stream s);
  void attend_decode(const IhipCompactDecode& d, cuda::Stream s);

 private:
  MethodContext m_;
  int64_t chunk_ = 0, capacity_ = 0;
  char* buf_ = nullptr;
  void *kc_ = nullptr, *vc_ = nullptr, *q_rot_ = nullptr, *ws_ = nullptr;
  int32_t* iota_ = nullptr;
  size_t ws_bytes_ = 0;
};

}  // namespace longctx

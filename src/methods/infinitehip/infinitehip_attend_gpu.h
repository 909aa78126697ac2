// infinitehip_attend_gpu.h: the attention of InfiniteHiP's rope=on steps on the GPU (the paper's
// StreamingLLM-style positions), the device twin of methods/run_cpu.h's attend_compacted_ref for
// one key set: the set's keys gathered from the un-rotated cache and rotated at 0..L-1
// (cuda::compact_kv), the rows' queries rotated at L - C .. L - 1, then the dense kernels over the
// L keys (causal; decode: the split-KV decode kernel with L read from the device, so a replayed
// CUDA graph follows the step's key count).
// A sparse prefill chunk attends its 64-row blocks, each over its own key set (attend_blocks):
// one block's kernels fill a few SMs (64 rows x 4 query heads at d 256), so up to kLanes blocks run
// at once, each on its own stream with its own slice of the gather buffers (capacity / max_keys
// slices); the kernels and their inputs are those of attend_rows per block, so the outputs are
// the same bits. The lanes fork from and join the caller's stream with events (no host sync).
// The fp8 KV cache (--kv-cache fp8): a decode step's k / v are e4m3 rows (IhipCompactDecode::kv_fp8);
// compact_kv dequantises them (stored * scale, fp32) before it rotates K, into the same bf16
// gather buffers, so the dense decode kernel is the bf16 one. Prefill rows are always bf16 (the
// model stages them).
// Memory (IhipCompactAttention::bytes): the gathered K and V for `capacity` keys (a dense step
// gathers every key; the blocks' slices share them), the rotated queries of one chunk, the identity
// position list 0..capacity-1 and the decode kernel's workspace.
// Tensors (bf16, device): k/v [>= n_kv, n_kv_head, head_dim] un-rotated, position = row (decode:
// or e4m3, one byte an element);
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

// One 64-row block of a prefill chunk (rows row0 .. row0 + n_rows - 1 of IhipCompactRows' q / o)
// and its key set.
struct IhipCompactBlock {
  int64_t row0 = 0, n_rows = 0;
  const int32_t* keys = nullptr;  // device [n_keys]
  int64_t n_keys = 0;
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
  bool kv_fp8 = false;  // k / v are the fp8 cache's e4m3 rows: real = stored * k_scale / v_scale
  float k_scale = 1.f, v_scale = 1.f;
};

class IhipCompactAttention {
 public:
  static size_t bytes(const MethodContext& m, int64_t chunk, int64_t capacity);
  void allocate(const MethodContext& m, int64_t chunk, int64_t capacity, cuda::Stream s);
  void release();
  ~IhipCompactAttention() { release(); }
  const int32_t* iota() const { return iota_; }  // 0..capacity-1
  void attend_rows(const IhipCompactRows& r, cuda::Stream s);
  // Every block of a chunk (r's q / o / k / v / RoPE; r.keys, n_keys, n_rows unused), each block
  // at most max_keys keys. Stream-ordered like the other calls: s's later work waits for the blocks
  // (events; the host does not block), and the blocks wait for s's earlier work.
  void attend_blocks(const IhipCompactRows& r, const IhipCompactBlock* blocks, int64_t n_blocks, int64_t max_keys,
                     cuda::Stream s);
  // Blocks in flight at once: 8 blocks x 4 heads (gemma-3) is 32 CTAs of the 132 SMs, and the
  // gathers of 8 key sets of ~3.4K keys fit a 32K capacity.
  static constexpr int kLanes = 8;
  void attend_decode(const IhipCompactDecode& d, cuda::Stream s);

 private:
  // r's attention with the gathered K / V at kc / vc and the rotated queries at q_rot, on stream s.
  void attend_into(const IhipCompactRows& r, void* kc, void* vc, void* q_rot, cuda::Stream s);

  MethodContext m_;
  int64_t chunk_ = 0, capacity_ = 0;
  cuda::Stream lanes_[kLanes] = {};
  void* events_[kLanes + 1] = {};  // cudaEvent_t: each lane's join, then the fork (on s)
  char* buf_ = nullptr;
  void *kc_ = nullptr, *vc_ = nullptr, *q_rot_ = nullptr, *ws_ = nullptr;
  int32_t* iota_ = nullptr;
  size_t ws_bytes_ = 0;
};

}  // namespace longctx

// infinitehip_attend_gpu.cpp: see infinitehip_attend_gpu.h.
#include "methods/infinitehip/infinitehip_attend_gpu.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/compact_kv.h"
#include "kernels/cuda/ops.h"
#include "methods/gpu_carve.h"
#include "util/error.h"

namespace longctx {

namespace {

constexpr size_t kBf16 = 2;

cudaStream_t cs(cuda::Stream s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t ce(void* e) { return static_cast<cudaEvent_t>(e); }

struct Parts {
  size_t kc, vc, q_rot, iota, ws, ws_bytes, total;
};

Parts parts(const MethodContext& m, int64_t chunk, int64_t capacity) {
  Carve c;
  Parts p;
  const size_t kv_row = size_t(m.n_kv_head) * size_t(m.head_dim) * kBf16;
  p.kc = c.take(size_t(capacity) * kv_row);
  p.vc = c.take(size_t(capacity) * kv_row);
  p.q_rot = c.take(size_t(chunk) * size_t(m.n_head) * size_t(m.head_dim) * kBf16);
  p.iota = c.take(size_t(capacity) * 4);
  p.ws_bytes = cuda::decode_workspace_bytes(1, m.n_head, m.head_dim, capacity);
  p.ws = c.take(p.ws_bytes);
  p.total = c.off;
  return p;
}

}  // namespace

size_t IhipCompactAttention::bytes(const MethodContext& m, int64_t chunk, int64_t capacity) {
  return parts(m, chunk, capacity).total;
}

void IhipCompactAttention::allocate(const MethodContext& m, int64_t chunk, int64_t capacity, cuda::Stream s) {
  release();
  m_ = m;
  chunk_ = chunk;
  capacity_ = capacity;
  const Parts p = parts(m, chunk, capacity);
  buf_ = static_cast<char*>(cuda::dev_malloc(p.total));
  kc_ = buf_ + p.kc;
  vc_ = buf_ + p.vc;
  q_rot_ = buf_ + p.q_rot;
  iota_ = reinterpret_cast<int32_t*>(buf_ + p.iota);
  ws_ = buf_ + p.ws;
  ws_bytes_ = p.ws_bytes;
  for (auto& lane : lanes_) lane = cuda::stream_create();
  for (void*& e : events_) {
    cudaEvent_t ev = nullptr;
    LC_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "infinitehip compact attention events");
    e = ev;
  }
  std::vector<int32_t> id(static_cast<size_t>(capacity));
  std::iota(id.begin(), id.end(), 0);
  cuda::copy_h2d(iota_, id.data(), id.size() * 4, s);
  cuda::stream_sync(s);  // id leaves scope
  cuda::decode_workspace_init(ws_, ws_bytes_, s);
}

void IhipCompactAttention::release() {
  for (void*& e : events_) {
    if (e) (void)cudaEventDestroy(ce(e));  // a pending record completes first (the driver defers the free)
    e = nullptr;
  }
  for (auto& lane : lanes_) {
    if (lane) cuda::stream_destroy(lane);
    lane = nullptr;
  }
  cuda::dev_free(buf_);
  buf_ = nullptr;
}

void IhipCompactAttention::attend_rows(const IhipCompactRows& r, cuda::Stream s) {
  if (!buf_) fail("internal: infinitehip compact attention before allocate()");
  if (r.n_rows < 1 || r.n_rows > chunk_ || r.n_keys < r.n_rows || r.n_keys > capacity_)
    fail("internal: infinitehip compact attention of {} rows over {} keys (chunk {}, capacity {})", r.n_rows, r.n_keys,
         chunk_, capacity_);
  attend_into(r, kc_, vc_, q_rot_, s);
}

void IhipCompactAttention::attend_blocks(const IhipCompactRows& r, const IhipCompactBlock* blocks, int64_t n_blocks,
                                         int64_t max_keys, cuda::Stream s) {
  if (!buf_) fail("internal: infinitehip compact attention before allocate()");
  if (max_keys < 1 || max_keys > capacity_)
    fail("internal: infinitehip compact blocks of up to {} keys (capacity {})", max_keys, capacity_);
  const int n_lanes = int(std::min<int64_t>(kLanes, capacity_ / max_keys));
  const size_t kv_slice = size_t(max_keys) * size_t(m_.n_kv_head) * size_t(m_.head_dim) * kBf16;
  const size_t q_row = size_t(m_.n_head) * size_t(m_.head_dim) * kBf16;
  // The fork: the lanes start after s's work (the key sets, the queries), without the host waiting.
  LC_CUDA_CHECK(cudaEventRecord(ce(events_[kLanes]), cs(s)), "infinitehip attend_blocks fork");
  for (int l = 0; l < n_lanes; ++l)
    LC_CUDA_CHECK(cudaStreamWaitEvent(cs(lanes_[l]), ce(events_[kLanes]), 0), "infinitehip attend_blocks fork");
  for (int64_t i = 0; i < n_blocks; ++i) {
    const IhipCompactBlock& b = blocks[i];
    if (b.n_rows < 1 || b.row0 < 0 || b.row0 + b.n_rows > chunk_ || b.n_keys < b.n_rows || b.n_keys > max_keys)
      fail("internal: infinitehip compact block of rows {}+{} over {} keys (chunk {}, max {})", b.row0, b.n_rows,
           b.n_keys, chunk_, max_keys);
    const int lane = int(i % n_lanes);
    IhipCompactRows rows = r;
    rows.q = static_cast<const char*>(r.q) + size_t(b.row0) * q_row;
    rows.o = static_cast<char*>(r.o) + size_t(b.row0) * q_row;
    rows.n_rows = b.n_rows;
    rows.keys = b.keys;
    rows.n_keys = b.n_keys;
    // lane l's K / V slice; the block's own rows of the rotated-query buffer (blocks never overlap)
    attend_into(rows, static_cast<char*>(kc_) + size_t(lane) * kv_slice, static_cast<char*>(vc_) + size_t(lane) * kv_slice,
                static_cast<char*>(q_rot_) + size_t(b.row0) * q_row, lanes_[lane]);
  }
  // The join: s's later work (the next layer's gathers into these slices and its key sets into the
  // method's buffer, the output's readers) waits for every lane's blocks, on the device.
  for (int l = 0; l < n_lanes; ++l) {
    LC_CUDA_CHECK(cudaEventRecord(ce(events_[l]), cs(lanes_[l])), "infinitehip attend_blocks join");
    LC_CUDA_CHECK(cudaStreamWaitEvent(cs(s), ce(events_[l]), 0), "infinitehip attend_blocks join");
  }
}

void IhipCompactAttention::attend_into(const IhipCompactRows& r, void* kc, void* vc, void* q_rot, cuda::Stream s) {
  cuda::compact_kv({.k_pool = r.k, .v_pool = r.v, .slots = iota_, .keys = r.keys, .n_keys = r.n_keys, .k_out = kc,
                    .v_out = vc, .inv_freq = r.inv_freq, .attn_factor = r.rope_factor, .n_kv_head = m_.n_kv_head,
                    .head_dim = m_.head_dim},
                   s);
  const size_t q_bytes = size_t(r.n_rows) * size_t(m_.n_head) * size_t(m_.head_dim) * kBf16;
  cuda::copy_d2d(q_rot, r.q, q_bytes, s);
  cuda::RopeParams rp;
  rp.q = q_rot;
  rp.n_q_heads = m_.n_head;
  rp.head_dim = m_.head_dim;
  rp.n_tokens = r.n_rows;
  rp.pos0 = r.n_keys - r.n_rows;
  rp.inv_freq = r.inv_freq;
  rp.attn_factor = r.rope_factor;
  cuda::rope(rp, s);
  cuda::PrefillParams p;
  p.q = q_rot;
  p.k = kc;
  p.v = vc;
  p.o = r.o;
  p.n_q = r.n_rows;
  p.n_kv = r.n_keys;
  p.n_head = m_.n_head;
  p.n_kv_head = m_.n_kv_head;
  p.head_dim = m_.head_dim;
  p.q_pos0 = r.n_keys - r.n_rows;
  p.scale = r.scale;
  p.causal = true;
  cuda::attention_prefill(p, s);
}

void IhipCompactAttention::attend_decode(const IhipCompactDecode& d, cuda::Stream s) {
  if (!buf_) fail("internal: infinitehip compact attention before allocate()");
  if (d.bound < 1 || d.bound > capacity_)
    fail("internal: infinitehip compact decode over {} keys (capacity {})", d.bound, capacity_);
  cuda::compact_kv({.k_pool = d.k, .v_pool = d.v, .slots = iota_, .keys = d.keys, .n_keys = d.bound, .k_out = kc_,
                    .v_out = vc_, .inv_freq = d.inv_freq, .attn_factor = d.rope_factor, .n_kv_head = m_.n_kv_head,
                    .head_dim = m_.head_dim, .fp8 = d.kv_fp8, .k_scale = d.k_scale, .v_scale = d.v_scale},
                   s);
  cuda::copy_d2d(q_rot_, d.q, size_t(m_.n_head) * size_t(m_.head_dim) * kBf16, s);
  cuda::RopeParams rp;
  rp.q = q_rot_;
  rp.n_q_heads = m_.n_head;
  rp.head_dim = m_.head_dim;
  rp.n_tokens = 1;
  rp.positions = d.q_pos_dev;
  rp.inv_freq = d.inv_freq;
  rp.attn_factor = d.rope_factor;
  cuda::rope(rp, s);
  cuda::DecodeParams p;
  p.q = q_rot_;
  p.k = kc_;
  p.v = vc_;
  p.o = d.o;
  p.n_seq = 1;
  p.n_kv = d.bound;  // the split plan's bound; the keys attended are *n_keys_dev
  p.kv_lens = d.n_keys_dev;
  p.n_head = m_.n_head;
  p.n_kv_head = m_.n_kv_head;
  p.head_dim = m_.head_dim;
  p.scale = d.scale;
  p.workspace = ws_;
  p.workspace_bytes = ws_bytes_;
  cuda::attention_decode(p, s);
}

}  // namespace longctx

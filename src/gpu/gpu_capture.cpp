// gpu_capture.cpp: GpuTransformer::capture_attention (declared in gpu_transformer.h), the GPU
// side of Engine::capture_attention, which the MInference pattern search (methods/minference/pattern_search.h)
// and attention-fidelity evaluation read each layer's Q/K/V from.
//
// How: a layer-major dense prefill, like the fp8 cache's forward_layer_major: the whole sample's
// residual stream xs [T, n_embd] stays on the GPU, and for each layer every chunk runs layer()
// against one layer's K/V [T, n_kv_head*head_dim] (bf16), positions 0..T-1. After each chunk
// its post-RoPE Q rows [n, n_head*head_dim] (the arena's q buffer, left intact by the rest of the
// layer) go to the host; after the layer's last chunk its K and V follow, and the observer gets
// all three as fp32 (the CPU capture's contract: one call per layer, all T rows). The
// attention is dense whatever GpuOptions::attn says (the engine's capture is a dense prefill),
// by switching method_ to dense for the call. The buffers are StageLayout's (memory_plan.h: the
// same K, V and x blocks the layer-major prefill uses), sized for T and checked against the
// free memory (after freeing the KV cache) before anything runs; so is the decode workspace a
// last 1-token chunk needs (layer() runs the decode kernel for a single query row).
// Run: longctx search-patterns --device cuda ... (methods/minference/search_cli.cpp), or test_gpu
// --gtest_filter='*Capture*' (tests/gpu/test_gpu_search.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>

#include "gpu/gpu_transformer.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/ops.h"
#include "util/error.h"
#include "util/half.h"
#include "util/thread_pool.h"

namespace longctx::gpu {

namespace {

constexpr size_t kBf16 = 2;

// bf16 rows on the device -> fp32 on the host (dst), through the host staging buffer tmp.
void download_f32(const void* src, size_t n, std::vector<uint16_t>& tmp, float* dst, cuda::Stream s) {
  tmp.resize(n);
  cuda::copy_d2h(tmp.data(), src, n * kBf16, s);
  cuda::stream_sync(s);
  constexpr int64_t kGrain = 1 << 16;
  global_pool().parallel_for(int64_t((n + kGrain - 1) / kGrain), [&](int64_t b0, int64_t b1) {
    for (size_t i = size_t(b0 * kGrain); i < std::min(n, size_t(b1 * kGrain)); ++i) dst[i] = bf16_to_f32(tmp[i]);
  });
}

}  // namespace

void GpuTransformer::capture_attention(std::span<const int32_t> tokens, const AttnObserver& observer) {
  const int64_t T = int64_t(tokens.size()), C = layout_.chunk;
  if (T == 0) fail("capture_attention: no tokens");
  for (int32_t id : tokens)
    if (id < 0 || id >= cfg_.vocab_size) fail("token id {} is outside the vocabulary (size {})", id, cfg_.vocab_size);
  const int64_t E = cfg_.n_embd, Q = int64_t(cfg_.n_head) * cfg_.head_dim;
  const int64_t KV = int64_t(cfg_.n_kv_head) * cfg_.head_dim;

  // No sequence survives a capture: the KV cache's memory goes to the capture's buffers.
  if (external_sequences() > 0)
    fail("capture_attention frees the GPU KV pool, but {} sequences hold pages in it; free them first",
         external_sequences());
  if (seq_ != &own_) fail("capture_attention runs on the model's own sequence; attach(nullptr) first");
  free_kv();
  own_.len = 0;
  own_.cap_req = 0;  // forward() now fails until reset()
  const StageLayout sl = stage_layout(cfg_, T, KvCacheType::fp8);  // bf16 K, V [T, KV] and x [T, E]
  const size_t ws_bytes = decode_ws_bytes(cfg_, T);  // a 1-token chunk runs the decode kernel
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    fail("capture_attention: cannot query free GPU memory (cudaMemGetInfo failed)");
  }
  if (sl.total + ws_bytes + kReserveBytes > free_b)
    fail("capturing the attention of {} tokens on the GPU needs {} (residual stream {}, one layer's K and V {}, "
         "decode workspace {}, plus a {} reserve) but '{}' has {} free; use a shorter sample (--sample-tokens) or "
         "--device cpu",
         T, gib(sl.total + ws_bytes + kReserveBytes), gib(sl.total - sl.x), gib(sl.x), gib(ws_bytes),
         gib(kReserveBytes), device_name_, gib(free_b));
  decode_ws_ = cuda::dev_malloc(ws_bytes);  // a member as reset() makes it: free_kv() frees it
  decode_ws_bytes_ = ws_bytes;
  cuda::decode_workspace_init(decode_ws_, decode_ws_bytes_, stream_);
  const std::unique_ptr<void, void (*)(void*)> block(cuda::dev_malloc(sl.total), cuda::dev_free);
  char* base = static_cast<char*>(block.get());
  void* xs = base + sl.x;  // [T, E]
  void* ks = base + sl.k;  // [T, KV]
  void* vs = base + sl.v;  // [T, KV]

  // Dense attention for the capture, the method restored afterwards (also on an error).
  struct RestoreAttn {
    std::shared_ptr<const AttentionMethod>& method;
    std::shared_ptr<const AttentionMethod> saved;
    ~RestoreAttn() { method = std::move(saved); }
  } restore{method_, method_};
  method_ = make_attention_method("dense", method_ctx_);

  // Host fp32 copies handed to the observer, and the bf16 staging of one download.
  std::vector<float> q_host(size_t(T * Q)), k_host(size_t(T * KV)), v_host(size_t(T * KV));
  std::vector<uint16_t> tmp;
  int32_t* d_ids = static_cast<int32_t*>(act(layout_.ids));
  for (int64_t c0 = 0; c0 < T; c0 += C) {
    const int64_t n = std::min(C, T - c0);
    cuda::copy_h2d(d_ids, tokens.data() + c0, size_t(n) * sizeof(int32_t), stream_);
    embed(d_ids, static_cast<char*>(xs) + size_t(c0 * E) * kBf16, n);
  }
  own_.broken = true;  // until reset(), as after any interrupted forward
  for (int l = 0; l < cfg_.n_layer; ++l) {
    events_used_ = 0;
    for (int64_t c0 = 0; c0 < T; c0 += C) {
      const int64_t n = std::min(C, T - c0);
      layer({.l = l, .T = n, .pos0 = c0, .x = static_cast<char*>(xs) + size_t(c0 * E) * kBf16, .k_all = ks, .v_all = vs});
      download_f32(act(layout_.q), size_t(n * Q), tmp, q_host.data() + c0 * Q, stream_);  // this chunk's Q rows
    }
    if (events_used_ > 0) read_attention_times();
    download_f32(ks, size_t(T * KV), tmp, k_host.data(), stream_);
    download_f32(vs, size_t(T * KV), tmp, v_host.data(), stream_);
    cuda::check_last_error("GPU attention capture");
    if (observer)
      observer({l, T, cfg_.n_head, cfg_.n_kv_head, cfg_.head_dim, q_host.data(), k_host.data(), v_host.data()});
  }
  own_.broken = false;  // nothing half-done: forward() asks for reset() (capacity 0) instead
  note_memory();
}

}  // namespace longctx::gpu

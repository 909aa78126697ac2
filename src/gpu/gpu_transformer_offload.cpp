// gpu_transformer_offload.cpp: GpuTransformer's KV offload hooks (gpu/gpu_offload.h): what the
// options must be, the budget a sequence is planned with, and the allocation at reset(). The
// prefill and decode steps call GpuOffload from gpu_transformer.cpp (host_layer(l) branches).
#include <cuda_runtime.h>

#include "gpu/gpu_transformer.h"
#include "kernels/cuda/attention.h"
#include "kv/kv_spec.h"
#include "kv/offload_spec.h"
#include "util/error.h"

namespace longctx::gpu {

void GpuTransformer::check_offload_options() const {
  if (!gpu_method_ || !gpu_method_->decodes() || gpu_method_->offload_line_tokens() <= 0)
    fail("--kv-offload needs a sparse decode method that reads through the offload caches: --attn hip (or "
         "'prefill:X;decode:hip'); '{}' decodes {}",
         attn_spec_, gpu_method_ && gpu_method_->decodes() ? "without them" : "dense (every key, every step)");
  if (offload_opts_.keys_slots < 1 || offload_opts_.kv_slots < 1)
    fail("--kv-offload: {} keys-cache and {} K/V-cache lines per head (each must be at least 1)",
         offload_opts_.keys_slots, offload_opts_.kv_slots);
}

bool GpuTransformer::host_residual() const {
  return offload_opts_.on && offload_opts_.host_residual && !prompt_wide_method();
}

OffloadBudget GpuTransformer::offload_budget(int64_t capacity) const {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    fail("cannot query free GPU memory (cudaMemGetInfo failed)");
  }
  OffloadBudget b;
  b.capacity = capacity;
  b.line_tokens = gpu_method_->offload_line_tokens();
  // What reset() frees before it allocates counts as free (the held sequence's blocks and buffers).
  b.gpu_free = free_b + held_kv_bytes();
  b.elem = kv_type_ == KvCacheType::fp8 ? KvElem::fp8_e4m3 : KvElem::bf16;
  // bf16: the residual stream (plan_offload adds one layer's K/V when a layer goes to the host);
  // fp8: every layer stages its K/V in bf16 (the fp8 cache's layer-major prefill). The residual
  // stream: two chunks on the GPU and the whole prompt's in pinned host memory, or all on the GPU.
  const int64_t host_chunk = host_residual() ? layout_.chunk : 0;
  const StageLayout sl = stage_layout(cfg_, capacity, kv_type_, true, host_chunk);
  b.gpu_fixed = sl.total + decode_ws_bytes(cfg_, capacity) + sparse_bytes(capacity);
  b.gpu_residual = sl.x_bytes;
  b.host_fixed = host_chunk ? PrefillResidual::host_bytes({.rows = capacity, .n_embd = cfg_.n_embd}) : 0;
  // what reset() frees before it allocates counts as available (the held tier and stream)
  b.host_free = kv::host_available_bytes() +
                (offload_ ? offload_->plan().tier_sizes.host_bytes + int64_t(offload_->plan().host_residual_bytes) : 0);
  b.device_name = device_name_;
  b.decodes_dense = [this, capacity](int l) {
    return !sparse_step({.layer = l, .phase = Phase::decode, .n_q = 1, .q_pos0 = capacity - 1, .n_kv = capacity});
  };
  return b;
}

namespace {
// Rows held for a sequence of `capacity` tokens: whole pages, as the pool would (the decode step's
// split plan depends on the rows: the same rows give the same launches as offload off).
int64_t offload_rows(int64_t capacity) { return kv::pages_for_tokens(capacity, kKvPageTokens) * kKvPageTokens; }
}  // namespace

std::string GpuTransformer::offload_fit_problem(int64_t capacity) const {
  return offload_plan_problem(cfg_, offload_opts_, offload_budget(offload_rows(capacity)));
}

void GpuTransformer::reset_offload(int64_t capacity_asked) {
  const int64_t capacity = offload_rows(capacity_asked);
  const OffloadPlan* held = offload_plan();
  const bool reuse = held && held->capacity == capacity;
  if (!reuse) {
    const OffloadPlan plan = plan_offload(cfg_, offload_opts_, offload_budget(capacity));  // Error: both budgets
    free_kv();
    try {
      offload_ = std::make_unique<GpuOffload>(cfg_, plan);
      kv_bytes_ = plan.hbm_bytes + size_t(plan.tier_sizes.gpu_bytes);
      // one layer's K/V staged in bf16 (fp8: always; bf16: when a layer is on the host) + the residual stream
      const bool stage_kv = kv_type_ == KvCacheType::fp8 || plan.host_layers > 0;
      const int64_t host_chunk = host_residual() ? layout_.chunk : 0;
      stage_layout_ =
          stage_layout(cfg_, capacity, stage_kv ? KvCacheType::fp8 : KvCacheType::bf16, true, host_chunk);
      stage_ = cuda::dev_malloc(stage_layout_.total);
      if (host_chunk)
        residual_ = std::make_unique<PrefillResidual>(
            PrefillResidualShape{.rows = capacity, .n_embd = cfg_.n_embd, .chunk = host_chunk},
            static_cast<char*>(stage_) + stage_layout_.x, true, stream_);
      decode_ws_bytes_ = decode_ws_bytes(cfg_, capacity);
      decode_ws_ = cuda::dev_malloc(decode_ws_bytes_);
      cuda::decode_workspace_init(decode_ws_, decode_ws_bytes_, stream_);
      if (const size_t sb = sparse_bytes(capacity); sb > 0) {
        gpu_method_->allocate(method_shape(capacity), stream_);
        sparse_bytes_ = sb;
      }
    } catch (...) {
      free_kv();
      throw;
    }
  }
  offload_->reset(stream_);
  k_scale_.assign(size_t(cfg_.n_layer), 0.f);  // fp8: a new sequence; its first prefill sets the scales
  v_scale_.assign(size_t(cfg_.n_layer), 0.f);
  offload_stats_ = {};
  const OffloadPlan& p = offload_->plan();
  offload_stats_.on = true;
  offload_stats_.host_layers = p.host_layers;
  offload_stats_.hbm_layers = cfg_.n_layer - p.host_layers;
  offload_stats_.host_bytes = size_t(p.tier_sizes.host_bytes);
  offload_stats_.cache_bytes = size_t(p.tier_sizes.gpu_bytes);
  offload_stats_.hbm_kv_bytes = p.hbm_bytes;
  offload_stats_.stage_bytes = stage_layout_.total;
  offload_stats_.page_table = kv::page_table_name(p.page_table);
  offload_stats_.residual_host_bytes = p.host_residual_bytes;
  publish_offload_stats(offload_stats_);
  own_.id = 0;  // the one sequence (no pool ids with offload)
  own_.len = 0;
  own_.cap_req = capacity_asked;
  own_.rows = capacity;
  own_.base_row = 0;
  invalidate_graphs();  // a captured step holds the previous sequence's addresses
}

}  // namespace longctx::gpu

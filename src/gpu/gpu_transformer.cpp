// gpu_transformer.cpp: see gpu_transformer.h.
#include "gpu/gpu_transformer.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "gpu/attn_tiles_options.h"
#include "gpu/gpu_ops.h"
#include "gpu/kv_fp8.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/kv_offload.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/sparse_attention.h"
#include "kernels/cuda/sparse_decode.h"
#include "kv/cuda/device_kv_cache.h"
#include "util/error.h"

namespace longctx::gpu {

namespace {

constexpr size_t kBf16 = 2;
constexpr uint64_t kSyntheticQkSeed = 5;  // benchmarks: the synthetic Q/K constants (any fixed value)
constexpr int kMaxDecodeGroup = 16;  // attention_decode: one mma row tile holds a GQA group

// Decode step buffer: int32 {token id, position, KV length, unused}, then the K and V rows.
constexpr int kStepInts = 4;
constexpr int kStepId = 0, kStepPos = 1, kStepKvLen = 2;
constexpr int kStepZero = 3;  // always 0: the block table {0} of the sparse decode's one-page view

bool graph_disabled_by_env() {
  const char* e = std::getenv("LONGCTX_NO_CUDA_GRAPH");
  return e && *e && std::string(e) != "0";
}

std::mutex g_stats_mu;
GpuMemoryStats g_stats;
GpuPrefillStats g_prefill;

cudaEvent_t ev(void* e) { return static_cast<cudaEvent_t>(e); }

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail("GPU forward: {} failed: {}", what, cudaGetErrorString(err));
}

char* at(void* base, size_t elems) { return static_cast<char*>(base) + elems * kBf16; }

}  // namespace

std::string gpu_model_problem(const ModelConfig& c) {
  // The block features of every architecture the CPU runs are on the GPU too (gpu_block.cpp);
  // what remains are the kernels' shapes.
  if (c.activation != "silu" && c.activation != "gelu_tanh")
    return fmt::format("the GPU path runs SiLU or GELU-tanh MLPs; {} has '{}'", c.name, c.activation);
  if (c.head_dim != 16 && c.head_dim != 32 && c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256)
    return fmt::format("the GPU path supports head dim 64, 128 or 256 (16 and 32: test models); {} has {}", c.name,
                       c.head_dim);
  if (c.n_kv_head <= 0 || c.n_head % c.n_kv_head != 0 || c.n_head / c.n_kv_head > kMaxDecodeGroup)
    return fmt::format("the GPU path supports GQA groups of at most {} query heads per KV head; {} has {}/{}",
                       kMaxDecodeGroup, c.name, c.n_head, c.n_kv_head);
  if (c.n_embd % 8 != 0 || c.n_ff % 8 != 0)
    return fmt::format("the GPU path needs hidden and FFN sizes that are multiples of 8; {} has {} and {}", c.name,
                       c.n_embd, c.n_ff);
  return "";
}

AttnTiles parse_attn_tiles(const std::string& s) {
  if (s == "bf16") return AttnTiles::bf16;
  if (s == "fp8") return AttnTiles::fp8;
  fail("unknown attention tile type '{}' (known: bf16, fp8)", s);
}

std::string attn_tiles_problem(const GpuOptions& opts, const AttentionMethod& m, const GpuMethod* gm) {
  if (opts.attn_tiles == AttnTiles::bf16) return "";
  if (std::string p = attn_tiles_cache_problem(opts.kv_cache == KvCacheType::fp8, opts.kv_offload.on); !p.empty())
    return p;
  if (m.needs().keys == KeyLayout::pre_rope)
    return fmt::format("--attn {} keeps pre-RoPE keys and attends every step itself; --attn-tiles fp8 is for the "
                       "sparse prefill kernel (MInference, A-shape, HiP): drop it",
                       opts.attn);
  if (!gm)
    return fmt::format("--attn {} has no sparse prefill step, so --attn-tiles fp8 would change nothing (dense steps "
                       "read bf16 tiles): drop it, or pick a sparse method",
                       opts.attn);
  return "";
}

GpuMemoryStats last_gpu_memory_stats() {
  std::lock_guard<std::mutex> lk(g_stats_mu);
  return g_stats;
}

GpuPrefillStats last_gpu_prefill_stats() {
  std::lock_guard<std::mutex> lk(g_stats_mu);
  return g_prefill;
}

GpuTransformer::GpuTransformer(ModelConfig cfg, DeviceWeights w, const GpuOptions& opts)
    : cfg_(std::move(cfg)), w_(std::move(w)) {
  if (const std::string p = gpu_model_problem(cfg_); !p.empty()) fail("{} (use --device cpu)", p);
  if (opts.chunk <= 0) fail("GPU prefill chunk must be positive (got {})", opts.chunk);
  kv_type_ = opts.kv_cache;
  kv_elem_ = kv_type_ == KvCacheType::fp8 ? 1 : kBf16;
  method_ctx_ = MethodContext{cfg_.n_layer, cfg_.n_head, cfg_.n_kv_head, cfg_.head_dim, cfg_.name};
  method_ = make_attention_method(opts.attn, method_ctx_);
  gpu_method_ = make_gpu_method(*method_, method_ctx_);
  if (kv_type_ == KvCacheType::fp8 && cfg_.head_dim < 64)
    fail("--kv-cache fp8 needs head dim 64 or more; {} has {}", cfg_.name, cfg_.head_dim);
  if (const std::string p = attn_tiles_problem(opts, *method_, gpu_method_.get()); !p.empty()) fail("{}", p);
  attn_tiles_ = opts.attn_tiles;
  attn_spec_ = opts.attn;
  offload_opts_ = opts.kv_offload;
  if (offload_opts_.on) check_offload_options();
  layer_major_ = kv_type_ == KvCacheType::fp8 || prompt_wide_method() || offload_opts_.on;
  stats_.attn = attn_spec_;
  layout_ = arena_layout(cfg_, opts.chunk);
  device_name_ = cuda::device_info(0).name;
  stream_ = cuda::stream_create();
  arena_ = std::make_unique<cuda::DeviceArena>(layout_.total);
  arena_->alloc(layout_.total);  // the layout's offsets index into this one block
  gemm_ = std::make_unique<cuda::Gemm>(act(layout_.gemm_ws), cuda::kGemmWorkspaceBytes);
  if (opts.synthetic_qk) {
    if (cfg_.head_dim != 128) fail("synthetic Q/K needs head_dim 128 (model has {})", cfg_.head_dim);
    synthetic_qk_ = std::make_unique<cuda::StructuredQk>(cfg_.n_head, cfg_.n_kv_head, kSyntheticQkSeed);
  }
  if (pre_rope()) check_pre_rope();
  if (kv_type_ == KvCacheType::fp8 && gpu_method_ && gpu_method_->decodes() && !gpu_method_->decode_reads_fp8())
    // A pre-RoPE method attends every step itself, so it has no prefill-only form to offer.
    fail("--attn {}: its GPU decode reads bf16 keys; drop --kv-cache fp8{}", opts.attn,
         pre_rope() ? "" : ", or make only its prefill sparse (--attn 'prefill:...')");
  // attend() takes host lengths (GpuAttendStep), so a pre-RoPE method decodes eagerly whatever it
  // says; TokenSelect's own reasons: tokenselect_engine_gpu.h.
  eager_decode_ = gpu_method_ && !gpu_method_->decode_graph_safe();
  const size_t kv_row = size_t(cfg_.n_kv_head) * size_t(cfg_.head_dim) * kBf16;
  step_buf_ = cuda::dev_malloc(align_up(kStepInts * sizeof(int32_t)) + 2 * align_up(kv_row));
  if (kv_type_ == KvCacheType::fp8) amax_ = static_cast<float*>(cuda::dev_malloc(2 * sizeof(float)));
  batch_buf_ = cuda::dev_malloc(batch_buffer_bytes());
  batch_graphs_.resize(size_t(layout_.logit_rows + 1));
  graph_ = std::make_unique<cuda::CudaGraph>();
  use_graph_ = opts.cuda_graph && !graph_disabled_by_env();
  {
    std::lock_guard<std::mutex> lk(g_stats_mu);
    g_stats = {};
    g_stats.device = device_name_;
    g_prefill = stats_;
  }
  note_memory();
}

GpuTransformer::~GpuTransformer() {
  try {
    free_kv();
    for (AttnEvents& e : events_)
      for (void* x : {e.start, e.index_end, e.end})
        if (x) (void)cudaEventDestroy(ev(x));
    graph_.reset();
    batch_graphs_.clear();
    cuda::dev_free(batch_buf_);
    cuda::dev_free(amax_);
    cuda::dev_free(step_buf_);
    gemm_.reset();
    arena_.reset();
    cuda::stream_destroy(stream_);
  } catch (...) {  // a destructor must not throw (e.g. after a sticky device error)
  }
}

void GpuTransformer::free_kv() {
  if (gpu_method_) gpu_method_->release();
  sparse_bytes_ = 0;
  own_.id = -1;  // the pool goes: so do the own sequence's pages (others hold none: see callers)
  pool_.reset();
  offload_.reset();
  residual_.reset();
  cuda::dev_free(decode_ws_);
  cuda::dev_free(stage_);
  decode_ws_ = stage_ = nullptr;
  kv_bytes_ = decode_ws_bytes_ = 0;
  stage_layout_ = {};
  pool_plan_ = {};
  invalidate_graphs();  // the captured steps point into the freed blocks
}

void GpuTransformer::invalidate_graphs() {
  graph_tiles_ = -1;
  for (BatchGraph& g : batch_graphs_) g.tiles = -1;
}

void GpuTransformer::note_memory() {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  std::lock_guard<std::mutex> lk(g_stats_mu);
  g_stats.weights = w_.bytes();
  g_stats.kv = kv_bytes_;
  g_stats.arena = layout_.total;
  g_stats.decode_ws = decode_ws_bytes_;
  g_stats.stage = stage_layout_.total;
  g_stats.sparse = sparse_bytes_;
  g_stats.device_total = total_b;
  g_stats.device_used_peak = std::max(g_stats.device_used_peak, total_b - free_b);
}

std::string GpuTransformer::kv_fit_problem(int64_t capacity) const {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    return "cannot query free GPU memory (cudaMemGetInfo failed)";
  }
  if (offload_opts_.on) return offload_fit_problem(capacity);
  const int64_t caps[1] = {capacity};
  const SequencesPlan p = plan_sequences(caps, layout_.logit_rows);
  return gpu::sequences_fit_problem(cfg_, p, free_b + held_kv_bytes(), w_.bytes() + layout_.total, device_name_,
                                    sparse_bytes(p.max_capacity, p.step_rows), kv_type_, layer_major_);
}

void GpuTransformer::reset(int64_t capacity) {
  if (capacity <= 0) fail("KV cache capacity must be positive (got {})", capacity);
  if (seq_ != &own_) fail("reset() clears the model's own sequence; attach(nullptr) first");
  release_pages(own_);
  own_.broken = false;
  if (offload_opts_.on) {
    reset_offload(capacity);
  } else if (!try_take_pages(own_, capacity)) {  // the pool must change: only when no other sequence holds pages
    if (external_sequences() > 0)
      fail("the GPU KV pool has no run of free pages for {} tokens while {} other sequences hold pages ({} of {} "
           "pages free)",
           capacity, external_sequences(), pool_->free_pages(), pool_->spec().n_pages);
    const std::string problem = kv_fit_problem(capacity);
    if (!problem.empty()) fail("{}", problem);
    const int64_t caps[1] = {capacity};
    allocate_pool(plan_sequences(caps, layout_.logit_rows));
    if (!try_take_pages(own_, capacity)) fail("internal: a fresh KV pool has no room for {} tokens", capacity);
  }
  // LongRoPE picks its short or long factors by the context, as the CPU's reset (a no-op otherwise).
  if (w_.set_rope_context(capacity, stream_)) invalidate_graphs();
  if (gpu_method_) gpu_method_->start_sequence(stream_);
  stats_ = {};
  stats_.attn = attn_spec_;
  stats_.sparse_bytes = sparse_bytes_;
  {
    std::lock_guard<std::mutex> lk(g_stats_mu);
    g_prefill = stats_;
  }
  note_memory();
}

void* GpuTransformer::kv_cache_at(int l, int which) const {
  if (offload_) return offload_->rows(l, which);
  const size_t KV = size_t(cfg_.n_kv_head) * size_t(cfg_.head_dim);
  char* pool = static_cast<char*>(which ? pool_->v_pool(l) : pool_->k_pool(l));
  return pool + size_t(seq_->base_row) * KV * kv_elem_;
}

void GpuTransformer::forward(std::span<const int32_t> tokens, int64_t n_logits, std::vector<float>* logits,
                             const LayerProgressFn& progress) {
  const int64_t T = int64_t(tokens.size());
  if (T == 0) return;
  const int64_t n = logits ? std::clamp<int64_t>(n_logits, 0, T) : 0;
  if (logits) logits->resize(size_t(n * cfg_.vocab_size));
  forward_to(tokens, n, {.dst = logits && n ? logits->data() : nullptr, .first = T - n}, progress);
}

void GpuTransformer::forward(std::span<const int32_t> tokens, int64_t n_logits, const LogitsSink& sink,
                             const LayerProgressFn& progress) {
  forward_to(tokens, n_logits, {.sink = &sink}, progress);
}

void GpuTransformer::forward_to(std::span<const int32_t> tokens, int64_t n_logits, const LogitsOut& out,
                                const LayerProgressFn& progress) {
  const int64_t T = int64_t(tokens.size());
  if (T == 0) return;
  GpuSequence& sq = *seq_;
  if (sq.broken) fail("the GPU model was interrupted by an earlier error; reset() it before the next forward");
  const int64_t room = std::min(sq.cap_req, sq.rows);  // a growing sequence: its contiguous run
  if (sq.id < 0 || sq.len + T > room)
    fail("KV cache holds {} tokens; {} more at position {} do not fit", sq.id < 0 ? 0 : room, T, sq.len);
  const int64_t V = cfg_.vocab_size;
  for (int32_t id : tokens)
    if (id < 0 || id >= V) fail("token id {} is outside the vocabulary (size {})", id, V);
  n_logits = out.wanted() ? std::clamp<int64_t>(n_logits, 0, T) : 0;
  sq.broken = true;
  const int64_t first = T - n_logits;  // first token (index in `tokens`) whose logits are wanted
  // fp8: a step before any prefill (scales unset) runs as a 1-token layer-major prefill
  const bool scales_set = kv_type_ != KvCacheType::fp8 || k_scale_[0] > 0.f;
  if (T == 1 && scales_set) {
    float* dst = n_logits ? logits_target(out, 0, 1) : nullptr;
    decode_token(tokens[0], dst);
    if (dst) deliver_logits(out, 0, 1, dst);
    sq.broken = false;
    return;
  }
  if (layer_major()) {
    forward_layer_major(tokens, first, out, progress);
    sq.broken = false;
    note_memory();
    return;
  }
  for (int64_t c0 = 0; c0 < T; c0 += layout_.chunk) {
    const int64_t c1 = std::min(T, c0 + layout_.chunk);
    forward_chunk(tokens.data() + c0, c1 - c0, std::max<int64_t>(first - c0, 0), c0, out);
  }
  sq.broken = false;
  if (T > 1) note_memory();
}

void GpuTransformer::forward_chunk(const int32_t* ids, int64_t T, int64_t first_row, int64_t row0,
                                   const LogitsOut& out) {
  const int64_t pos0 = seq_->len;
  int32_t* d_ids = static_cast<int32_t*>(act(layout_.ids));
  cuda::copy_h2d(d_ids, ids, size_t(T) * sizeof(int32_t), stream_);
  embed(d_ids, act(layout_.x), T);
  events_used_ = 0;
  for (int l = 0; l < cfg_.n_layer; ++l)
    layer({.l = l, .T = T, .pos0 = pos0, .x = act(layout_.x), .k_all = kv_cache_at(l, 0), .v_all = kv_cache_at(l, 1)});
  if (events_used_ > 0) read_attention_times();
  seq_->len = pos0 + T;
  if (out.wanted() && first_row < T) {
    // Final norm and LM head for rows first_row..T-1 only, logit_rows at a time.
    const int64_t E = cfg_.n_embd;
    for (int64_t r0 = first_row; r0 < T; r0 += layout_.logit_rows) {
      const int64_t m = std::min(layout_.logit_rows, T - r0);
      emit_logits(at(act(layout_.x), size_t(r0 * E)), m, row0 + r0, out);
    }
  }
}

float* GpuTransformer::logits_target(const LogitsOut& out, int64_t row, int64_t m) {
  if (out.dst) return out.dst + (row - out.first) * int64_t(cfg_.vocab_size);
  logit_host_.resize(size_t(m * cfg_.vocab_size));
  return logit_host_.data();
}

void GpuTransformer::deliver_logits(const LogitsOut& out, int64_t row, int64_t m, const float* rows) {
  if (!out.dst) (*out.sink)(row, m, rows);
}

void GpuTransformer::emit_logits(const void* x_rows, int64_t m, int64_t row, const LogitsOut& out) {
  float* dst = logits_target(out, row, m);
  lm_head(x_rows, m, dst);
  deliver_logits(out, row, m, dst);
}

void GpuTransformer::forward_layer_major(std::span<const int32_t> tokens, int64_t first_row, const LogitsOut& out,
                                         const LayerProgressFn& progress) {
  if (!stage_) fail("internal: layer-major prefill with no staging buffer");
  const int64_t pos0 = seq_->len, T = int64_t(tokens.size()), C = layout_.chunk;
  const int64_t E = cfg_.n_embd, KV = int64_t(cfg_.n_kv_head) * cfg_.head_dim;
  char* stage = static_cast<char*>(stage_);
  // The residual stream of the whole prompt, [T, E]: in the staging block, or (KV offload) in host
  // memory, a chunk at a time in the staging block's two chunk buffers.
  PrefillResidual resident({.rows = T, .n_embd = E, .chunk = C}, stage + stage_layout_.x, false, stream_);
  PrefillResidual& xr = residual_ ? *residual_ : resident;
  const bool fp8 = kv_type_ == KvCacheType::fp8;  // else bf16: K/V straight into the cache
  // Embeddings, a chunk of ids at a time (the ids buffer holds one chunk).
  int32_t* d_ids = static_cast<int32_t*>(act(layout_.ids));
  xr.begin_pass(T, false);
  for (int64_t i = 0, c0 = 0; c0 < T; ++i, c0 += C) {
    const int64_t n = std::min(C, T - c0);
    cuda::copy_h2d(d_ids, tokens.data() + c0, size_t(n) * sizeof(int32_t), stream_);
    embed(d_ids, xr.chunk(i), n);
    xr.done(i);
  }
  xr.end_pass();
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const bool host = host_layer(l);  // KV offload: the layer's rows live in host memory
    const bool staged = fp8 || host;
    void* k_stage = staged ? stage + stage_layout_.k : kv_cache_at(l, 0);  // [pos0 + T, KV] bf16 keys of layer l
    void* v_stage = staged ? stage + stage_layout_.v : kv_cache_at(l, 1);  // values
    if (fp8 && pos0 > 0) {  // the rows of earlier calls, back to bf16
      kv_dequantize({kv_cache_at(l, 0), k_stage, pos0 * KV, k_scale_[size_t(l)]}, stream_);
      kv_dequantize({kv_cache_at(l, 1), v_stage, pos0 * KV, v_scale_[size_t(l)]}, stream_);
    }
    if (host && !fp8 && pos0 > 0) offload_->load(l, 0, pos0, k_stage, v_stage, stream_);  // fp8: dequantized above
    events_used_ = 0;
    const bool wide = !xr.on_host() && prompt_wide_lines(l, pos0, T);  // reads the whole stream
    if (wide) estimate_prompt_lines(l, pos0, T, xr.chunk(0), k_stage, v_stage);
    // fp8 tiles: the layer's rows in the cache (scales from all of them) before its first chunk
    // attends (the residual stream is resident: attn_tiles_problem refuses --kv-offload).
    const bool tiles8 = attn_tiles_ == AttnTiles::fp8;
    if (tiles8) {
      if (!wide) project_layer_kv(l, pos0, T, xr.chunk(0), k_stage, v_stage);
      store_layer_kv(l, pos0, T);
    }
    xr.begin_pass(T);
    for (int64_t i = 0, c0 = 0; c0 < T; ++i, c0 += C) {
      const int64_t n = std::min(C, T - c0);
      layer({.l = l, .T = n, .pos0 = pos0 + c0, .x = xr.chunk(i), .k_all = k_stage, .v_all = v_stage,
             .kv_ready = wide || tiles8});
      xr.done(i);
    }
    xr.end_pass();
    if (wide) gpu_method_->end_prompt();
    if (fp8 && !tiles8) store_layer_kv(l, pos0, T);
    // fp8: store_layer_kv quantized into the layer's rows (a host layer's: through the mapped pointer)
    if (host && !fp8) offload_->store(l, pos0, T, at(k_stage, size_t(pos0 * KV)), at(v_stage, size_t(pos0 * KV)), stream_);
    if (events_used_ > 0) read_attention_times();
    if (progress) progress(l + 1, cfg_.n_layer);
  }
  seq_->len = pos0 + T;
  for (int64_t r0 = first_row; out.wanted() && r0 < T; r0 += layout_.logit_rows) {
    const int64_t m = std::min(layout_.logit_rows, T - r0);
    emit_logits(xr.rows(r0, m), m, r0, out);
  }
  cuda::stream_sync(stream_);
  cuda::check_last_error("GPU layer-major prefill");
}

void GpuTransformer::store_layer_kv(int l, int64_t pos0, int64_t T) {
  const int64_t KV = int64_t(cfg_.n_kv_head) * cfg_.head_dim;
  char* stage = static_cast<char*>(stage_);
  void* k_new = at(stage + stage_layout_.k, size_t(pos0 * KV));  // [T, KV] bf16
  void* v_new = at(stage + stage_layout_.v, size_t(pos0 * KV));
  const size_t L = size_t(l);
  if (k_scale_[L] <= 0.f) {  // first prefill since reset(): the scales cover these rows' range
    check_cuda(cudaMemsetAsync(amax_, 0, 2 * sizeof(float), static_cast<cudaStream_t>(stream_)), "cudaMemsetAsync");
    kv_amax({k_new, T * KV, amax_}, stream_);
    kv_amax({v_new, T * KV, amax_ + 1}, stream_);
    float amax[2] = {0, 0};
    cuda::copy_d2h(amax, amax_, sizeof(amax), stream_);
    cuda::stream_sync(stream_);
    k_scale_[L] = fp8_scale_for(amax[0]);
    v_scale_[L] = fp8_scale_for(amax[1]);
    invalidate_graphs();  // captured steps hold the scales
  }
  // the cache is e4m3: one byte per element
  kv_quantize({k_new, static_cast<char*>(kv_cache_at(l, 0)) + size_t(pos0 * KV), T * KV, k_scale_[L]}, stream_);
  kv_quantize({v_new, static_cast<char*>(kv_cache_at(l, 1)) + size_t(pos0 * KV), T * KV, v_scale_[L]}, stream_);
}

void GpuTransformer::lm_head(const void* x_rows, int64_t m, float* out) {
  lm_head_device(x_rows, m);
  copy_logits(m, out);
}

void GpuTransformer::lm_head_device(const void* x_rows, int64_t m) {
  const int64_t E = cfg_.n_embd, V = cfg_.vocab_size;
  void* hr = act(layout_.h);  // [m, E]
  cuda::rmsnorm({x_rows, w_.out_norm(), hr, nullptr, nullptr, m, E, cfg_.rms_eps}, stream_);
  const int64_t ld = padded_vocab(V);  // fp32 [m, ld] on the device
  cuda::GemmParams gp{hr, w_.lm_head(), act(layout_.logits), m, V, E};
  gp.y_fp32 = true;  // fp32 logits: see kernels/cuda/gemm.h
  gp.ldy = ld;
  gemm_->run(gp, stream_);
}

void GpuTransformer::copy_logits(int64_t m, float* out) {
  const int64_t V = cfg_.vocab_size, ld = padded_vocab(V);
  if (ld == V) {
    cuda::copy_d2h(out, act(layout_.logits), size_t(m * V) * sizeof(float), stream_);
  } else {
    const cudaError_t err = cudaMemcpy2DAsync(out, size_t(V) * sizeof(float), act(layout_.logits), size_t(ld) * sizeof(float),
                                              size_t(V) * sizeof(float), size_t(m), cudaMemcpyDeviceToHost,
                                              static_cast<cudaStream_t>(stream_));
    if (err != cudaSuccess) fail("GPU forward: copying {} logit rows to the host failed: {}", m, cudaGetErrorString(err));
  }
  cuda::stream_sync(stream_);
  cuda::check_last_error("GPU forward (LM head)");
}

void GpuTransformer::decode_token(int32_t id, float* logits) {
  const int64_t pos = seq_->len;
  const int32_t step[kStepInts] = {id, int32_t(pos), int32_t(pos + 1), 0};
  cuda::copy_h2d(step_buf_, step, sizeof(step), stream_);  // pageable: the copy is done on return
  const bool with_logits = logits != nullptr;
  // The plan's key count: the KV length rounded up to whole tiles (same plan, kv_lens <= n_kv).
  const int64_t tiles = (pos + 1 + kDecodePlanKeys - 1) / kDecodePlanKeys;
  const int64_t plan_kv = std::min(tiles * kDecodePlanKeys, seq_->rows);
  bool replayed = false;
  // A method whose step changes shape at a length replays only tiles wholly past it.
  const bool tile_replayable = !gpu_method_ || (tiles - 1) * kDecodePlanKeys >= gpu_method_->decode_graph_min_kv();
  if (use_graph_ && !eager_decode_ && tile_replayable && with_logits && warmed_) {
    try {
      if (graph_tiles_ != tiles || graph_seq_ != seq_->id) {  // the step holds the sequence's rows
        graph_tiles_ = -1;
        graph_->begin_capture(stream_);
        try {
          decode_kernels(plan_kv, true);
        } catch (...) {
          cudaGraph_t g = nullptr;  // end the broken capture so the stream works again
          (void)cudaStreamEndCapture(static_cast<cudaStream_t>(stream_), &g);
          if (g) (void)cudaGraphDestroy(g);
          throw;
        }
        graph_->end_capture(stream_);
        graph_tiles_ = tiles;
        graph_seq_ = seq_->id;
        ++graph_captures_;
      }
      graph_->launch(stream_);
      replayed = true;
    } catch (const Error& e) {
      (void)cudaGetLastError();
      std::fprintf(stderr, "note: CUDA graph decode failed (%s); decoding eagerly from now on\n", e.what());
      use_graph_ = false;
    }
  }
  if (!replayed) {
    decode_kernels(plan_kv, with_logits);
    warmed_ = warmed_ || with_logits;
  }
  seq_->len = pos + 1;
  if (with_logits) copy_logits(1, logits);
  if (offload_) {  // the step's cache counters (a sync: the logits copy synchronised already)
    offload_->note_step(offload_stats_);
    publish_offload_stats(offload_stats_);
  }
}

void GpuTransformer::decode_kernels(int64_t plan_kv, bool with_logits) {
  int32_t* d_ids = static_cast<int32_t*>(step_buf_) + kStepId;
  embed(d_ids, act(layout_.x), 1);
  if (offload_ && offload_->tick()) cuda::kv_offload_begin_step(offload_->tick(), stream_);
  for (int l = 0; l < cfg_.n_layer; ++l) decode_layer(l, plan_kv);
  if (with_logits) lm_head_device(act(layout_.x), 1);
}

void GpuTransformer::decode_layer(int l, int64_t plan_kv) {
  const int64_t KV = int64_t(cfg_.n_kv_head) * cfg_.head_dim;
  const int32_t* d_pos = static_cast<const int32_t*>(step_buf_) + kStepPos;
  void* x = act(layout_.x);  // [1, E]
  void* q = act(layout_.q);  // [1, Q]
  void* o = act(layout_.o);  // [1, Q]
  void* k_row = static_cast<char*>(step_buf_) + align_up(kStepInts * sizeof(int32_t));  // [1, KV]
  void* v_row = static_cast<char*>(k_row) + align_up(size_t(KV) * kBf16);               // [1, KV]
  void* k_all = kv_cache_at(l, 0);  // [cap, n_kv_head, D] bf16 or e4m3
  void* v_all = kv_cache_at(l, 1);
  const bool fp8 = kv_type_ == KvCacheType::fp8;

  project({.l = l, .T = 1, .positions = d_pos, .x = x, .q = q, .k = k_row, .v = v_row});
  if (fp8)
    kv_append_fp8({k_row, v_row, k_all, v_all, d_pos, KV, seq_->rows}, k_scale_[size_t(l)], v_scale_[size_t(l)], stream_);
  else
    kv_append({k_row, v_row, k_all, v_all, d_pos, KV, seq_->rows}, stream_);  // a host layer: zero-copy write
  // KV offload: the new row through to the layer's resident cache lines before the step's reads.
  const KvOffloadLayer off = host_layer(l) ? offload_->caches(l) : KvOffloadLayer{};
  // (fp8: the quantized row exists in the host pools only; the append reads it back from there)
  if (host_layer(l))
    cuda::kv_offload_append(off, own_view(l, k_all, v_all), fp8 ? nullptr : k_row, fp8 ? nullptr : v_row, stream_);
  // The route's key count is plan_kv: the captured step serves up to plan_kv keys.
  if (pre_rope_layer(l)) {  // the length on the device, plan_kv its bound (a replay sees later lengths)
    attend_pre_rope(l, 1, seq_->len + 1, q, k_all, v_all, o, plan_kv, fp8);
  } else if (sparse_step({.layer = l, .phase = Phase::decode, .n_q = 1, .q_pos0 = plan_kv - 1, .n_kv = plan_kv})) {
    sparse_decode_attention(l, q, o, own_view(l, k_all, v_all), host_layer(l) ? &off : nullptr);
  } else {
    dense_decode_attention(l, plan_kv, q, o, k_all, v_all);  // a host layer: every key over PCIe
  }
  if (host_layer(l)) cuda::kv_offload_update(off, own_view(l, k_all, v_all), stream_);
  attn_out(l, o, x, 1);
  mlp(l, x, 1);
}

void GpuTransformer::dense_decode_attention(int l, int64_t plan_kv, const void* q, void* o, void* k_all, void* v_all) {
  const int32_t* d_kv_len = static_cast<const int32_t*>(step_buf_) + kStepKvLen;
  const bool fp8 = kv_type_ == KvCacheType::fp8;
  cuda::DecodeParams dp;
  dp.q = q;
  dp.k = k_all;
  dp.v = v_all;
  dp.o = o;
  dp.n_seq = 1;
  dp.n_kv = plan_kv;  // sizes the split plan; the keys attended are kv_lens[0]
  dp.kv_lens = d_kv_len;
  dp.n_head = cfg_.n_head;
  dp.n_kv_head = cfg_.n_kv_head;
  dp.head_dim = cfg_.head_dim;
  dp.scale = cfg_.score_scale();
  dp.window = window(l);
  dp.workspace = decode_ws_;
  dp.workspace_bytes = decode_ws_bytes_;
  if (fp8) {
    dp.kv_dtype = cuda::KvDtype::fp8_e4m3;
    dp.k_scale = k_scale_[size_t(l)];
    dp.v_scale = v_scale_[size_t(l)];
  }
  cuda::attention_decode(dp, stream_);
}

KvView GpuTransformer::own_view(int l, void* k_all, void* v_all) const {
  const bool fp8 = kv_type_ == KvCacheType::fp8;
  KvView kv;
  kv.k_pool = k_all;
  kv.v_pool = v_all;
  kv.elem = fp8 ? KvElem::fp8_e4m3 : KvElem::bf16;
  if (fp8) {
    kv.k_scale = k_scale_[size_t(l)];
    kv.v_scale = v_scale_[size_t(l)];
  }
  kv.block_table = static_cast<const int32_t*>(step_buf_) + kStepZero;
  kv.seq_lens = static_cast<const int32_t*>(step_buf_) + kStepKvLen;
  kv.n_seq = 1;
  kv.max_pages_per_seq = 1;
  kv.page_size = int(seq_->rows);
  kv.n_pages = 1;
  kv.n_kv_head = cfg_.n_kv_head;
  kv.head_dim = cfg_.head_dim;
  kv.on_device = true;
  return kv;
}

void GpuTransformer::sparse_decode_attention(int l, const void* q, void* o, const KvView& kv,
                                             const KvOffloadLayer* offload) {
  const GpuDecodeIndex gi =
      gpu_method_->build_decode({.layer = l, .kv = kv, .q = q, .offload_keys = offload ? offload->keys : KvOffloadCache{}},
                                stream_);
  cuda::SparseDecodeParams sp;
  sp.q = q;
  sp.o = o;
  sp.n_head = cfg_.n_head;
  sp.scale = cfg_.score_scale();
  sp.kv = kv;
  sp.index = gi.index;
  sp.max_keys_per_row = gi.max_keys_per_row;
  sp.workspace = gi.workspace;
  sp.workspace_bytes = gi.workspace_bytes;
  if (offload) sp.offload = offload->kv;
  cuda::sparse_decode(sp, stream_);
}

void GpuTransformer::layer(const LayerRun& r) {
  const int l = r.l;
  const int64_t T = r.T, pos0 = r.pos0;
  const int64_t D = cfg_.head_dim, KV = int64_t(cfg_.n_kv_head) * D;
  void* x = r.x;              // [T, E]
  void* q = act(layout_.q);   // [T, Q]
  void* o = act(layout_.o);   // [T, Q]
  void* k_all = r.k_all;      // [pos0 + T, n_kv_head, D] bf16
  void* v_all = r.v_all;
  void* k_new = at(k_all, size_t(pos0 * KV));  // this chunk's rows [T, KV]
  void* v_new = at(v_all, size_t(pos0 * KV));

  // Attention block (a prompt-wide MInference estimate made this layer's K/V already).
  project({.l = l, .T = T, .pos0 = pos0, .x = x, .q = q, .k = r.kv_ready ? nullptr : k_new,
           .v = r.kv_ready ? nullptr : v_new});
  if (pre_rope_layer(l)) {
    attend_pre_rope(l, T, pos0 + T, q, k_all, v_all, o);
  } else if (T == 1) {
    cuda::DecodeParams dp;
    dp.q = q;
    dp.k = k_all;
    dp.v = v_all;
    dp.o = o;
    dp.n_seq = 1;
    dp.n_kv = pos0 + 1;
    dp.n_head = cfg_.n_head;
    dp.n_kv_head = cfg_.n_kv_head;
    dp.head_dim = int(D);
    dp.scale = cfg_.score_scale();
    dp.window = window(l);
    dp.workspace = decode_ws_;
    dp.workspace_bytes = decode_ws_bytes_;
    cuda::attention_decode(dp, stream_);
  } else {
    prefill_attention(l, T, pos0, q, k_all, v_all, o);
  }
  attn_out(l, o, x, T);
  mlp(l, x, T);
}

}  // namespace longctx::gpu

namespace longctx::gpu {

bool GpuTransformer::prompt_wide_method() const {
  constexpr int64_t kAnyLength = int64_t(1) << 40;  // thresholds (dense_below) never exceed it
  for (int l = 0; l < cfg_.n_layer; ++l)
    if (method_layer(l) && method_->estimates_per_prompt(l, kAnyLength)) return true;
  return false;
}

bool GpuTransformer::sparse_step(const AttnStep& step) const {
  return gpu_method_ && method_layer(step.layer) && method_->route(step) == Route::sparse;
}

size_t GpuTransformer::sparse_bytes(int64_t capacity, int n_seq) const {
  return gpu_method_ ? gpu_method_->device_bytes(method_shape(capacity, n_seq)) : 0;
}

GpuShape GpuTransformer::method_shape(int64_t capacity, int n_seq) const {
  return {.model = method_ctx_, .chunk = layout_.chunk, .capacity = capacity, .n_seq = n_seq};
}

bool GpuTransformer::prompt_wide_lines(int l, int64_t pos0, int64_t T) const {
  if (!gpu_method_ || !sparse_bytes_ || !layer_major()) return false;
  // One chunk estimates from its own last rows anyway; the estimate's 64 query rows must fit the
  // chunk-sized Q buffer.
  if (T <= layout_.chunk || layout_.chunk < cuda::kSparseQBlock) return false;
  return method_layer(l) && method_->estimates_per_prompt(l, pos0 + T);
}

void GpuTransformer::project_layer_kv(int l, int64_t pos0, int64_t T, const void* xs, void* k_stage, void* v_stage) {
  const int64_t C = layout_.chunk, E = cfg_.n_embd, KV = int64_t(cfg_.n_kv_head) * cfg_.head_dim;
  for (int64_t c0 = 0; c0 < T; c0 += C) {
    const int64_t n = std::min(C, T - c0), p = pos0 + c0;
    project({.l = l, .T = n, .pos0 = p, .x = static_cast<const char*>(xs) + size_t(c0 * E) * kBf16, .q = nullptr,
             .k = at(k_stage, size_t(p * KV)), .v = at(v_stage, size_t(p * KV))});
  }
}

void GpuTransformer::estimate_prompt_lines(int l, int64_t pos0, int64_t T, void* xs, void* k_stage, void* v_stage) {
  const int64_t E = cfg_.n_embd;
  project_layer_kv(l, pos0, T, xs, k_stage, v_stage);  // every chunk's K/V of this layer, into the staging
  const int64_t R = cuda::kSparseQBlock;  // the prompt's last 64 queries (T > C >= 64)
  void* q = act(layout_.q);               // [R, n_head * head_dim]
  project({.l = l, .T = R, .pos0 = pos0 + T - R, .x = at(xs, size_t((T - R) * E)), .q = q, .k = nullptr,
           .v = nullptr});
  const AttnEvents& e = next_events();
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  check_cuda(cudaEventRecord(ev(e.start), s), "cudaEventRecord");
  gpu_method_->prepare_prompt({.layer = l, .q = q, .k = k_stage, .n_q = R, .q_pos0 = pos0 + T - R, .n_kv = pos0 + T,
                               .scale = cfg_.score_scale()},
                              stream_);
  check_cuda(cudaEventRecord(ev(e.index_end), s), "cudaEventRecord");
  check_cuda(cudaEventRecord(ev(e.end), s), "cudaEventRecord");
  ++stats_.prompt_estimates;
}

GpuTransformer::AttnEvents& GpuTransformer::next_events() {
  if (events_used_ == events_.size()) {
    AttnEvents e;
    for (void** x : {&e.start, &e.index_end, &e.end}) {
      cudaEvent_t h = nullptr;
      check_cuda(cudaEventCreate(&h), "cudaEventCreate");
      *x = h;
    }
    events_.push_back(e);
  }
  return events_[events_used_++];
}

void GpuTransformer::prefill_attention(int l, int64_t T, int64_t pos0, void* q, void* k_all, void* v_all, void* o) {
  const AttnEvents& e = next_events();
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  const int64_t n_kv = pos0 + T;
  // The chunk's tensors and shape, the same for the dense and the sparse kernel's params.
  auto set_shape = [&](auto& p) {
    p.q = q;
    p.k = k_all;
    p.v = v_all;
    p.o = o;
    p.n_q = T;
    p.n_kv = n_kv;
    p.n_head = cfg_.n_head;
    p.n_kv_head = cfg_.n_kv_head;
    p.head_dim = cfg_.head_dim;
    p.q_pos0 = pos0;
    p.scale = cfg_.score_scale();
    p.causal = true;
  };
  check_cuda(cudaEventRecord(ev(e.start), s), "cudaEventRecord");
  const AttnStep step{.layer = l, .phase = Phase::prefill, .n_q = T, .q_pos0 = pos0, .n_kv = n_kv};
  if (!sparse_step(step)) {
    ++stats_.dense_calls;
    check_cuda(cudaEventRecord(ev(e.index_end), s), "cudaEventRecord");
    cuda::PrefillParams pp;
    set_shape(pp);
    pp.window = window(l);
    cuda::attention_prefill(pp, stream_);
  } else {
    ++stats_.sparse_calls;
    cuda::SparseAttnParams sp;
    set_shape(sp);
    // fp8 tiles: the layer's e4m3 rows [rows, n_kv_head, head_dim] at the sequence's base row,
    // quantized before its first chunk; the index builder gets the same keys (HiP scores them).
    const bool tiles8 = attn_tiles_ == AttnTiles::fp8;
    void* k8 = tiles8 ? kv_cache_at(l, 0) : nullptr;
    const GpuIndex gi = gpu_method_->build_prefill({.layer = l, .q = q, .k = k_all, .n_q = T, .q_pos0 = pos0, .n_kv = n_kv,
                                                    .scale = cfg_.score_scale(), .k_fp8 = k8},
                                                   stream_);
    sp.index = gi.index;
    sp.workspace = gi.workspace;
    sp.workspace_bytes = gi.workspace_bytes;
    stats_.index_ranges += sp.index.n_ranges;
    stats_.index_cols += sp.index.n_cols;
    check_cuda(cudaEventRecord(ev(e.index_end), s), "cudaEventRecord");
    if (tiles8) {
      sp.k = k8;
      sp.v = kv_cache_at(l, 1);
      sp.kv_dtype = cuda::KvDtype::fp8_e4m3;
      sp.k_scale = k_scale_[size_t(l)];
      sp.v_scale = v_scale_[size_t(l)];
    }
    cuda::sparse_attention(sp, stream_);  // the Hopper kernel for head_dim 128 / 256, else the generic one
  }
  check_cuda(cudaEventRecord(ev(e.end), s), "cudaEventRecord");
}

void GpuTransformer::check_pre_rope() const {
  if (!gpu_method_ || !gpu_method_->attends())
    fail("internal: attention method '{}' keeps pre-RoPE keys but its GPU side does not attend", attn_spec_);
  const auto refuse = [&](const std::string& what) {
    fail("--attn {} on the GPU (pre-RoPE keys) does not run with {}; use --device cpu", attn_spec_, what);
  };
  // --kv-cache fp8 runs: prefill steps attend the staged bf16 rows, a decode step gets the e4m3
  // cache (GpuAttendStep::kv_fp8); the constructor refuses a method whose decode_reads_fp8() is false.
  // Sliding-window layers run: they keep post-RoPE keys and the dense window kernels (method_layer).
  // Several sequences decode one at a time (keeps_sequence_state: decode_batch refuses), and
  // --kv-offload takes HiP only (check_offload_options).
  if (synthetic_qk_) refuse("--synthetic-qk (it replaces Q/K after RoPE)");
}

void GpuTransformer::attend_pre_rope(int l, int64_t T, int64_t n_kv, const void* q, const void* k_all,
                                     const void* v_all, void* o, int64_t n_kv_bound, bool kv_fp8) {
  // Timed like prefill_attention (a dense or sparse step by the method's route; index = attention).
  const bool prefill = T > 1;
  const AttnEvents* e = prefill ? &next_events() : nullptr;
  const cudaStream_t s = static_cast<cudaStream_t>(stream_);
  if (e) check_cuda(cudaEventRecord(ev(e->start), s), "cudaEventRecord");
  if (e) check_cuda(cudaEventRecord(ev(e->index_end), s), "cudaEventRecord");
  const Phase ph = T == 1 ? Phase::decode : Phase::prefill;  // as the CPU model
  if (prefill) {
    const AttnStep step{.layer = l, .phase = ph, .n_q = T, .q_pos0 = n_kv - T, .n_kv = n_kv};
    ++(method_->route(step) == Route::sparse ? stats_.sparse_calls : stats_.dense_calls);
  }
  // decode_layer's step (n_kv_bound set): its length is also in step_buf_, which a replay follows.
  const int32_t* d_kv_len = n_kv_bound > 0 ? static_cast<const int32_t*>(step_buf_) + kStepKvLen : nullptr;
  gpu_method_->attend({.layer = l, .phase = ph, .q = q, .k = k_all, .v = v_all, .o = o, .n_q = T, .n_kv = n_kv,
                       .inv_freq = w_.inv_freq(l), .rope_factor = w_.rope_factor(l), .scale = cfg_.score_scale(),
                       .n_kv_dev = d_kv_len, .n_kv_bound = n_kv_bound, .kv_fp8 = kv_fp8,
                       .k_scale = kv_fp8 ? k_scale_[size_t(l)] : 1.f, .v_scale = kv_fp8 ? v_scale_[size_t(l)] : 1.f},
                      stream_);
  if (e) check_cuda(cudaEventRecord(ev(e->end), s), "cudaEventRecord");
}

void GpuTransformer::read_attention_times() {
  check_cuda(cudaEventSynchronize(ev(events_[events_used_ - 1].end)), "cudaEventSynchronize");
  for (size_t i = 0; i < events_used_; ++i) {
    float all_ms = 0, index_ms = 0;
    check_cuda(cudaEventElapsedTime(&all_ms, ev(events_[i].start), ev(events_[i].end)), "cudaEventElapsedTime");
    check_cuda(cudaEventElapsedTime(&index_ms, ev(events_[i].start), ev(events_[i].index_end)), "cudaEventElapsedTime");
    stats_.attention_s += 1e-3 * all_ms;
    stats_.index_s += 1e-3 * index_ms;
  }
  events_used_ = 0;
  std::lock_guard<std::mutex> lk(g_stats_mu);
  g_prefill = stats_;
}

}  // namespace longctx::gpu

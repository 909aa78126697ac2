// gpu_transformer.h: the forward pass of the decoders model/Transformer runs (Llama family,
// Qwen2/3, Gemma 3, Phi-3, Mistral-Nemo) on one GPU (bf16, Hopper), the twin of
// model/Transformer: same interface, same math, same KV-cache semantics.
//
// Per layer, as model/transformer.cpp:  x += Wo attn(rope(Wq h), rope(Wk h), Wv h), h = rmsnorm(x);
//                                       x += Wdown (silu(Wgate h) * Wup h),          h = rmsnorm(x),
// with the architectures' variations (QK-norm, post-norms, GELU-tanh, embedding and score scales,
// per-layer RoPE tables with YaRN / LongRoPE) in gpu_block.cpp. Sliding-window layers
// (ModelConfig::layer(l).window > 0, Gemma 3's local layers) run the dense kernels with their
// window, which visit only the window's key tiles in prefill and decode; an attention method's
// sparse routes apply to the global layers only (as methods/run_cpu.h on the CPU).
// Activations are bf16 (fp32 inside every op); the residual add is fused into the Wo and Wdown
// GEMMs (beta = 1). Prefill runs in chunks of `chunk` tokens (attention_prefill with
// q_pos0 = tokens already cached); a single token runs the split-KV decode kernel. The MLP runs
// in row blocks of kMlpRows and the LM head only for the positions asked for, so activation
// memory is bounded by the chunk, whatever the prompt length.
// Memory: weights (DeviceWeights), the KV pool (bf16 or fp8 pages of every layer's K and V, see
// "Several sequences"; allocated by reset() or reserve_sequences() after checking it fits:
// memory_plan.h), one arena for the activations of a chunk (allocated once; no cudaMalloc per
// chunk or per decode step).
// Decode (one token) runs as one CUDA graph replay: the step (embedding -> all layers -> LM head
// of that position) is captured once and replayed per token; what changes per token (token id,
// position, KV length) sits in a small device buffer that one cudaMemcpyAsync rewrites before
// each replay. The new K/V row goes to a fixed scratch row and kv_append copies it to the
// position read from that buffer; RoPE and the decode kernel read the position / KV length from
// it too. The split-KV plan depends on the KV length in 64-key tiles, so the graph is
// re-captured (updated in place) when that tile count changes: the same plan as the eager path
// (bit-identical logits), one capture per 64 tokens. GpuOptions::cuda_graph = false or
// LONGCTX_NO_CUDA_GRAPH=1 issues the same kernels eagerly; a capture failure falls back to eager.
// Attention (GpuOptions::attn, the CPU's spec, methods/spec.h): per layer and step the parsed
// AttentionMethod routes dense (attention_prefill / the split-KV decode kernel) or sparse: the
// method's GPU builder (methods/gpu_method.h, e.g. MInference's cuda::MinferenceIndexBuilder on
// the chunk's post-RoPE Q against all cached K, A-shape's static index) makes the index and
// cuda::sparse_attention runs it. In a layer-major prefill (below) of more than one chunk, a
// method that estimates per prompt (MInference's vertical-slash lines) does so once per layer from
// the prompt's last 64 queries against all its keys (the layer's K/V are made for all chunks
// first: estimate_prompt_lines), and every chunk reuses it; chunk-major prefill estimates per
// chunk. Decode steps route the same way: sparse decode (e.g. "decode:a_shape=128,4096") runs the
// method's device-built decode index through cuda::sparse_decode inside the captured graph (a
// route that depends on the KV length is re-evaluated at each capture, i.e. every 64 keys). The
// builder's buffers (bounded by GpuMethod::device_bytes) are
// allocated with the KV pool and are part of the same fit check. GPU times of
// prefill attention and index builds: last_gpu_prefill_stats().
// KV cache in fp8 (GpuOptions::kv_cache, --kv-cache fp8: gpu/kv_fp8.h): e4m3 with one scale per
// layer for K and one for V, set from the first prefill's max |K| and |V| after reset(). The
// prefill then runs LAYER-MAJOR: the whole prompt's residual stream [T, n_embd] stays on the
// GPU (stage buffer), and for each layer every chunk runs against that layer's K/V held in bf16
// (rows of earlier calls dequantized into it first), after which the layer's new rows are
// quantized into the cache. MInference with vertical-slash heads runs layer-major with the bf16
// cache too (stage = the residual stream only; K/V are written to the cache directly). So prefill attention reads bf16 K/V (the same kernels and the same
// numbers as the bf16 cache), only decode reads e4m3, and the bf16 staging is one layer, not 32.
// forward() of a T-token prompt is then one call (the engine passes the whole prompt) with a
// per-layer progress callback.
// fp8 attention tiles (GpuOptions::attn_tiles, --attn-tiles fp8, with the fp8 cache): every
// SPARSE prefill step reads the layer's e4m3 K/V straight from the cache (cuda::SparseAttnParams
// kv_dtype fp8_e4m3 with the layer's scales) instead of the bf16 staging: half the bytes per key
// tile, attention over what decode will see. The layer's scales come from the amax of all its new
// rows, so the order changes: each layer first projects every chunk's K/V into the staging
// (as estimate_prompt_lines does; the residual stream is the layer's input, unchanged until its
// chunk runs), quantizes them into the cache (store_layer_kv), and only then runs the chunks,
// which compute their Q alone (no Q is recomputed or kept: the memory is the bf16 path's).
// Dense steps and MInference's estimate keep reading the bf16 staging; HiP's estimate scores the
// same e4m3 keys the sparse kernel reads (GpuPrefillStep::k_fp8, the cache's rows in place: no
// copy; its fp8 path on f16 tensor cores, cuda/hip_estimate.h), so one flag means "the sparse
// prefill reads the fp8 cache", index and attention alike. The generic mma.sync kernel runs the fp8 tiles at every head_dim (the Hopper kernel
// refuses fp8 until it has the path). Refused up front (attn_tiles_problem) without the fp8
// cache, with --kv-offload, for a pre-RoPE method or one with no sparse prefill step.
// Several sequences (mirrors model/Transformer): the KV cache is one pool of pages
// (kv::DeviceKvCache, pages of kKvPageTokens tokens: memory_plan.h) shared by the model's own
// sequence (reset/forward) and the GpuSequences of new_sequence(capacity). attach(s) makes
// forward()/size()/capacity() work on s; decode_batch(seqs, ids, logits) runs one step of n
// sequences: embedding, projections, Wo, MLP and LM head as matmuls over n rows, the new K/V rows
// scattered into each sequence's next pool row (kv_scatter, positions from the pool's device
// seq_lens), and ONE attention launch per layer over the paged view with per-sequence lengths
// (dense: attention_decode through the block table; sparse: the method's build_decode for
// kv.n_seq = n, then sparse_decode). The step is captured as a CUDA graph per row count and
// replayed (re-captured when the longest sequence crosses a 64-key tile, as the single step);
// the block tables and lengths are uploaded (sync_tables) before each replay. At most
// SequencesPlan::step_rows (64) rows per step; more sequences run as several steps.
// Each sequence's pages are ONE contiguous run (kv::KvCache::reserve_contiguous): every prefill
// path (dense and sparse prefill kernels, MInference's estimate, the fp8 layer-major staging,
// the single decode step) reads a sequence's keys as a contiguous [rows, n_kv_head, head_dim]
// block at its base row, unchanged; only the batched step reads through the block table.
// Pages are reserved whole at new_sequence(capacity) (prompt + new tokens, as reset does), so a
// run costs nothing extra; fragmentation can only refuse a new sequence (Error), never corrupt.
// Growing sequences (new_sequence(capacity, contiguous): continuous batching,
// runtime/sequence_batch_gpu.cpp) take only their prompt as a run; decode_batch takes each later
// page from the free list when the sequence reaches it (the batched step reads through the block
// table, so those pages may lie anywhere); prefill past the run is an Error. reserve_pool sizes a
// pool for them by its total tokens instead of a list of capacities.
// reserve_sequences(capacities) sizes the pool for a batch first (the fit check, needed vs free,
// before any work). Method state: the GPU builders keep no per-sequence state across calls
// (prefill estimates live within one forward; decode indices are rebuilt from seq_lens each
// step), so one builder serves every sequence, its decode buffers sized for step_rows sequences.
// fp8 cache: the per-layer K and V scales are the POOL's, shared by its sequences: set by the
// first prefill after the pool held no sequence (reset() alone: as before, from its prompt), and
// kept while any sequence holds pages; a later sequence's rows are quantized with them
// (saturating at +-448 * scale). So with fp8, a batch's first prompt decodes as it does alone and
// the others within fp8 rounding of alone; bf16 caches have no such coupling.
// Errors: everything throws longctx::Error (bad ids, capacity exceeded, KV that does not fit
// with what is needed vs free, CUDA failures with the kernel and shape); after an error mid
// forward, reset() must be called before the next forward.
//   GpuTransformer m(cfg, DeviceWeights::upload(cfg, w, nullptr));
//   m.reset(n_prompt + n_new); m.forward(prompt, 1, &logits); m.forward({&id, 1}, 1, &logits);
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gpu/device_weights.h"
#include "gpu/gpu_offload.h"
#include "gpu/gpu_stats.h"
#include "gpu/memory_plan.h"
#include "gpu/prefill_residual.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/structured_qk.h"
#include "model/attn_capture.h"
#include "methods/gpu_method.h"
#include "methods/method.h"
#include "model/config.h"
#include "model/logits_sink.h"

namespace longctx::kv {
class DeviceKvCache;
}

namespace longctx::gpu {

class GpuTransformer;

// One sequence of a GpuTransformer: its pages in the model's KV pool, its length. Made by
// GpuTransformer::new_sequence, owned by the caller; gives its pages back when destroyed. Must
// not outlive its model.
class GpuSequence {
 public:
  GpuSequence() = default;
  ~GpuSequence();
  GpuSequence(const GpuSequence&) = delete;
  GpuSequence& operator=(const GpuSequence&) = delete;
  int64_t size() const { return len; }           // tokens cached
  int64_t capacity() const { return cap_req; }   // tokens asked for

 private:
  friend class GpuTransformer;
  GpuTransformer* model = nullptr;  // null for the model's own sequence
  int64_t id = -1;        // kv::SeqId in the pool; -1: no pages
  int64_t len = 0;
  int64_t cap_req = 0;
  int64_t rows = 0;       // tokens its pages hold (cap_req rounded up to pages)
  int64_t base_row = 0;   // pool row of its token 0 (its pages are consecutive)
  bool broken = false;    // an error interrupted a forward on it
};

// K/V tiles of the sparse prefill kernels (see "fp8 attention tiles" above): the layer's bf16
// staging, or the fp8 cache's e4m3 rows.
enum class AttnTiles { bf16, fp8 };
AttnTiles parse_attn_tiles(const std::string& s);  // "bf16" | "fp8"; else Error naming the choices

struct GpuOptions {
  int64_t chunk = kDefaultChunk;  // tokens per prefill chunk (activation arena is sized by it)
  bool cuda_graph = true;         // decode by CUDA graph replay (env LONGCTX_NO_CUDA_GRAPH=1: off)
  std::string attn = "dense";     // --attn spec (methods/spec.h): dense, minference=..., a_shape=...
  bool synthetic_qk = false;      // benchmarks only: prefill Q/K replaced after RoPE (kernels/cuda/structured_qk.h)
  KvCacheType kv_cache = KvCacheType::bf16;  // fp8: e4m3 cache, layer-major prefill (see above)
  AttnTiles attn_tiles = AttnTiles::bf16;    // fp8: sparse prefill steps read the e4m3 cache (see above)
  // KV offload (gpu/gpu_offload.h): one sequence, bf16 or fp8, a method whose decode reads through the
  // offload caches (HiP); the prefill runs layer-major. Refused up front otherwise.
  KvOffloadOptions kv_offload = {};  // (an initializer: designated-initializer users get no -Wextra warning)
};

// Called after each layer of a layer-major prefill (fp8 cache) with the layers done so far.
using LayerProgressFn = std::function<void(int layers_done, int n_layer)>;


// "" when the GPU path runs model c (head_dim 16..256, GQA group, sizes); else what it lacks.
std::string gpu_model_problem(const ModelConfig& c);

// "" when opts.attn_tiles can apply with these options and method (gm: its GPU builder, null
// when no step is ever sparse); else why not. fp8 tiles need the fp8 cache, no --kv-offload, a
// post-RoPE method with a sparse prefill step.
std::string attn_tiles_problem(const GpuOptions& opts, const AttentionMethod& m, const GpuMethod* gm);

class GpuTransformer {
 public:
  // Takes the weights; allocates the activation arena (throws Error if it does not fit).
  GpuTransformer(ModelConfig cfg, DeviceWeights w, const GpuOptions& opts = {});
  ~GpuTransformer();
  GpuTransformer(const GpuTransformer&) = delete;
  GpuTransformer& operator=(const GpuTransformer&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const AttentionMethod& attention() const { return *method_; }
  // Device bytes of the method's GPU builder for a cache of `capacity` tokens (0: none).
  size_t sparse_bytes(int64_t capacity, int n_seq = 1) const;
  const DeviceWeights& weights() const { return w_; }
  int64_t chunk() const { return layout_.chunk; }
  KvCacheType kv_cache() const { return kv_type_; }
  AttnTiles attn_tiles() const { return attn_tiles_; }
  // Prefill runs layer-major (fp8 cache, or MInference with vertical-slash heads: its one
  // estimate per prompt needs every key of a layer before the layer's first chunk attends):
  // callers should pass the whole prompt in one forward().
  bool layer_major() const { return layer_major_; }
  bool kv_offload() const { return offload_opts_.on; }
  // With kv_offload: the split of the sequence reset() planned last (null before), and the
  // decode's cache counters since that reset (read after every decode step: synchronises).
  const OffloadPlan* offload_plan() const { return offload_ ? &offload_->plan() : nullptr; }
  const GpuOffloadStats& offload_stats() const { return offload_stats_; }
  int64_t size() const { return seq_->len; }           // of the attached sequence
  int64_t capacity() const { return seq_->cap_req; }
  cuda::Stream stream() const { return stream_; }
  // Decode by graph replay (true) or eager launches (false); same kernels, same logits.
  bool cuda_graph() const { return use_graph_ && !eager_decode_; }
  void set_cuda_graph(bool on) { use_graph_ = on; }
  int64_t graph_captures() const { return graph_captures_; }  // captures so far (tests, logs)
  const GpuMethod* gpu_method() const { return gpu_method_.get(); }  // null: every step dense (tests)
  int64_t batch_graph_captures() const { return batch_captures_; }  // of batched steps

  // "" if a KV cache of `capacity` tokens fits in the GPU memory free now (counting the cache
  // held now, which reset() frees first); else what is needed vs free and what to do.
  std::string kv_fit_problem(int64_t capacity) const;
  // Clears the model's own sequence and makes room for `capacity` tokens in the pool (which is
  // reallocated only when the sequence does not fit it and no other sequence holds pages).
  // Throws Error (kv_fit_problem's message) when it will not fit.
  void reset(int64_t capacity);

  // --- several sequences (see above) ---
  // "" if a pool for sequences of these capacities fits (counting the pool held now, which
  // reserve_sequences frees first when it must grow); else needed vs free and what to do.
  std::string sequences_fit_problem(std::span<const int64_t> capacities) const;
  // Makes the pool hold sequences of these capacities (one contiguous run each) and sizes the
  // batched step's buffers; frees the own sequence's pages (reset() before its next forward).
  // Error when it does not fit, or when sequences from new_sequence still hold pages.
  void reserve_sequences(std::span<const int64_t> capacities);
  // A new empty sequence with room for `capacity` tokens, from the pool's free pages; Error when
  // there is no run of free pages that long (reserve_sequences first).
  std::unique_ptr<GpuSequence> new_sequence(int64_t capacity);
  // A growing sequence (above): its first `contiguous` tokens (the prompt) as one run of free pages
  // now, later pages taken by decode_batch as it grows, up to `capacity` tokens. Error when no run
  // is long enough (pool_use().longest_free_run says beforehand).
  std::unique_ptr<GpuSequence> new_sequence(int64_t capacity, int64_t contiguous);
  // A pool of pool_tokens for growing sequences of up to max_capacity tokens each, step_rows rows
  // per batched step; pool_fit_problem: "" when it fits (as sequences_fit_problem), else why.
  std::string pool_fit_problem(int64_t pool_tokens, int64_t max_capacity, int step_rows) const;
  void reserve_pool(int64_t pool_tokens, int64_t max_capacity, int step_rows);
  struct PoolUse {
    int64_t pages = 0, free_pages = 0;  // of the pool (0 without one)
    int64_t longest_free_run = 0;       // pages: the longest contiguous prompt that fits now
    int64_t page_tokens = kKvPageTokens;
    int64_t max_capacity = 0;           // tokens one sequence may reach (the plan's)
  };
  PoolUse pool_use() const;
  // forward()/size()/capacity() work on s (nullptr: the model's own sequence) until the next
  // attach; reset() and capture_attention need the own sequence attached.
  void attach(GpuSequence* s);
  // Whether decode_batch serves this attention method (not when its GPU builder keeps state per
  // sequence: GpuMethod::keeps_sequence_state; those sequences decode one at a time).
  bool batches_decode() const { return !gpu_method_ || !gpu_method_->keeps_sequence_state(); }
  // One decode step of several sequences: ids[i] at the next position of seqs[i]; its K/V are
  // appended. Logits [n, vocab] into `logits`. Sequences of this model, distinct, each with room.
  void decode_batch(std::span<GpuSequence* const> seqs, std::span<const int32_t> ids, std::vector<float>& logits);
  // Runs tokens at positions size() .. size()+T-1 and appends their K/V. Writes logits
  // [n_logits, vocab] (fp32) of the last n_logits positions (0 = none) into logits.
  // `progress` is called per layer by a layer-major prefill (fp8 cache), else never.
  void forward(std::span<const int32_t> tokens, int64_t n_logits, std::vector<float>* logits,
               const LayerProgressFn& progress = {});
  // The same, the logits of the last n_logits positions handed to sink a few rows at a time
  // (model/logits_sink.h; at most the arena's logit rows per call: scoring long texts).
  void forward(std::span<const int32_t> tokens, int64_t n_logits, const LogitsSink& sink,
               const LayerProgressFn& progress = {});
  // Engine::capture_attention on the GPU (gpu_capture.cpp): a dense layer-major prefill of
  // tokens from position 0 that calls observer once per layer with that layer's post-RoPE Q,
  // K and V of all tokens as host fp32 (the AttnCapture contract), whatever GpuOptions::attn
  // is. Frees the KV cache first (its memory goes to the capture's buffers: the residual stream
  // [T, n_embd] and one layer's K/V [T, n_kv_head*head_dim], bf16), so reset() must precede the
  // next forward(). Throws Error (bytes needed vs free) when those buffers do not fit.
  void capture_attention(std::span<const int32_t> tokens, const AttnObserver& observer);

 private:
  // Where a forward's logits go: row r of the call (r >= first) straight to dst + (r - first) *
  // vocab (the vector forward: no copy, decode steps included), or, without dst, through
  // logit_host_ to *sink.
  struct LogitsOut {
    float* dst = nullptr;
    int64_t first = 0;
    const LogitsSink* sink = nullptr;
    bool wanted() const { return dst || (sink && *sink); }
  };
  void forward_to(std::span<const int32_t> tokens, int64_t n_logits, const LogitsOut& out,
                  const LayerProgressFn& progress);
  // Tokens ids[0..T) at position size(); logits of rows first_row..T-1 go out as rows
  // row0 + first_row.. of the call (row0: the chunk's first row in it).
  void forward_chunk(const int32_t* ids, int64_t T, int64_t first_row, int64_t row0, const LogitsOut& out);
  // fp8 cache: all T tokens layer by layer (see above); logits of rows first_row..T-1 go out.
  void forward_layer_major(std::span<const int32_t> tokens, int64_t first_row, const LogitsOut& out,
                           const LayerProgressFn& progress);
  // Host memory for m logit rows starting at row `row` of the call, and their hand-over once
  // written (a no-op when they were written to out.dst).
  float* logits_target(const LogitsOut& out, int64_t row, int64_t m);
  void deliver_logits(const LogitsOut& out, int64_t row, int64_t m, const float* rows);
  // Final norm + LM head of m <= logit_rows rows x_rows [m, E] (device), out as rows row..
  void emit_logits(const void* x_rows, int64_t m, int64_t row, const LogitsOut& out);
  // Ends layer l of a layer-major prefill: sets the layer's scales (first prefill) and
  // quantizes the staged rows [pos0, pos0+T) into the cache.
  void store_layer_kv(int l, int64_t pos0, int64_t T);
  // One layer over T tokens at position pos0: x [T, n_embd] is updated in place; the layer's
  // keys and values [0, pos0+T) are read from (and the T new rows written to) k_all / v_all,
  // bf16 [rows, n_kv_head, head_dim] (the cache's layer, or the fp8 path's staging).
  struct LayerRun {
    int l = 0;
    int64_t T = 0, pos0 = 0;
    void* x = nullptr;
    void* k_all = nullptr;
    void* v_all = nullptr;
    bool kv_ready = false;  // the T new K/V rows are already there (estimate_prompt_lines made them)
  };
  void layer(const LayerRun& r);
  // Attention inputs of layer l for rows x [T, n_embd] at position pos0: RMSNorm, then whichever
  // of q [T, n_head*head_dim] and k, v [T, n_kv_head*head_dim] (bf16) is non-null, with the bias,
  // RoPE (q, k) and, in benchmarks, the synthetic Q/K.
  // Rows sit at positions pos0.. unless `positions` (device, [T]) gives each row's own (decode
  // steps: read at replay time); only pos0.. rows get the synthetic Q/K (graph-replayed decode
  // steps keep the model's).
  struct Projection {
    int l = 0;
    int64_t T = 0, pos0 = 0;
    const int32_t* positions = nullptr;
    const void* x = nullptr;
    void* q = nullptr;
    void* k = nullptr;
    void* v = nullptr;
  };
  void project(const Projection& r);
  // Embedding rows of device ids [n] into out [n, n_embd] (times ModelConfig::embed_scale).
  void embed(const int32_t* d_ids, void* out, int64_t n);
  // x [n, n_embd] += Wo o (o [n, n_head*head_dim]), through the post-norm when the model has one.
  void attn_out(int l, const void* o, void* x, int64_t n);
  // MLP block of layer l on rows x [n, n_embd] in place (x += MLP(RMSNorm(x))), mlp_rows at a time.
  void mlp(int l, void* x, int64_t n);
  // Whether the attention step runs the method's sparse kernels: only in a method layer.
  bool sparse_step(const AttnStep& step) const;
  int64_t window(int l) const { return cfg_.layer(l).window; }
  // The per-layer attention type: an attention method applies to the global layers only; a
  // sliding-window layer (Gemma 3's local layers) always attends densely over its window, with
  // post-RoPE keys, whatever the method (its window is its sparsity; as methods/run_cpu.h).
  bool method_layer(int l) const { return window(l) == 0; }
  // A pre-RoPE method (GpuMethod::attends: TokenSelect, InfiniteHiP rope=on) owns every
  // attention step of its method layers: there Q and K stay un-rotated (project), the cache
  // holds that layer's K un-rotated, and attend_pre_rope hands each step of layer l (T rows, the
  // last of n_kv keys) to the method. The cache may so hold layers in both key conventions.
  // Follows method_ (a capture's dense method_ rotates as usual).
  bool pre_rope() const { return method_->needs().keys == KeyLayout::pre_rope; }
  bool pre_rope_layer(int l) const { return pre_rope() && method_layer(l); }
  // kv_fp8: k_all / v_all are the fp8 cache's e4m3 rows (a decode step), else bf16.
  void attend_pre_rope(int l, int64_t T, int64_t n_kv, const void* q, const void* k_all, const void* v_all, void* o,
                       int64_t n_kv_bound = 0, bool kv_fp8 = false);
  void check_pre_rope() const;  // throws Error for what a pre-RoPE method cannot run with (constructor)
  // MInference in a layer-major prefill of T > chunk tokens: the reference's estimate, once per
  // prompt. prompt_wide_lines says whether layer l does it (VS heads, sparse at the prompt's end);
  // estimate_prompt_lines writes every chunk's K/V of the layer into the staging first, then
  // selects each VS head's lines from the prompt's last 64 queries against all its keys
  // (MinferenceIndexBuilder::estimate_vs); the layer's chunks then reuse them (GpuMethod::prepare_prompt).
  bool prompt_wide_lines(int l, int64_t pos0, int64_t T) const;
  void estimate_prompt_lines(int l, int64_t pos0, int64_t T, void* xs, void* k_stage, void* v_stage);
  // Every chunk's K/V of layer l (rows pos0..pos0+T of the staging) from the layer inputs xs
  // [T, n_embd] (estimate_prompt_lines, and fp8 tiles before the layer's first chunk attends).
  void project_layer_kv(int l, int64_t pos0, int64_t T, const void* xs, void* k_stage, void* v_stage);
  // Prefill attention of layer l for T > 1 queries at pos0 (route: dense, or sparse through gpu_method_), timed.
  void prefill_attention(int l, int64_t T, int64_t pos0, void* q, void* k_all, void* v_all, void* o);
  bool prompt_wide_method() const;  // whether some layer estimates per prompt (layer-major prefill)
  GpuShape method_shape(int64_t capacity, int n_seq = 1) const;
  void read_attention_times();                         // sums the chunk's events into stats_
  // Final norm + LM head of x rows [n_rows, n_embd] (n_rows <= logit_rows) into layout_.logits.
  void lm_head(const void* x_rows, int64_t n_rows, float* out);
  void lm_head_device(const void* x_rows, int64_t n_rows);
  void copy_logits(int64_t n_rows, float* out);       // layout_.logits -> host, then sync
  // One token at position size() (decode), by graph replay or eagerly.
  void decode_token(int32_t id, float* logits);
  void decode_kernels(int64_t plan_kv, bool with_logits);  // the step's launches (captured or not)
  void decode_layer(int l, int64_t plan_kv);
  // Decode attention of layer l for the step's one query q [n_head*head_dim] into o, over the
  // layer's cache k_all / v_all: dense (split-KV over the KV length), or sparse (the method's
  // decode index over own_view). Both read the step's length from device memory.
  void dense_decode_attention(int l, int64_t plan_kv, const void* q, void* o, void* k_all, void* v_all);
  // The attached sequence's rows of layer l as a paged view of one page (block table {0}: the step
  // buffer's zero slot; length: the step's KV length in device memory, which a graph replays).
  KvView own_view(int l, void* k_all, void* v_all) const;
  // Sparse decode of q [kv.n_seq, n_head*head_dim] into o over kv, through the method's decode index.
  // offload: a host layer's caches (kv is then its host view).
  void sparse_decode_attention(int l, const void* q, void* o, const KvView& kv, const KvOffloadLayer* offload = nullptr);
  void free_kv();
  // KV offload (gpu_transformer_offload.cpp): the budget of a sequence of `capacity` tokens, its
  // plan's fit, the allocation for it, and the decode step's hooks around a host layer.
  OffloadBudget offload_budget(int64_t capacity) const;
  std::string offload_fit_problem(int64_t capacity) const;
  void reset_offload(int64_t capacity);
  bool host_layer(int l) const { return offload_ && offload_->on_host(l); }
  // Whether the layer-major prefill keeps its residual stream in host memory (prefill_residual.h).
  bool host_residual() const;
  void check_offload_options() const;
  // The pool of plan p, the decode workspace, staging and method buffers sized by it (after the
  // fit check; frees what was held: no sequence may hold pages).
  void allocate_pool(const SequencesPlan& p);
  // false: no run long enough. contiguous < 0: the whole capacity as one run.
  bool try_take_pages(GpuSequence& s, int64_t capacity, int64_t contiguous = -1);
  std::string plan_fit_problem(const SequencesPlan& p) const;
  void reserve_plan(const SequencesPlan& p);
  void release_pages(GpuSequence& s);
  friend class GpuSequence;
  int64_t external_sequences() const;  // sequences from new_sequence holding pages
  size_t held_kv_bytes() const;        // what allocate_pool would free
  void invalidate_graphs();            // captured steps hold scales and pool pointers
  // One batched step of n <= step_rows sequences (decode_batch's groups).
  void batch_step(std::span<GpuSequence* const> seqs, std::span<const int32_t> ids, float* logits);
  void batch_kernels(int n, int64_t plan_kv);
  void batch_layer(int l, int n, int64_t plan_kv);
  KvView pool_view(int l) const;  // the pool's device view of layer l with this model's scales
  size_t batch_buffer_bytes() const;  // batch_buf_ for the arena's logit rows
  // Keys per tile of the split-KV decode kernel: its split plan depends on the KV length only in
  // whole tiles, so a captured step stays exact (same plan as eager) within one tile.
  static constexpr int64_t kDecodePlanKeys = 64;
  void note_memory();
  void* act(size_t off) const { return static_cast<char*>(arena_->base()) + off; }

  ModelConfig cfg_;
  // Attention (methods/method.h): the parsed method routes every step; its GPU builder
  // (gpu_method_, null when no step is ever sparse) makes the sparse steps' indices.
  MethodContext method_ctx_;
  std::shared_ptr<const AttentionMethod> method_;
  std::unique_ptr<GpuMethod> gpu_method_;
  std::string attn_spec_;  // as given (stats, messages)
  DeviceWeights w_;
  ArenaLayout layout_;
  cuda::Stream stream_ = nullptr;
  std::unique_ptr<cuda::DeviceArena> arena_;
  std::unique_ptr<cuda::Gemm> gemm_;
  std::unique_ptr<cuda::StructuredQk> synthetic_qk_;  // set when GpuOptions::synthetic_qk
  std::string device_name_;
  // KV cache: the pool (kv_cache.h layout: layer l's K and V pools [pages * kKvPageTokens,
  // n_kv_head, head_dim] of kv_elem_ bytes, bf16 or e4m3 with k_scale_[l] / v_scale_[l]); the
  // attached sequence's rows start at its base_row in each.
  void* kv_cache_at(int l, int which) const;  // which: 0 = K, 1 = V; of the attached sequence
  KvCacheType kv_type_ = KvCacheType::bf16;
  AttnTiles attn_tiles_ = AttnTiles::bf16;
  bool layer_major_ = false;
  size_t kv_elem_ = 2;
  std::unique_ptr<kv::DeviceKvCache> pool_;
  // KV offload: replaces pool_ (the own sequence's rows: offload_->rows(l, which), base row 0).
  KvOffloadOptions offload_opts_;
  std::unique_ptr<GpuOffload> offload_;
  GpuOffloadStats offload_stats_;
  SequencesPlan pool_plan_;  // what the pool and the buffers below are sized for
  size_t kv_bytes_ = 0;      // the pool's bytes
  GpuSequence own_;          // forward()'s sequence unless another is attached
  GpuSequence* seq_ = &own_;
  // Batched step: device int32 ids [rows] and positions [rows], then K and V rows bf16
  // [rows, n_kv_head*head_dim] each (rows = the arena's logit rows), at batch_layout offsets.
  void* batch_buf_ = nullptr;
  struct BatchGraph {
    std::unique_ptr<cuda::CudaGraph> graph;
    int64_t tiles = -1;  // KV tiles of the longest sequence it was captured for (-1: none valid)
    bool warmed = false;
  };
  std::vector<BatchGraph> batch_graphs_;  // [rows + 1], by row count
  int64_t batch_captures_ = 0;
  int64_t graph_seq_ = -1;  // pool id of the sequence the single-step graph was captured for
  std::vector<float> k_scale_, v_scale_;  // fp8: per layer; 0 = not set yet (set by the first prefill)
  std::vector<float> logit_host_;  // [<= logit_rows, vocab] logits on their way to a sink
  void* stage_ = nullptr;                 // layer-major: stage_layout(longest sequence) block (fp8: bf16 K/V of one layer; x)
  StageLayout stage_layout_;
  std::unique_ptr<PrefillResidual> residual_;  // KV offload: the residual stream in host memory, else null
  float* amax_ = nullptr;                 // fp8: device float [2], max |K| and |V| of a layer's new rows
  void* decode_ws_ = nullptr;  // split-KV decode workspace for the pool's step rows and longest sequence
  size_t decode_ws_bytes_ = 0;
  // Decode step: device int32 [kStepInts] {token id, position, KV length} and the new K and V
  // rows bf16 [n_kv_head*head_dim] each, at the offsets in gpu_transformer.cpp.
  void* step_buf_ = nullptr;
  size_t sparse_bytes_ = 0;  // gpu_method_'s buffers (allocated with the KV pool)
  // Per chunk: one CUDA event pair around each layer's prefill attention (and its index build).
  struct AttnEvents {
    void* start = nullptr;
    void* index_end = nullptr;  // after the index (= start for dense)
    void* end = nullptr;
  };
  std::vector<AttnEvents> events_;
  size_t events_used_ = 0;
  AttnEvents& next_events();  // the next unused entry (created on first use)
  GpuPrefillStats stats_;
  std::unique_ptr<cuda::CudaGraph> graph_;
  int64_t graph_tiles_ = -1;  // KV tiles the captured plan was made for (-1: none valid)
  bool use_graph_ = true;
  bool eager_decode_ = false;  // the method's decode step cannot be replayed (GpuMethod::decode_graph_safe)
  bool warmed_ = false;       // one eager step ran (kernels' one-time setup precedes capture)
  int64_t graph_captures_ = 0;
};

}  // namespace longctx::gpu

// memory_plan.h: how many bytes of GPU memory a model needs, known before anything is allocated.
//
// What: the bf16 weights, the KV cache (bf16 or fp8 e4m3, per layer K and V, token-major
// [capacity, n_kv_head, head_dim]), the activation arena of one prefill chunk, the workspaces,
// and with an fp8 cache the layer-major prefill's buffers (one layer's K/V in bf16 and the
// residual stream of the whole prompt: gpu_transformer.h). Why: a prompt whose KV cache will not fit must fail up front with a message that
// says how much is needed and how much is free (never an out-of-memory crash halfway through a
// 10-minute prefill), and --device auto must be able to pick the CPU instead.
// The same layout functions size the real allocations (gpu_transformer.cpp), so the plan and
// the allocations cannot drift apart.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kv/kv_spec.h"
#include "model/config.h"

namespace longctx::gpu {

inline constexpr size_t kAlign = 256;  // every sub-buffer starts on cudaMalloc's alignment
inline size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Default prefill chunk on the GPU: 16K tokens keeps the GEMMs and the attention kernel at full
// rate (the Hopper prefill kernel's overlap variant is picked up to 16K queries) while the
// activations of a Llama-3-8B chunk stay under ~1 GiB, whatever the prompt length.
inline constexpr int64_t kDefaultChunk = 16384;
// MLP rows per step: the [rows, 2*n_ff] gate/up and [rows, n_ff] products are the largest
// activations; 4096 rows still fill the GPU for the GEMMs (m = 4096) at 336 MiB for Llama-3-8B.
inline constexpr int64_t kMlpRows = 4096;
// LM-head rows per step: logits are written [rows, vocab] fp32 (32 MiB for a 128K vocabulary).
inline constexpr int64_t kLogitRows = 64;
// Kept free beyond the plan: cuBLASLt's internal allocations, kernel modules loaded on first
// use, and the driver's own needs.
inline constexpr size_t kReserveBytes = size_t(512) << 20;

// The KV cache's element type. fp8: e4m3 with one scale per layer for K and one for V (the
// format kernels/cuda attention_decode reads); half the bytes, so Llama-3-8B's 1M-token cache is
// 64 GiB instead of 128 GiB. The prefill then runs layer-major (gpu_transformer.h).
enum class KvCacheType { bf16, fp8 };
KvCacheType parse_kv_cache(const std::string& s);  // "bf16" | "fp8"; else Error naming the choices
const char* kv_cache_name(KvCacheType t);

// Row stride of the fp32 logits buffer: vocab rounded up to a multiple of 4 floats (16 bytes,
// so cuBLASLt's vectorised kernels stay eligible for any vocabulary size).
inline int64_t padded_vocab(int64_t v) { return (v + 3) / 4 * 4; }

// Offsets of the activation buffers inside the arena of one chunk (all bf16 unless noted).
struct ArenaLayout {
  int64_t chunk = 0, mlp_rows = 0, logit_rows = 0;
  size_t ids = 0;     // int32 [chunk]
  size_t x = 0;       // [chunk, n_embd]      residual stream
  size_t h = 0;       // [chunk, n_embd]      normed input of a projection
  size_t q = 0;       // [chunk, n_head*head_dim]
  size_t o = 0;       // [chunk, n_head*head_dim] attention output
  size_t gu = 0;      // [mlp_rows, 2*n_ff]   gate | up
  size_t act = 0;     // [mlp_rows, n_ff]     silu(gate) * up
  size_t logits = 0;  // fp32 [logit_rows, vocab]
  size_t gemm_ws = 0; // cuBLASLt workspace
  size_t total = 0;
};
ArenaLayout arena_layout(const ModelConfig& c, int64_t chunk);

// Weights in bf16 (fused gate|up), plus the fp32 RoPE frequencies.
size_t weight_bytes(const ModelConfig& c);
size_t kv_bytes_per_token(const ModelConfig& c, KvCacheType t = KvCacheType::bf16);  // all layers, K and V
size_t kv_bytes(const ModelConfig& c, int64_t capacity, KvCacheType t = KvCacheType::bf16);
// Layer-major prefill buffers (0 for a chunk-major prefill). With the fp8 cache (always
// layer-major): one layer's K and V in bf16 [capacity, KV] each, plus the residual stream of
// `capacity` tokens, bf16 [capacity, n_embd]. With the bf16 cache and layer_major (MInference's
// prompt-wide estimate, gpu_transformer.h): the residual stream only (K/V go straight to the cache).
// host_chunk > 0 (KV offload, gpu/prefill_residual.h): the residual stream lives in pinned host
// memory and x holds kResidualBuffers chunk buffers [host_chunk, n_embd] instead: the staging is
// then O(chunk) but for the K/V part, one layer's keys and values of the whole prompt, which the
// prefill attention of that layer reads.
struct StageLayout {
  size_t k = 0, v = 0, x = 0, total = 0;  // offsets in one block
  size_t x_bytes = 0;                     // the residual stream's part on the GPU
};
StageLayout stage_layout(const ModelConfig& c, int64_t capacity, KvCacheType t, bool layer_major = false,
                         int64_t host_chunk = 0);
// The split-KV decode workspace for n_seq sequences of at most `capacity` tokens.
size_t decode_ws_bytes(const ModelConfig& c, int64_t capacity, int n_seq = 1);

// The KV cache of the GPU model is one pool of pages (kv::DeviceKvCache) that its sequences
// share: the model's own (reset/forward) and those of GpuTransformer::new_sequence. A page holds
// kKvPageTokens tokens: a multiple of the decode kernels' 64-key tile and of the Hopper prefill
// kernel's 128-key tile (attention.h: paged prefill needs multiples of 128), so every kernel can
// read the pages; each sequence's pages are one contiguous run (gpu_transformer.h says why).
inline constexpr int kKvPageTokens = 128;
// Sequences sharing a pool: how many, the pool's tokens (each capacity rounded up to pages), the
// longest, and the rows of one batched decode step (at most the arena's logit rows: the LM head
// of one step writes [rows, vocab]; more sequences decode in several steps of this many rows).
struct SequencesPlan {
  int n_seq = 0;
  int64_t pool_tokens = 0;
  int64_t max_capacity = 0;  // rounded up to pages
  int step_rows = 1;
  int64_t asked = 0;         // the capacities' sum, as asked (messages)
};
SequencesPlan plan_sequences(std::span<const int64_t> capacities, int64_t logit_rows);
kv::KvSpec pool_spec(const ModelConfig& c, const SequencesPlan& p, KvCacheType t);
// "" when the pool of plan p (pages and tables), the decode workspace of its step rows, the
// layer-major staging of its longest sequence (one prefill at a time) and sparse_bytes fit in
// free_bytes (less the reserve); else what is needed vs free and what to do. One sequence: the
// message of kv_fit_problem for its pages' tokens.
std::string sequences_fit_problem(const ModelConfig& c, const SequencesPlan& p, size_t free_bytes, size_t held_bytes,
                                  const std::string& device_name, size_t sparse_bytes, KvCacheType t,
                                  bool layer_major);

// "" when the KV cache of `capacity` tokens, its decode workspace, the layer-major staging
// (stage_layout) and `sparse_bytes` (the method builder's buffers for that capacity: GpuMethod::device_bytes,
// methods/gpu_method.h) fit in `free_bytes` (less the reserve); else a message saying what is
// needed and what is free, and what to do (shorter context, --kv-cache fp8, or the CPU path).
// rows: the tokens the allocation holds when more than capacity (the pool's page rounding).
std::string kv_fit_problem(const ModelConfig& c, int64_t capacity, size_t free_bytes, size_t held_bytes,
                           const std::string& device_name, size_t sparse_bytes = 0,
                           KvCacheType t = KvCacheType::bf16, bool layer_major = false, int64_t rows = 0);
std::string gib(size_t bytes);  // "12.34 GiB"

}  // namespace longctx::gpu

// memory_plan.cpp: see memory_plan.h.
#include "gpu/memory_plan.h"
#include "gpu/prefill_residual.h"

#include <algorithm>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/gemm.h"
#include "util/error.h"

namespace longctx::gpu {

namespace {
constexpr size_t kBf16 = 2;
}

ArenaLayout arena_layout(const ModelConfig& c, int64_t chunk) {
  ArenaLayout a;
  a.chunk = chunk;
  a.mlp_rows = std::min(chunk, kMlpRows);
  a.logit_rows = std::min(chunk, kLogitRows);
  const size_t E = size_t(c.n_embd), Q = size_t(c.n_head) * size_t(c.head_dim), F = size_t(c.n_ff);
  const size_t C = size_t(chunk), M = size_t(a.mlp_rows);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off = align_up(off + bytes);
    return at;
  };
  a.ids = take(C * sizeof(int32_t));
  a.x = take(C * E * kBf16);
  a.h = take(C * E * kBf16);
  a.q = take(C * Q * kBf16);
  a.o = take(C * Q * kBf16);
  a.gu = take(M * 2 * F * kBf16);
  a.act = take(M * F * kBf16);
  a.logits = take(size_t(a.logit_rows) * size_t(padded_vocab(c.vocab_size)) * sizeof(float));  // rows padded to 16 B
  a.gemm_ws = take(cuda::kGemmWorkspaceBytes);
  a.total = off;
  return a;
}

size_t weight_bytes(const ModelConfig& c) {
  const size_t E = size_t(c.n_embd), Q = size_t(c.n_head) * size_t(c.head_dim);
  const size_t KV = size_t(c.n_kv_head) * size_t(c.head_dim), F = size_t(c.n_ff), V = size_t(c.vocab_size);
  size_t layer = align_up(E * kBf16) * 2                          // attn_norm, ffn_norm
                 + align_up(Q * E * kBf16) + 2 * align_up(KV * E * kBf16)  // wq, wk, wv
                 + align_up(E * Q * kBf16)                         // wo
                 + align_up(2 * F * E * kBf16) + align_up(E * F * kBf16);  // w_gate_up, w_down
  if (c.qkv_bias) layer += align_up(Q * kBf16) + 2 * align_up(KV * kBf16);
  if (c.qk_norm) layer += 2 * align_up(size_t(c.head_dim) * kBf16);  // q_norm, k_norm
  if (c.post_norms) layer += 2 * align_up(E * kBf16);               // attn_post_norm, ffn_post_norm
  size_t total = size_t(c.n_layer) * layer + align_up(V * E * kBf16) + align_up(E * kBf16) +
                 align_up(size_t(c.n_layer) * size_t(c.head_dim / 2) * sizeof(float));  // RoPE tables
  if (!c.tied_embeddings) total += align_up(V * E * kBf16);
  return total;
}

KvCacheType parse_kv_cache(const std::string& s) {
  if (s == "bf16") return KvCacheType::bf16;
  if (s == "fp8") return KvCacheType::fp8;
  fail("unknown KV cache type '{}' (known: bf16, fp8)", s);
}

const char* kv_cache_name(KvCacheType t) { return t == KvCacheType::fp8 ? "fp8" : "bf16"; }

size_t kv_bytes_per_token(const ModelConfig& c, KvCacheType t) {
  const size_t elem = t == KvCacheType::fp8 ? 1 : kBf16;
  return 2 * size_t(c.n_layer) * size_t(c.n_kv_head) * size_t(c.head_dim) * elem;
}

size_t kv_bytes(const ModelConfig& c, int64_t capacity, KvCacheType t) {
  return kv_bytes_per_token(c, t) * size_t(capacity);
}

StageLayout stage_layout(const ModelConfig& c, int64_t capacity, KvCacheType t, bool layer_major, int64_t host_chunk) {
  StageLayout s;
  if (t != KvCacheType::fp8 && !layer_major) return s;
  const size_t rows = size_t(std::max<int64_t>(capacity, 1));
  const size_t kv = t == KvCacheType::fp8 ? rows * size_t(c.n_kv_head) * size_t(c.head_dim) * kBf16 : 0;
  const PrefillResidualShape r{.rows = int64_t(rows), .n_embd = c.n_embd, .chunk = host_chunk};
  s.k = 0;
  s.v = align_up(kv);
  s.x = s.v + align_up(kv);
  s.x_bytes = PrefillResidual::device_bytes(r, host_chunk > 0);
  s.total = s.x + align_up(s.x_bytes);
  return s;
}

size_t decode_ws_bytes(const ModelConfig& c, int64_t capacity, int n_seq) {
  return align_up(cuda::decode_workspace_bytes(std::max(n_seq, 1), c.n_head, c.head_dim, std::max<int64_t>(capacity, 1)));
}

SequencesPlan plan_sequences(std::span<const int64_t> capacities, int64_t logit_rows) {
  SequencesPlan p;
  p.n_seq = int(capacities.size());
  for (int64_t cap : capacities) {
    const int64_t t = kv::pages_for_tokens(std::max<int64_t>(cap, 1), kKvPageTokens) * kKvPageTokens;
    p.pool_tokens += t;
    p.asked += cap;
    p.max_capacity = std::max(p.max_capacity, t);
  }
  p.step_rows = int(std::clamp<int64_t>(int64_t(p.n_seq), 1, std::max<int64_t>(logit_rows, 1)));
  return p;
}

kv::KvSpec pool_spec(const ModelConfig& c, const SequencesPlan& p, KvCacheType t) {
  kv::KvSpec s;
  s.n_layer = c.n_layer;
  s.n_kv_head = c.n_kv_head;
  s.head_dim = c.head_dim;
  s.page_size = kKvPageTokens;
  s.elem = t == KvCacheType::fp8 ? KvElem::fp8_e4m3 : KvElem::bf16;
  s.n_pages = std::max<int64_t>(p.pool_tokens / kKvPageTokens, 1);
  s.max_batch = p.step_rows;
  s.max_seq_tokens = std::max<int64_t>(p.max_capacity, kKvPageTokens);
  return s;
}

std::string sequences_fit_problem(const ModelConfig& c, const SequencesPlan& p, size_t free_bytes, size_t held_bytes,
                                  const std::string& device_name, size_t sparse_bytes, KvCacheType t,
                                  bool layer_major) {
  if (p.n_seq <= 1)
    return kv_fit_problem(c, p.asked, free_bytes, held_bytes, device_name, sparse_bytes, t, layer_major, p.pool_tokens);
  size_t pool = kv_bytes(c, p.pool_tokens, t);  // past the pool's int32 limits: the bytes alone (they do not fit)
  try {
    pool = size_t(kv::kv_bytes_needed(pool_spec(c, p, t)));
  } catch (const Error&) {
  }
  const size_t ws = decode_ws_bytes(c, p.max_capacity, p.step_rows);
  const size_t stage = stage_layout(c, p.max_capacity, t, layer_major).total;
  const size_t need = pool + ws + stage + sparse_bytes;
  const size_t usable = free_bytes > kReserveBytes ? free_bytes - kReserveBytes : 0;
  if (need <= usable) return "";
  const std::string fp8_hint = t == KvCacheType::bf16 ? ", an fp8 KV cache (--kv-cache fp8: half the bytes)" : "";
  return fmt::format(
      "the KV cache for {} sequences ({} tokens in pages of {}, the longest {}) needs {} ({} the pool, {} the decode "
      "workspace, {} the layer-major prefill's staging, {} the sparse method's buffers) but {} has {} free ({} "
      "already held by the weights and activations, {} kept in reserve): use fewer or shorter sequences, fewer new "
      "tokens{}, or the CPU path (--device cpu)",
      p.n_seq, p.pool_tokens, kKvPageTokens, p.max_capacity, gib(need), gib(pool), gib(ws), gib(stage),
      gib(sparse_bytes), device_name, gib(free_bytes), gib(held_bytes), gib(kReserveBytes), fp8_hint);
}

std::string gib(size_t bytes) { return fmt::format("{:.2f} GiB", double(bytes) / double(1ull << 30)); }

std::string kv_fit_problem(const ModelConfig& c, int64_t capacity, size_t free_bytes, size_t held_bytes,
                           const std::string& device_name, size_t sparse_bytes, KvCacheType t,
                           bool layer_major, int64_t rows) {
  rows = std::max(rows, capacity);
  const size_t stage = stage_layout(c, rows, t, layer_major).total;
  const size_t need = kv_bytes(c, rows, t) + decode_ws_bytes(c, rows) + stage + sparse_bytes;
  const size_t usable = free_bytes > kReserveBytes ? free_bytes - kReserveBytes : 0;
  if (need <= usable) return "";
  const size_t per_tok = kv_bytes_per_token(c, t);
  // decode workspace is < 1/64 of the KV; the staging and sparse buffers grow with the capacity
  // too (counted here at their share per token of this capacity)
  const size_t extra_per_tok = (stage + sparse_bytes) / size_t(std::max<int64_t>(capacity, 1));
  const int64_t fit = int64_t(usable / (per_tok + per_tok / 64 + extra_per_tok + 1));
  const std::string sparse =
      sparse_bytes ? fmt::format(" and {} for the sparse prefill's index and workspace", gib(sparse_bytes)) : "";
  const std::string staged =
      stage ? fmt::format(", {} for the layer-major prefill ({}the prompt's residual stream)", gib(stage),
                          t == KvCacheType::fp8 ? "one layer's K/V in bf16, " : "")
            : "";
  const std::string fp8_hint = t == KvCacheType::bf16 ? ", an fp8 KV cache (--kv-cache fp8: half the bytes)" : "";
  return fmt::format(
      "the KV cache for {} tokens needs {} ({} KiB per token: {} layers x K,V x {} heads x {} x {}{}{}) but "
      "{} has {} free ({} already held by the weights and activations, {} kept in reserve); "
      "about {} tokens would fit: use a shorter context or fewer new tokens{}, or the CPU path (--device cpu)",
      capacity, gib(need), per_tok / 1024, c.n_layer, c.n_kv_head, c.head_dim, kv_cache_name(t), staged, sparse,
      device_name, gib(free_bytes), gib(held_bytes), gib(kReserveBytes), fit, fp8_hint);
}

}  // namespace longctx::gpu

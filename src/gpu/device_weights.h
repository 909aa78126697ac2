// device_weights.h: the model's weights on the GPU in bf16, in one allocation.
//
// Made either from the fp32 ModelWeights (GGUF/safetensors, any quantization: dequantized to fp32
// at load, rounded to bf16 here, one tensor at a time) or generated on the device for
// --random-weights (fill_random_bf16: no host copy of the weights, so an 8B geometry loads in a
// second). Gate and up projections are stored fused, [2*n_ff, n_embd] (gate rows first), so
// the MLP runs one GEMM whose [rows, 2*n_ff] output feeds swiglu directly.
// RoPE inverse frequencies (fp32, one table per layer: Gemma 3's local and global layers differ;
// GGUF llama3 rope_freqs, YaRN and LongRoPE folded in) and each layer's cos/sin factor are
// computed on the host exactly as the CPU path does (model/transformer.cpp set_rope), and
// uploaded; LongRoPE's tables depend on the context, so set_rope_context redoes them per reset.
// RMSNorm weights are stored with ModelConfig::norm_offset folded in (Gemma's (1 + w)), so the
// GPU kernels scale by the stored weight alone; download() takes the offset back out.
//   auto w = DeviceWeights::upload(cfg, ModelWeights::load(file, cfg), stream);
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda/runtime.h"
#include "model/config.h"
#include "model/weights.h"

namespace longctx::gpu {

struct DeviceLayer {  // all bf16, row-major [out, in] as in ModelWeights
  void* attn_norm = nullptr;  // [n_embd]
  void* q_norm = nullptr;     // [head_dim] (qk_norm only)
  void* k_norm = nullptr;     // [head_dim] (qk_norm only)
  void* attn_post_norm = nullptr;  // [n_embd] (post_norms only)
  void* ffn_post_norm = nullptr;   // [n_embd] (post_norms only)
  void* wq = nullptr;         // [n_head*head_dim, n_embd]
  void* wk = nullptr;         // [n_kv_head*head_dim, n_embd]
  void* wv = nullptr;         // [n_kv_head*head_dim, n_embd]
  void* bq = nullptr;         // [n_head*head_dim]     (qkv_bias only)
  void* bk = nullptr;         // [n_kv_head*head_dim]  (qkv_bias only)
  void* bv = nullptr;         // [n_kv_head*head_dim]  (qkv_bias only)
  void* wo = nullptr;         // [n_embd, n_head*head_dim]
  void* ffn_norm = nullptr;   // [n_embd]
  void* w_gate_up = nullptr;  // [2*n_ff, n_embd]: gate rows 0..n_ff-1, up rows n_ff..2*n_ff-1
  void* w_down = nullptr;     // [n_embd, n_ff]
};

class DeviceWeights {
 public:
  // From fp32 host weights (ModelWeights::load); throws Error if the GPU has no room.
  static DeviceWeights upload(const ModelConfig& c, const ModelWeights& w, cuda::Stream s);
  // Deterministic uniform random weights from `seed`, scaled so activations keep unit size
  // (projections U(+-sqrt(3/fan_in)): std 1/sqrt(fan_in)); norm weights are 1.
  static DeviceWeights random(const ModelConfig& c, uint64_t seed, cuda::Stream s);

  DeviceWeights() = default;
  DeviceWeights(DeviceWeights&& o) noexcept { *this = std::move(o); }
  DeviceWeights& operator=(DeviceWeights&& o) noexcept;
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;
  ~DeviceWeights();

  // fp32 copy on the host (the bf16 values widened): lets tests run the CPU forward on exactly
  // the weights the GPU uses.
  ModelWeights download(cuda::Stream s) const;

  const DeviceLayer& layer(int l) const { return layers_[size_t(l)]; }
  const void* tok_embd() const { return tok_embd_; }  // bf16 [vocab, n_embd]
  const void* out_norm() const { return out_norm_; }  // bf16 [n_embd]
  const void* lm_head() const { return lm_head_; }    // bf16 [vocab, n_embd] (= tok_embd when tied)
  const float* inv_freq(int l) const { return inv_freq_ + size_t(l) * size_t(cfg_.head_dim / 2); }  // fp32 [head_dim/2]
  float rope_factor(int l) const { return rope_factor_[size_t(l)]; }  // cos/sin multiplier of layer l
  // LongRoPE: the tables for a context of `context` tokens (long factors past the original
  // context), as the CPU's Transformer::reset; a no-op for the other scalings.
  // Returns whether the tables changed (captured decode steps hold the factors: re-capture).
  bool set_rope_context(int64_t context, cuda::Stream s);
  size_t bytes() const { return bytes_; }

 private:
  void allocate(const ModelConfig& c);  // carves every tensor out of one block

  ModelConfig cfg_;
  void* block_ = nullptr;
  size_t bytes_ = 0;
  std::vector<DeviceLayer> layers_;
  void* tok_embd_ = nullptr;
  void* out_norm_ = nullptr;
  void* lm_head_ = nullptr;
  float* inv_freq_ = nullptr;      // device [n_layer, head_dim/2]
  std::vector<float> rope_factor_;  // [n_layer]
  std::vector<float> rope_inv_host_;  // host copy of inv_freq_
  std::vector<float> rope_freqs_;  // host copy of GGUF llama3 divisors (for download)
  int64_t rope_context_ = -1;       // context the tables were made for (LongRoPE)
};

// The RoPE tables the CPU Transformer uses for this config at a context of `context` tokens
// (0: at construction): inverse frequencies [n_layer, head_dim/2] and per-layer cos/sin factors.
// rope_freqs: GGUF llama3 divisors, or empty.
struct RopeTables {
  std::vector<float> inv_freq;
  std::vector<float> factor;
};
RopeTables rope_tables(const ModelConfig& c, const std::vector<float>& rope_freqs, int64_t context);

}  // namespace longctx::gpu

// transformer.h: the CPU forward pass of Llama-family decoders (Llama 2/3/3.1, Mistral,
// SmolLM2, Qwen2/2.5, Qwen3, Gemma 3 text, Phi-3), over one sequence with a KV cache, one chunk
// of tokens at a time.
//
// Per layer: x += post(Wo * attn(rope(qn(Wq h)), rope(kn(Wk h)), Wv h)) with h = rmsnorm(x);
//            x += post(Wdown (act(Wgate h) * Wup h))                   with h = rmsnorm(x).
// qn/kn: RMSNorm over each head (qk_norm: Qwen3, Gemma 3); post: RMSNorm (post_norms: Gemma 3),
// else identity; act: silu or gelu_tanh. Each layer has its own attention type (ModelConfig::
// layer: global, or a sliding window that AttnParams::window passes to the attention call) and
// its own RoPE frequencies (Gemma 3: local base on sliding layers, scaling on global ones).
// Attention goes through an AttentionMethod (methods/method.h: dense, a_shape, minference, ...:
// route, index, shared kernel, via methods/run_cpu.h) with this sequence's MethodState; the LM head runs
// only for the positions the caller asks for, so a long prefill never holds [T, vocab] logits.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kernels/ref/ops.h"
#include "model/attn_capture.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/logits_sink.h"
#include "model/rope_tables.h"
#include "model/weights.h"
#include "methods/method.h"

namespace longctx {

class ThreadPool;

// One sequence's state: its KV cache and its attention method's per-request state.
struct SequenceState {
  KvCache cache;
  std::unique_ptr<MethodState> method;
  std::shared_ptr<const AttentionMethod> attn;  // this sequence's own method; null = the model's
};

class Transformer {
 public:
  Transformer(ModelConfig cfg, ModelWeights w, std::shared_ptr<const AttentionMethod> method, ThreadPool& pool);

  const ModelConfig& config() const { return cfg_; }
  KvCache& cache() { return seq_->cache; }
  // A new method starts a new method state for the attached sequence (its cache is kept).
  void set_method(std::shared_ptr<const AttentionMethod> m) {
    method_ = std::move(m);
    seq_->method = method_->start_sequence();
  }

  // Clears the attached sequence's cache, reserves room for `capacity` tokens and starts a new
  // method state. LongRoPE models use their long factors when capacity exceeds the original
  // context (as llama.cpp decides by context size; transformers by the current sequence length,
  // the same for a single forward of that length).
  void reset(int64_t capacity);

  // Several sequences (the weights are shared): a new sequence with room for `capacity` tokens,
  // owned by the caller. attach(s) makes forward()/forward_prompt()/reset()/cache() work on s
  // (nullptr: the model's own sequence); s must outlive its attachment. RoPE tables are the
  // model's (LongRoPE: chosen by the last reset()'s capacity).
  // `method` (optional) gives the sequence its own attention method (a server's per-request
  // --attn); null = the model's.
  std::unique_ptr<SequenceState> new_sequence(int64_t capacity,
                                              std::shared_ptr<const AttentionMethod> method = nullptr) const;
  void attach(SequenceState* s) { seq_ = s ? s : &own_; }
  // One decode step of several sequences at once: token ids[i] at the next position of seqs[i]
  // (each in its own cache, with its own method state and length), its K/V appended. The
  // projections, output projection, MLP and LM head run as one batched matmul over the n rows;
  // attention runs per sequence (different lengths). Logits [n, vocab] into `logits`.
  void decode_batch(std::span<SequenceState* const> seqs, std::span<const int32_t> ids, std::vector<float>& logits);

  // Runs tokens at positions cache.size() .. cache.size()+T-1 and appends their K/V.
  // Writes logits [n_logits, vocab] of the last n_logits positions (0 = none) into `logits`.
  // observer (optional) receives each layer's Q/K/V (K/V = the whole cached prefix).
  void forward(std::span<const int32_t> tokens, int64_t n_logits, std::vector<float>* logits,
               const AttnObserver* observer = nullptr);

  // Whether a prompt of n_tokens in chunks of `chunk` should run forward_prompt: it spans more
  // than one chunk and the attention method estimates per prompt at some layer.
  bool prompt_wide(int64_t n_tokens, int64_t chunk) const;
  // Layer-major prefill of a whole prompt (same result as forward() chunk by chunk, except that
  // the method sees the prompt's last queries first: AttentionMethod::prepare_prompt): per layer
  // every chunk's Q/K/V, then the method's prompt-wide estimate, then attention and MLP chunk by
  // chunk. Holds the prompt's residual stream and one layer's Q ([T, n_embd + n_head*head_dim]
  // floats). progress(done, n_layer) after each layer.
  using LayerProgressFn = std::function<void(int, int)>;
  void forward_prompt(std::span<const int32_t> tokens, int64_t chunk, int64_t n_logits, std::vector<float>* logits,
                      const LayerProgressFn& progress = {});
  // The same, the logits of the last n_logits rows handed to sink `chunk` rows at a time
  // (model/logits_sink.h: scoring every position of a long text in bounded memory).
  void forward_prompt(std::span<const int32_t> tokens, int64_t chunk, int64_t n_logits, const LogitsSink& sink,
                      const LayerProgressFn& progress = {});

 private:
  struct LayerRows {  // rows [pos0, pos0 + T) of layer l; x: their residual stream [T, n_embd]
    int l;
    int64_t T, pos0;
    float* x;
  };
  struct Scratch {  // per-chunk activations
    std::vector<float> h, o, g, u;  // [T, n_embd], [T, n_head*D], [T, n_ff] x 2
  };
  Scratch scratch(int64_t T) const;
  void embed(std::span<const int32_t> tokens, float* x) const;
  void check_room(int64_t pos0, int64_t T) const;
  // rmsnorm, Q into q [T, n_head*D], K/V into the attached sequence's cache rows, RoPE on Q and K.
  void project(const LayerRows& r, float* h, float* q);
  AttnParams attn_params(const SequenceState& seq, int l, int64_t T, int64_t pos0, const float* q, float* o) const;
  // Attention through the method (decode for one row), output projection, MLP, residuals.
  void attend_and_mlp(const LayerRows& r, const float* q, Scratch& s);
  // x [T, E] += Wo o; then the MLP block with its residual (o: [T, n_head*D] in s.o).
  void out_and_mlp(int l, int64_t T, float* x, Scratch& s);
  void lm_head(const float* x, int64_t T, int64_t n_logits, std::vector<float>* logits);  // last n_logits rows
  void head_rows(const float* x, int64_t rows, std::vector<float>& logits);  // x [rows, E] -> [rows, vocab]
  // forward_prompt's layers: the prompt's residual stream [T, E] after the last layer; the cache
  // then holds the prompt.
  std::vector<float> prompt_layers(std::span<const int32_t> tokens, int64_t chunk, const LayerProgressFn& progress);

  const AttentionMethod& method_of(const SequenceState& s) const { return s.attn ? *s.attn : *method_; }
  // Whether s's method caches keys un-rotated (MethodNeeds::keys == pre_rope): its Q and K stay
  // un-rotated here and attention rotates them at the method's positions (methods/run_cpu.h). A
  // sequence's cache must not outlive a change of layout (set_method before its first token).
  bool pre_rope(const SequenceState& s) const { return method_of(s).needs().keys == KeyLayout::pre_rope; }
  LayerRope layer_rope(int l) const {
    return {rope_.inv_freq.data() + size_t(l) * size_t(cfg_.head_dim / 2), rope_.factor[size_t(l)]};
  }
  // Attention of one step of seq (its method and state) through attend_cpu.
  void attend(const AttnParams& ap, SequenceState& seq, Phase phase);
  // Every weight matmul goes here: y = x W^T on the quantized kernels when W has a quantized copy
  // (q non-null and non-empty: --cpu-weights quantized), else on the exact fp32 matmul_ref.
  // same_input: x is the previous matmul's input, unchanged (Q/K/V, gate/up), so its quantized
  // form is reused when that call quantized it.
  static constexpr bool kSameInput = true;
  void matmul(const MatmulParams& p, const QuantMatrix* q, bool same_input = false);
  // Layer l's quantized copy of one matrix (e.g. &QuantLayerWeights::wq); null on the fp32 path.
  const QuantMatrix* quant(int l, QuantMatrix QuantLayerWeights::*m) const {
    return w_.quant ? &(w_.quant->layers[size_t(l)].*m) : nullptr;
  }

  ModelConfig cfg_;
  ModelWeights w_;
  Q8Rows xq_;  // matmul's quantized activations
  struct QuantizedInput {  // which input xq_ holds
    const float* x = nullptr;
    int64_t T = 0, n_in = 0;
    bool operator==(const QuantizedInput&) const = default;
  } xq_input_;
  bool rows_alone_ = false;  // in decode_batch: each matmul row is a sequence (QuantMatmulParams::rows_alone)
  std::shared_ptr<const AttentionMethod> method_;  // shared, immutable
  ThreadPool& pool_;
  SequenceState own_;            // the sequence forward() uses unless another is attached
  SequenceState* seq_ = &own_;   // the attached sequence
  // The RoPE tables for a context of `context` tokens (model/rope_tables.h).
  void set_rope(int64_t context);
  RopeTables rope_;
};

}  // namespace longctx

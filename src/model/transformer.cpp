// transformer.cpp: see transformer.h.
#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/ref/ops.h"
#include "methods/minference/vs_estimate.h"
#include "methods/run_cpu.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {

Transformer::Transformer(ModelConfig cfg, ModelWeights w, std::shared_ptr<const AttentionMethod> method, ThreadPool& pool)
    : cfg_(std::move(cfg)), w_(std::move(w)), method_(std::move(method)), pool_(pool) {
  own_.method = method_->start_sequence();
  set_rope(0);
}

void Transformer::set_rope(int64_t context) { rope_ = rope_tables(cfg_, w_.rope_freqs, context); }

void Transformer::reset(int64_t capacity) {
  if (cfg_.rope_scaling.type == "longrope") set_rope(capacity);
  seq_->cache.reset(cfg_.n_layer, capacity, int64_t(cfg_.n_kv_head) * cfg_.head_dim);
  seq_->method = method_of(*seq_).start_sequence();  // a new sequence
}

void Transformer::embed(std::span<const int32_t> tokens, float* x) const {
  const int64_t E = cfg_.n_embd, V = cfg_.vocab_size;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const int32_t id = tokens[t];
    if (id < 0 || id >= V) fail("token id {} is outside the vocabulary (size {})", id, V);
    std::memcpy(x + int64_t(t) * E, w_.tok_embd.data() + int64_t(id) * E, size_t(E) * sizeof(float));
  }
  if (cfg_.embed_scale != 1.f)
    for (int64_t i = 0; i < int64_t(tokens.size()) * E; ++i) x[i] *= cfg_.embed_scale;
}

void Transformer::project(const LayerRows& r, float* h, float* q) {
  const LayerWeights& L = w_.layers[size_t(r.l)];
  const int64_t E = cfg_.n_embd, D = cfg_.head_dim;
  const int64_t Q = int64_t(cfg_.n_head) * D, KV = int64_t(cfg_.n_kv_head) * D;
  float* kc = seq_->cache.k(r.l) + r.pos0 * KV;  // these rows in the cache: [T, KV]
  float* vc = seq_->cache.v(r.l) + r.pos0 * KV;
  auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };
  const float off = cfg_.norm_offset;
  rmsnorm_ref(r.x, L.attn_norm.data(), h, r.T, E, cfg_.rms_eps, pool_, off);
  matmul({h, L.wq.data(), bias(L.bq), q, r.T, E, Q}, quant(r.l, &QuantLayerWeights::wq));
  matmul({h, L.wk.data(), bias(L.bk), kc, r.T, E, KV}, quant(r.l, &QuantLayerWeights::wk), kSameInput);
  matmul({h, L.wv.data(), bias(L.bv), vc, r.T, E, KV}, quant(r.l, &QuantLayerWeights::wv), kSameInput);
  if (cfg_.qk_norm) {  // per head: rows of head_dim
    rmsnorm_ref(q, L.q_norm.data(), q, r.T * cfg_.n_head, D, cfg_.rms_eps, pool_, off);
    rmsnorm_ref(kc, L.k_norm.data(), kc, r.T * cfg_.n_kv_head, D, cfg_.rms_eps, pool_, off);
  }
  if (pre_rope(*seq_)) return;  // rotated at attention time, at the method's positions
  const LayerRope rope = layer_rope(r.l);
  rope_apply_ref(q, r.T, cfg_.n_head, int(D), r.pos0, rope.inv_freq, pool_, rope.factor);
  rope_apply_ref(kc, r.T, cfg_.n_kv_head, int(D), r.pos0, rope.inv_freq, pool_, rope.factor);
}

void Transformer::matmul(const MatmulParams& p, const QuantMatrix* q, bool same_input) {
  if (!q || q->empty()) {
    xq_input_ = {};  // a later same_input call has nothing to reuse
    return matmul_ref(p, pool_);
  }
  const QuantizedInput key{p.x, p.T, p.n_in};
  const bool reuse = same_input && xq_input_ == key;
  quant_matmul({.x = p.x, .w = q, .bias = p.bias, .y = p.y, .T = p.T, .xq = &xq_, .x_quantized = reuse,
                .rows_alone = rows_alone_},
               pool_);
  xq_input_ = key;
}

void Transformer::attend(const AttnParams& ap, SequenceState& seq, Phase phase) {
  const LayerRope rope = layer_rope(ap.layer);
  attend_cpu({.method = method_of(seq), .state = *seq.method, .phase = phase, .rope = pre_rope(seq) ? &rope : nullptr},
             ap, pool_);
}

AttnParams Transformer::attn_params(const SequenceState& seq, int l, int64_t T, int64_t pos0, const float* q,
                                    float* o) const {
  AttnParams ap;
  ap.q = q;
  ap.k = seq.cache.k(l);
  ap.v = seq.cache.v(l);
  ap.o = o;
  ap.n_q = T;
  ap.n_kv = pos0 + T;
  ap.n_head = cfg_.n_head;
  ap.n_kv_head = cfg_.n_kv_head;
  ap.head_dim = cfg_.head_dim;
  ap.q_pos0 = pos0;
  ap.scale = cfg_.score_scale();
  ap.causal = true;
  ap.window = cfg_.layer(l).window;
  ap.layer = l;
  return ap;
}

void Transformer::attend_and_mlp(const LayerRows& r, const float* q, Scratch& s) {
  const AttnParams ap = attn_params(*seq_, r.l, r.T, r.pos0, q, s.o.data());
  attend(ap, *seq_, r.T == 1 ? Phase::decode : Phase::prefill);
  out_and_mlp(r.l, r.T, r.x, s);
}

void Transformer::out_and_mlp(int l, int64_t T, float* x, Scratch& s) {
  const LayerWeights& L = w_.layers[size_t(l)];
  const int64_t E = cfg_.n_embd, Q = int64_t(cfg_.n_head) * cfg_.head_dim, F = cfg_.n_ff;
  const LayerRows r{l, T, 0, x};  // the rows (positions are not needed past attention)
  const float off = cfg_.norm_offset;
  matmul({s.o.data(), L.wo.data(), nullptr, s.h.data(), r.T, Q, E}, quant(l, &QuantLayerWeights::wo));
  if (cfg_.post_norms) rmsnorm_ref(s.h.data(), L.attn_post_norm.data(), s.h.data(), r.T, E, cfg_.rms_eps, pool_, off);
  add_ref(r.x, s.h.data(), r.T * E);
  rmsnorm_ref(r.x, L.ffn_norm.data(), s.h.data(), r.T, E, cfg_.rms_eps, pool_, off);
  matmul({s.h.data(), L.w_gate.data(), nullptr, s.g.data(), r.T, E, F}, quant(l, &QuantLayerWeights::w_gate));
  matmul({s.h.data(), L.w_up.data(), nullptr, s.u.data(), r.T, E, F}, quant(l, &QuantLayerWeights::w_up), kSameInput);
  if (cfg_.activation == "gelu_tanh")
    gelu_tanh_mul_ref(s.g.data(), s.u.data(), r.T * F, pool_);
  else
    silu_mul_ref(s.g.data(), s.u.data(), r.T * F, pool_);
  matmul({s.g.data(), L.w_down.data(), nullptr, s.h.data(), r.T, F, E}, quant(l, &QuantLayerWeights::w_down));
  if (cfg_.post_norms) rmsnorm_ref(s.h.data(), L.ffn_post_norm.data(), s.h.data(), r.T, E, cfg_.rms_eps, pool_, off);
  add_ref(r.x, s.h.data(), r.T * E);
}

Transformer::Scratch Transformer::scratch(int64_t T) const {
  const int64_t E = cfg_.n_embd, Q = int64_t(cfg_.n_head) * cfg_.head_dim, F = cfg_.n_ff;
  Scratch s;
  s.h.resize(size_t(T * E));
  s.o.resize(size_t(T * Q));
  s.g.resize(size_t(T * F));
  s.u.resize(size_t(T * F));
  return s;
}

void Transformer::lm_head(const float* x, int64_t T, int64_t n_logits, std::vector<float>* logits) {
  if (n_logits <= 0 || !logits) return;
  n_logits = std::min(n_logits, T);
  head_rows(x + (T - n_logits) * cfg_.n_embd, n_logits, *logits);
}

void Transformer::head_rows(const float* x, int64_t rows, std::vector<float>& logits) {
  const int64_t E = cfg_.n_embd, V = cfg_.vocab_size;
  std::vector<float> h(size_t(rows * E));  // [rows, E]
  rmsnorm_ref(x, w_.out_norm.data(), h.data(), rows, E, cfg_.rms_eps, pool_, cfg_.norm_offset);
  logits.resize(size_t(rows * V));
  matmul({h.data(), w_.output().data(), nullptr, logits.data(), rows, E, V}, w_.quant ? &w_.quant->output : nullptr);
}

void Transformer::check_room(int64_t pos0, int64_t T) const {
  if (pos0 + T > seq_->cache.capacity())
    fail("KV cache holds {} tokens; {} more at position {} do not fit", seq_->cache.capacity(), T, pos0);
}

void Transformer::forward(std::span<const int32_t> tokens, int64_t n_logits, std::vector<float>* logits,
                          const AttnObserver* observer) {
  const int64_t T = int64_t(tokens.size());
  if (T == 0) return;
  const int64_t pos0 = seq_->cache.size();
  check_room(pos0, T);
  if (pre_rope(*seq_) && observer && *observer)
    fail("attention capture reads rotated Q/K; '{}' caches keys pre-RoPE (use its keys=rotated form)",
         method_of(*seq_).name());
  const int64_t E = cfg_.n_embd, Q = int64_t(cfg_.n_head) * cfg_.head_dim;

  // Activations for this chunk (T bounded by the caller's prefill chunk size).
  std::vector<float> x(size_t(T * E));  // [T, E] residual stream
  std::vector<float> q(size_t(T * Q));  // [T, n_head*D]
  Scratch s = scratch(T);
  embed(tokens, x.data());
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const LayerRows r{l, T, pos0, x.data()};
    project(r, s.h.data(), q.data());
    if (observer && *observer) {
      AttnCapture cap{l, T, cfg_.n_head, cfg_.n_kv_head, cfg_.head_dim, q.data(), seq_->cache.k(l), seq_->cache.v(l)};
      (*observer)(cap);
    }
    attend_and_mlp(r, q.data(), s);
  }
  seq_->cache.set_size(pos0 + T);
  lm_head(x.data(), T, n_logits, logits);
}

std::unique_ptr<SequenceState> Transformer::new_sequence(int64_t capacity,
                                                         std::shared_ptr<const AttentionMethod> method) const {
  if (capacity <= 0) fail("a sequence needs room for at least one token (got capacity {})", capacity);
  auto seq = std::make_unique<SequenceState>();
  seq->cache.reset(cfg_.n_layer, capacity, int64_t(cfg_.n_kv_head) * cfg_.head_dim);
  seq->attn = std::move(method);
  seq->method = method_of(*seq).start_sequence();
  return seq;
}

void Transformer::decode_batch(std::span<SequenceState* const> seqs, std::span<const int32_t> ids,
                               std::vector<float>& logits) {
  const int64_t n = int64_t(seqs.size());
  if (n == 0) return;
  if (int64_t(ids.size()) != n) fail("decode_batch: {} sequences but {} token ids", n, ids.size());
  for (int64_t i = 0; i < n; ++i) {
    if (!seqs[size_t(i)]) fail("decode_batch: sequence {} is null", i);
    for (int64_t j = 0; j < i; ++j)
      if (seqs[size_t(j)] == seqs[size_t(i)]) fail("decode_batch: sequence {} is given twice (rows {} and {})", j, j, i);
    const KvCache& c = seqs[size_t(i)]->cache;
    if (c.size() + 1 > c.capacity())
      fail("decode_batch: sequence {} holds {} tokens, its KV cache {}: no room for one more", i, c.size(), c.capacity());
  }
  // Every row is a sequence: its matmuls must give what decoding it alone gives.
  struct RowsAlone {
    bool& flag;
    explicit RowsAlone(bool& f) : flag(f) { flag = true; }
    ~RowsAlone() { flag = false; }
  } rows_alone(rows_alone_);
  const int64_t E = cfg_.n_embd, D = cfg_.head_dim;
  const int64_t Q = int64_t(cfg_.n_head) * D, KV = int64_t(cfg_.n_kv_head) * D;
  std::vector<float> x(size_t(n * E));   // [n, E] one row per sequence
  std::vector<float> q(size_t(n * Q));   // [n, n_head*D]
  std::vector<float> k(size_t(n * KV)), v(size_t(n * KV));  // [n, KV] new rows before they go to the caches
  Scratch s = scratch(n);
  embed(ids, x.data());
  auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };
  const float off = cfg_.norm_offset;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const LayerWeights& L = w_.layers[size_t(l)];
    rmsnorm_ref(x.data(), L.attn_norm.data(), s.h.data(), n, E, cfg_.rms_eps, pool_, off);
    matmul({s.h.data(), L.wq.data(), bias(L.bq), q.data(), n, E, Q}, quant(l, &QuantLayerWeights::wq));
    matmul({s.h.data(), L.wk.data(), bias(L.bk), k.data(), n, E, KV}, quant(l, &QuantLayerWeights::wk), kSameInput);
    matmul({s.h.data(), L.wv.data(), bias(L.bv), v.data(), n, E, KV}, quant(l, &QuantLayerWeights::wv), kSameInput);
    if (cfg_.qk_norm) {  // per head: rows of head_dim
      rmsnorm_ref(q.data(), L.q_norm.data(), q.data(), n * cfg_.n_head, D, cfg_.rms_eps, pool_, off);
      rmsnorm_ref(k.data(), L.k_norm.data(), k.data(), n * cfg_.n_kv_head, D, cfg_.rms_eps, pool_, off);
    }
    const LayerRope rope = layer_rope(l);
    for (int64_t i = 0; i < n; ++i) {  // each row at its own position, into its own cache
      SequenceState& sq = *seqs[size_t(i)];
      const int64_t pos = sq.cache.size();
      float* kc = sq.cache.k(l) + pos * KV;
      std::memcpy(kc, k.data() + i * KV, size_t(KV) * sizeof(float));
      std::memcpy(sq.cache.v(l) + pos * KV, v.data() + i * KV, size_t(KV) * sizeof(float));
      if (!pre_rope(sq)) {
        rope_apply_ref(q.data() + i * Q, 1, cfg_.n_head, int(D), pos, rope.inv_freq, pool_, rope.factor);
        rope_apply_ref(kc, 1, cfg_.n_kv_head, int(D), pos, rope.inv_freq, pool_, rope.factor);
      }
      const AttnParams ap = attn_params(sq, l, 1, pos, q.data() + i * Q, s.o.data() + i * Q);
      attend(ap, sq, Phase::decode);
    }
    out_and_mlp(l, n, x.data(), s);
  }
  for (SequenceState* sq : seqs) sq->cache.set_size(sq->cache.size() + 1);
  head_rows(x.data(), n, logits);
}

bool Transformer::prompt_wide(int64_t n_tokens, int64_t chunk) const {
  if (n_tokens <= chunk) return false;  // one chunk estimates from the prompt's last queries anyway
  const int64_t n_kv = seq_->cache.size() + n_tokens;
  for (int l = 0; l < cfg_.n_layer; ++l)
    if (cfg_.layer(l).window == 0 && method_of(*seq_).estimates_per_prompt(l, n_kv)) return true;
  return false;
}

void Transformer::forward_prompt(std::span<const int32_t> tokens, int64_t chunk, int64_t n_logits,
                                 std::vector<float>* logits, const LayerProgressFn& progress) {
  if (tokens.empty()) return;
  std::vector<float> x = prompt_layers(tokens, chunk, progress);
  lm_head(x.data(), int64_t(tokens.size()), n_logits, logits);
}

void Transformer::forward_prompt(std::span<const int32_t> tokens, int64_t chunk, int64_t n_logits,
                                 const LogitsSink& sink, const LayerProgressFn& progress) {
  const int64_t T = int64_t(tokens.size()), E = cfg_.n_embd;
  std::vector<float> x = prompt_layers(tokens, chunk, progress);
  if (!sink || T == 0) return;
  std::vector<float> lg;
  for (int64_t r0 = T - std::clamp<int64_t>(n_logits, 0, T); r0 < T; r0 += chunk) {
    const int64_t rows = std::min(chunk, T - r0);
    head_rows(x.data() + r0 * E, rows, lg);
    sink(r0, rows, lg.data());
  }
}

std::vector<float> Transformer::prompt_layers(std::span<const int32_t> tokens, int64_t chunk,
                                              const LayerProgressFn& progress) {
  const int64_t T = int64_t(tokens.size());
  if (T == 0) return {};
  if (chunk <= 0) fail("prefill chunk must be positive (got {})", chunk);
  const int64_t pos0 = seq_->cache.size();
  check_room(pos0, T);
  const int64_t E = cfg_.n_embd, Q = int64_t(cfg_.n_head) * cfg_.head_dim;
  const int64_t C = std::min(chunk, T);

  std::vector<float> x(size_t(T * E));  // [T, E] the whole prompt's residual stream
  std::vector<float> q(size_t(T * Q));  // [T, n_head*D] one layer's queries, all chunks
  Scratch s = scratch(C);
  embed(tokens, x.data());
  for (int l = 0; l < cfg_.n_layer; ++l) {
    auto rows = [&](int64_t c0) { return LayerRows{l, std::min(C, T - c0), pos0 + c0, x.data() + c0 * E}; };
    for (int64_t c0 = 0; c0 < T; c0 += C) project(rows(c0), s.h.data(), q.data() + c0 * Q);  // all K/V first
    if (cfg_.layer(l).window == 0 && method_of(*seq_).estimates_per_prompt(l, pos0 + T)) {
      const int64_t R = std::min<int64_t>(kLastQ, T);  // the prompt's last queries
      method_of(*seq_).prepare_prompt(attn_params(*seq_, l, R, pos0 + T - R, q.data() + (T - R) * Q, nullptr), *seq_->method, pool_);
    }
    for (int64_t c0 = 0; c0 < T; c0 += C) attend_and_mlp(rows(c0), q.data() + c0 * Q, s);
    method_of(*seq_).end_prompt(*seq_->method);
    if (progress) progress(l + 1, cfg_.n_layer);
  }
  seq_->cache.set_size(pos0 + T);
  return x;
}

}  // namespace longctx

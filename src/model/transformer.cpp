// transformer.cpp: see transformer.h.
#include "model/transformer.h"

#include <cmath>
#include <cstring>

#include "kernels/ref/ops.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {

Transformer::Transformer(ModelConfig cfg, ModelWeights w, std::unique_ptr<AttentionMethod> method, ThreadPool& pool)
    : cfg_(std::move(cfg)), w_(std::move(w)), method_(std::move(method)), pool_(pool) {
  RopeParams rp;
  rp.head_dim = cfg_.head_dim;
  rp.theta = cfg_.rope_theta;
  // GGUF llama3 models give the scaling as divisors (rope_freqs); the config only names it.
  rp.scaling = w_.rope_freqs.empty() ? cfg_.rope_scaling.type.c_str() : "none";
  rp.factor = cfg_.rope_scaling.factor;
  rp.low_freq_factor = cfg_.rope_scaling.low_freq_factor;
  rp.high_freq_factor = cfg_.rope_scaling.high_freq_factor;
  rp.original_context = cfg_.rope_scaling.original_context;
  inv_freq_.resize(size_t(cfg_.head_dim / 2));
  rope_inv_freq_ref(rp, w_.rope_freqs.empty() ? nullptr : w_.rope_freqs.data(), inv_freq_.data());
}

void Transformer::reset(int64_t capacity) {
  cache_.reset(cfg_.n_layer, capacity, int64_t(cfg_.n_kv_head) * cfg_.head_dim);
}

void Transformer::forward(std::span<const int32_t> tokens, int64_t n_logits, std::vector<float>* logits,
                          const AttnObserver* observer) {
  const int64_t T = int64_t(tokens.size());
  if (T == 0) return;
  const int64_t pos0 = cache_.size();
  if (pos0 + T > cache_.capacity())
    fail("KV cache holds {} tokens; {} more at position {} do not fit", cache_.capacity(), T, pos0);
  const int64_t E = cfg_.n_embd, D = cfg_.head_dim;
  const int64_t Q = int64_t(cfg_.n_head) * D, KV = int64_t(cfg_.n_kv_head) * D, F = cfg_.n_ff;
  const int64_t V = cfg_.vocab_size;

  // Activations for this chunk (T bounded by the caller's prefill chunk size).
  std::vector<float> x(size_t(T * E)), h(size_t(T * E));          // [T, E]
  std::vector<float> q(size_t(T * Q)), o(size_t(T * Q));          // [T, n_head*D]
  std::vector<float> g(size_t(T * F)), u(size_t(T * F));          // [T, F]

  for (int64_t t = 0; t < T; ++t) {
    const int32_t id = tokens[size_t(t)];
    if (id < 0 || id >= V) fail("token id {} is outside the vocabulary (size {})", id, V);
    std::memcpy(x.data() + t * E, w_.tok_embd.data() + int64_t(id) * E, size_t(E) * sizeof(float));
  }

  for (int l = 0; l < cfg_.n_layer; ++l) {
    const LayerWeights& L = w_.layers[size_t(l)];
    float* kc = cache_.k(l) + pos0 * KV;  // this chunk's rows in the cache: [T, KV]
    float* vc = cache_.v(l) + pos0 * KV;

    rmsnorm_ref(x.data(), L.attn_norm.data(), h.data(), T, E, cfg_.rms_eps, pool_);
    auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };
    matmul_ref({h.data(), L.wq.data(), bias(L.bq), q.data(), T, E, Q}, pool_);
    matmul_ref({h.data(), L.wk.data(), bias(L.bk), kc, T, E, KV}, pool_);
    matmul_ref({h.data(), L.wv.data(), bias(L.bv), vc, T, E, KV}, pool_);
    rope_apply_ref(q.data(), T, cfg_.n_head, int(D), pos0, inv_freq_.data(), pool_);
    rope_apply_ref(kc, T, cfg_.n_kv_head, int(D), pos0, inv_freq_.data(), pool_);

    if (observer && *observer) {
      AttnCapture cap{l, T, cfg_.n_head, cfg_.n_kv_head, int(D), q.data(), cache_.k(l), cache_.v(l)};
      (*observer)(cap);
    }

    AttnParams ap;
    ap.q = q.data();
    ap.k = cache_.k(l);
    ap.v = cache_.v(l);
    ap.o = o.data();
    ap.n_q = T;
    ap.n_kv = pos0 + T;
    ap.n_head = cfg_.n_head;
    ap.n_kv_head = cfg_.n_kv_head;
    ap.head_dim = int(D);
    ap.q_pos0 = pos0;
    ap.scale = float(1.0 / std::sqrt(double(D)));
    ap.causal = true;
    ap.layer = l;
    if (T == 1)
      method_->decode(ap, pool_);
    else
      method_->prefill(ap, pool_);

    matmul_ref({o.data(), L.wo.data(), nullptr, h.data(), T, Q, E}, pool_);
    add_ref(x.data(), h.data(), T * E);

    rmsnorm_ref(x.data(), L.ffn_norm.data(), h.data(), T, E, cfg_.rms_eps, pool_);
    matmul_ref({h.data(), L.w_gate.data(), nullptr, g.data(), T, E, F}, pool_);
    matmul_ref({h.data(), L.w_up.data(), nullptr, u.data(), T, E, F}, pool_);
    silu_mul_ref(g.data(), u.data(), T * F, pool_);
    matmul_ref({g.data(), L.w_down.data(), nullptr, h.data(), T, F, E}, pool_);
    add_ref(x.data(), h.data(), T * E);
  }
  cache_.set_size(pos0 + T);

  if (n_logits > 0 && logits) {
    n_logits = std::min(n_logits, T);
    const float* xl = x.data() + (T - n_logits) * E;
    rmsnorm_ref(xl, w_.out_norm.data(), h.data(), n_logits, E, cfg_.rms_eps, pool_);
    logits->resize(size_t(n_logits * V));
    matmul_ref({h.data(), w_.output().data(), nullptr, logits->data(), n_logits, E, V}, pool_);
  }
}

}  // namespace longctx

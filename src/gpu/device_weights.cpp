// device_weights.cpp: see device_weights.h.
#include "gpu/device_weights.h"

#include <cmath>

#include "gpu/gpu_ops.h"
#include "gpu/memory_plan.h"
#include "kernels/cuda/ops.h"
#include "kernels/ref/ops.h"
#include "util/error.h"
#include "util/half.h"

namespace longctx::gpu {

namespace {

constexpr size_t kBf16 = 2;

// Host fp32 -> device bf16, in pieces so that the staging buffer stays small (a 128K x 4096
// embedding is 2 GiB of fp32).
constexpr size_t kStageElems = size_t(16) << 20;

void upload_bf16(void* dst, const float* src, size_t n, cuda::Stream s) {
  std::vector<uint16_t> stage(std::min(n, kStageElems));
  for (size_t i0 = 0; i0 < n; i0 += kStageElems) {
    const size_t m = std::min(kStageElems, n - i0);
    for (size_t i = 0; i < m; ++i) stage[i] = f32_to_bf16(src[i0 + i]);
    cuda::copy_h2d(static_cast<char*>(dst) + i0 * kBf16, stage.data(), m * kBf16, s);
    cuda::stream_sync(s);  // the stage is reused
  }
}

std::vector<float> download_f32(const void* src, size_t n, cuda::Stream s) {
  std::vector<uint16_t> h(n);
  cuda::copy_d2h(h.data(), src, n * kBf16, s);
  cuda::stream_sync(s);
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = bf16_to_f32(h[i]);
  return f;
}

void check_size(const std::vector<float>& v, size_t n, const char* what, int layer) {
  if (v.size() != n) fail("GPU upload: {} of layer {} has {} values, expected {}", what, layer, v.size(), n);
}

// RMSNorm weights go up as (offset + w) (ModelConfig::norm_offset folded in) and come back as w.
void upload_norm(void* dst, const std::vector<float>& w, float offset, cuda::Stream s) {
  std::vector<float> folded(w);
  for (float& x : folded) x += offset;
  upload_bf16(dst, folded.data(), folded.size(), s);
}

std::vector<float> download_norm(const void* src, size_t n, float offset, cuda::Stream s) {
  std::vector<float> w = download_f32(src, n, s);
  for (float& x : w) x -= offset;  // exact: bf16(offset + w) - offset is representable in fp32
  return w;
}

}  // namespace

RopeTables rope_tables(const ModelConfig& c, const std::vector<float>& rope_freqs, int64_t context) {
  const RopeScaling& rs = c.rope_scaling;
  const size_t half = size_t(c.head_dim / 2);
  RopeTables t;
  t.inv_freq.resize(size_t(c.n_layer) * half);
  t.factor.assign(size_t(c.n_layer), 1.f);
  for (int l = 0; l < c.n_layer; ++l) {  // exactly what model/transformer.cpp set_rope does
    const LayerAttention la = c.layer(l);
    RopeParams rp;
    rp.head_dim = c.head_dim;
    rp.theta = la.rope_theta;
    rp.scaling = la.rope_scaled && rope_freqs.empty() ? rs.type.c_str() : "none";
    rp.factor = rs.factor;
    rp.low_freq_factor = rs.low_freq_factor;
    rp.high_freq_factor = rs.high_freq_factor;
    rp.original_context = rs.original_context;
    rp.beta_fast = rs.beta_fast;
    rp.beta_slow = rs.beta_slow;
    rp.truncate = rs.truncate;
    rp.mscale = rs.mscale;
    rp.mscale_all_dim = rs.mscale_all_dim;
    rp.attention_factor = rs.attention_factor;
    rp.longrope_ext = context > rs.original_context ? rs.long_factor.data() : rs.short_factor.data();
    const float* divisors = la.rope_scaled && !rope_freqs.empty() ? rope_freqs.data() : nullptr;
    rope_inv_freq_ref(rp, divisors, t.inv_freq.data() + size_t(l) * half);
    t.factor[size_t(l)] = rope_attention_factor(rp);
  }
  return t;
}

bool DeviceWeights::set_rope_context(int64_t context, cuda::Stream s) {
  if (cfg_.rope_scaling.type != "longrope" && rope_context_ >= 0) return false;  // the tables do not depend on it
  const RopeTables t = rope_tables(cfg_, rope_freqs_, context);
  if (rope_context_ >= 0 && t.inv_freq == rope_inv_host_ && t.factor == rope_factor_) return false;
  cuda::copy_h2d(inv_freq_, t.inv_freq.data(), t.inv_freq.size() * sizeof(float), s);
  cuda::stream_sync(s);  // t is a temporary
  rope_factor_ = t.factor;
  rope_inv_host_ = t.inv_freq;
  rope_context_ = context;
  return true;
}

DeviceWeights& DeviceWeights::operator=(DeviceWeights&& o) noexcept {
  if (this != &o) {
    if (block_) {
      try {
        cuda::dev_free(block_);
      } catch (...) {
      }
    }
    cfg_ = std::move(o.cfg_);
    block_ = o.block_;
    bytes_ = o.bytes_;
    layers_ = std::move(o.layers_);
    tok_embd_ = o.tok_embd_;
    out_norm_ = o.out_norm_;
    lm_head_ = o.lm_head_;
    inv_freq_ = o.inv_freq_;
    rope_factor_ = std::move(o.rope_factor_);
    rope_inv_host_ = std::move(o.rope_inv_host_);
    rope_freqs_ = std::move(o.rope_freqs_);
    rope_context_ = o.rope_context_;
    o.block_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

DeviceWeights::~DeviceWeights() {
  if (block_) {
    try {
      cuda::dev_free(block_);
    } catch (...) {  // never throw from a destructor (e.g. after a sticky device error)
    }
  }
}

void DeviceWeights::allocate(const ModelConfig& c) {
  cfg_ = c;
  bytes_ = weight_bytes(c);
  block_ = cuda::dev_malloc(bytes_);
  char* p = static_cast<char*>(block_);
  size_t off = 0;
  auto take = [&](size_t n_elems, size_t elem = kBf16) {
    void* at = p + off;
    off += align_up(n_elems * elem);
    return at;
  };
  const size_t E = size_t(c.n_embd), Q = size_t(c.n_head) * size_t(c.head_dim);
  const size_t KV = size_t(c.n_kv_head) * size_t(c.head_dim), F = size_t(c.n_ff), V = size_t(c.vocab_size);
  layers_.assign(size_t(c.n_layer), {});
  for (auto& L : layers_) {
    L.attn_norm = take(E);
    if (c.qk_norm) {
      L.q_norm = take(size_t(c.head_dim));
      L.k_norm = take(size_t(c.head_dim));
    }
    if (c.post_norms) {
      L.attn_post_norm = take(E);
      L.ffn_post_norm = take(E);
    }
    L.wq = take(Q * E);
    L.wk = take(KV * E);
    L.wv = take(KV * E);
    if (c.qkv_bias) {
      L.bq = take(Q);
      L.bk = take(KV);
      L.bv = take(KV);
    }
    L.wo = take(E * Q);
    L.ffn_norm = take(E);
    L.w_gate_up = take(2 * F * E);
    L.w_down = take(E * F);
  }
  tok_embd_ = take(V * E);
  out_norm_ = take(E);
  lm_head_ = c.tied_embeddings ? tok_embd_ : take(V * E);
  inv_freq_ = static_cast<float*>(take(size_t(c.n_layer) * size_t(c.head_dim / 2), sizeof(float)));
  if (off != bytes_) fail("internal: GPU weight layout {} bytes != plan {} bytes", off, bytes_);
}

DeviceWeights DeviceWeights::upload(const ModelConfig& c, const ModelWeights& w, cuda::Stream s) {
  DeviceWeights d;
  d.allocate(c);
  const size_t E = size_t(c.n_embd), Q = size_t(c.n_head) * size_t(c.head_dim);
  const size_t KV = size_t(c.n_kv_head) * size_t(c.head_dim), F = size_t(c.n_ff), V = size_t(c.vocab_size);
  if (w.layers.size() != size_t(c.n_layer)) fail("GPU upload: {} layers of weights, config says {}", w.layers.size(), c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = w.layers[size_t(l)];
    const DeviceLayer& D = d.layers_[size_t(l)];
    check_size(L.wq, Q * E, "wq", l);
    check_size(L.wk, KV * E, "wk", l);
    check_size(L.wv, KV * E, "wv", l);
    check_size(L.wo, E * Q, "wo", l);
    check_size(L.w_gate, F * E, "w_gate", l);
    check_size(L.w_up, F * E, "w_up", l);
    check_size(L.w_down, E * F, "w_down", l);
    const float off = c.norm_offset;
    check_size(L.attn_norm, E, "attn_norm", l);
    check_size(L.ffn_norm, E, "ffn_norm", l);
    upload_norm(D.attn_norm, L.attn_norm, off, s);
    if (c.qk_norm) {
      check_size(L.q_norm, size_t(c.head_dim), "q_norm", l);
      check_size(L.k_norm, size_t(c.head_dim), "k_norm", l);
      upload_norm(D.q_norm, L.q_norm, off, s);
      upload_norm(D.k_norm, L.k_norm, off, s);
    }
    if (c.post_norms) {
      check_size(L.attn_post_norm, E, "attn_post_norm", l);
      check_size(L.ffn_post_norm, E, "ffn_post_norm", l);
      upload_norm(D.attn_post_norm, L.attn_post_norm, off, s);
      upload_norm(D.ffn_post_norm, L.ffn_post_norm, off, s);
    }
    upload_bf16(D.wq, L.wq.data(), Q * E, s);
    upload_bf16(D.wk, L.wk.data(), KV * E, s);
    upload_bf16(D.wv, L.wv.data(), KV * E, s);
    if (c.qkv_bias) {
      check_size(L.bq, Q, "bq", l);
      check_size(L.bk, KV, "bk", l);
      check_size(L.bv, KV, "bv", l);
      upload_bf16(D.bq, L.bq.data(), Q, s);
      upload_bf16(D.bk, L.bk.data(), KV, s);
      upload_bf16(D.bv, L.bv.data(), KV, s);
    }
    upload_bf16(D.wo, L.wo.data(), E * Q, s);
    upload_norm(D.ffn_norm, L.ffn_norm, off, s);
    upload_bf16(D.w_gate_up, L.w_gate.data(), F * E, s);
    upload_bf16(static_cast<char*>(D.w_gate_up) + F * E * kBf16, L.w_up.data(), F * E, s);
    upload_bf16(D.w_down, L.w_down.data(), E * F, s);
  }
  if (w.tok_embd.size() != V * E) fail("GPU upload: token embedding has {} values, expected {}", w.tok_embd.size(), V * E);
  upload_bf16(d.tok_embd_, w.tok_embd.data(), V * E, s);
  if (w.out_norm.size() != E) fail("GPU upload: output norm has {} values, expected {}", w.out_norm.size(), E);
  upload_norm(d.out_norm_, w.out_norm, c.norm_offset, s);
  if (!c.tied_embeddings) {
    if (w.lm_head.size() != V * E) fail("GPU upload: LM head has {} values, expected {}", w.lm_head.size(), V * E);
    upload_bf16(d.lm_head_, w.lm_head.data(), V * E, s);
  }
  d.rope_freqs_ = w.rope_freqs;
  d.set_rope_context(0, s);
  return d;
}

DeviceWeights DeviceWeights::random(const ModelConfig& c, uint64_t seed, cuda::Stream s) {
  DeviceWeights d;
  d.allocate(c);
  const int64_t E = c.n_embd, Q = int64_t(c.n_head) * c.head_dim, KV = int64_t(c.n_kv_head) * c.head_dim;
  const int64_t F = c.n_ff, V = c.vocab_size;
  const float sE = std::sqrt(3.f / float(E)), sQ = std::sqrt(3.f / float(Q)), sF = std::sqrt(3.f / float(F));
  constexpr float kBiasScale = 0.1f;  // small, like trained Q/K/V biases relative to the products
  uint64_t tensor = seed * 1000003ull;  // a distinct stream per tensor
  for (const DeviceLayer& L : d.layers_) {
    fill_bf16(L.attn_norm, E, 1.f, s);
    for (void* n : {L.q_norm, L.k_norm})
      if (n) fill_bf16(n, c.head_dim, 1.f, s);
    for (void* n : {L.attn_post_norm, L.ffn_post_norm})
      if (n) fill_bf16(n, E, 1.f, s);
    cuda::fill_random_bf16(L.wq, Q * E, ++tensor, sE, s);
    cuda::fill_random_bf16(L.wk, KV * E, ++tensor, sE, s);
    cuda::fill_random_bf16(L.wv, KV * E, ++tensor, sE, s);
    if (c.qkv_bias) {
      cuda::fill_random_bf16(L.bq, Q, ++tensor, kBiasScale, s);
      cuda::fill_random_bf16(L.bk, KV, ++tensor, kBiasScale, s);
      cuda::fill_random_bf16(L.bv, KV, ++tensor, kBiasScale, s);
    }
    cuda::fill_random_bf16(L.wo, E * Q, ++tensor, sQ, s);
    fill_bf16(L.ffn_norm, E, 1.f, s);
    cuda::fill_random_bf16(L.w_gate_up, 2 * F * E, ++tensor, sE, s);
    cuda::fill_random_bf16(L.w_down, E * F, ++tensor, sF, s);
  }
  cuda::fill_random_bf16(d.tok_embd_, V * E, ++tensor, 1.f, s);
  fill_bf16(d.out_norm_, E, 1.f, s);
  if (!c.tied_embeddings) cuda::fill_random_bf16(d.lm_head_, V * E, ++tensor, sE, s);
  d.set_rope_context(0, s);
  cuda::check_last_error("random weights");
  return d;
}

ModelWeights DeviceWeights::download(cuda::Stream s) const {
  const ModelConfig& c = cfg_;
  const size_t E = size_t(c.n_embd), Q = size_t(c.n_head) * size_t(c.head_dim);
  const size_t KV = size_t(c.n_kv_head) * size_t(c.head_dim), F = size_t(c.n_ff), V = size_t(c.vocab_size);
  ModelWeights w;
  for (const DeviceLayer& D : layers_) {
    LayerWeights L;
    const float off = c.norm_offset;
    L.attn_norm = download_norm(D.attn_norm, E, off, s);
    if (c.qk_norm) {
      L.q_norm = download_norm(D.q_norm, size_t(c.head_dim), off, s);
      L.k_norm = download_norm(D.k_norm, size_t(c.head_dim), off, s);
    }
    if (c.post_norms) {
      L.attn_post_norm = download_norm(D.attn_post_norm, E, off, s);
      L.ffn_post_norm = download_norm(D.ffn_post_norm, E, off, s);
    }
    L.wq = download_f32(D.wq, Q * E, s);
    L.wk = download_f32(D.wk, KV * E, s);
    L.wv = download_f32(D.wv, KV * E, s);
    if (c.qkv_bias) {
      L.bq = download_f32(D.bq, Q, s);
      L.bk = download_f32(D.bk, KV, s);
      L.bv = download_f32(D.bv, KV, s);
    }
    L.wo = download_f32(D.wo, E * Q, s);
    L.ffn_norm = download_norm(D.ffn_norm, E, off, s);
    L.w_gate = download_f32(D.w_gate_up, F * E, s);
    L.w_up = download_f32(static_cast<const char*>(D.w_gate_up) + F * E * kBf16, F * E, s);
    L.w_down = download_f32(D.w_down, E * F, s);
    w.layers.push_back(std::move(L));
  }
  w.tok_embd = download_f32(tok_embd_, V * E, s);
  w.out_norm = download_norm(out_norm_, E, c.norm_offset, s);
  if (!c.tied_embeddings) w.lm_head = download_f32(lm_head_, V * E, s);
  w.rope_freqs = rope_freqs_;
  return w;
}

}  // namespace longctx::gpu

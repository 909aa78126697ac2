// gpu_block.cpp: the parts of GpuTransformer's decoder block that differ between architectures
// (embedding, projections, attention output, MLP); the forward's control flow, KV cache and
// attention routing are gpu_transformer.cpp's. Same math as model/transformer.cpp:
//   x = embed(ids) * embed_scale
//   per layer:  h = rmsnorm(x); q, k, v = Wq h (+ bq), Wk h (+ bk), Wv h (+ bv)
//               q, k = rmsnorm per head (QK-norm: Qwen3, Gemma 3), then RoPE with the layer's
//                      own table and cos/sin factor (Gemma 3 local vs global bases; YaRN, LongRoPE)
//               x += post(Wo attn(q, k, v))            post = rmsnorm with attn_post_norm (Gemma 3)
//               x += post(Wdown act(Wgate h') * Wup h')   h' = rmsnorm(x); act = SiLU or GELU-tanh
// RMSNorm weights carry ModelConfig::norm_offset already (DeviceWeights folds Gemma's (1 + w)).
// Tested against the CPU forward and transformers' logits by tests/gpu/test_gpu_arch.cpp.
#include "gpu/gpu_ops.h"
#include "gpu/gpu_transformer.h"
#include "kernels/cuda/ops.h"

namespace longctx::gpu {

namespace {

constexpr size_t kBf16 = 2;
char* at(void* base, size_t elems) { return static_cast<char*>(base) + elems * kBf16; }

}  // namespace

void GpuTransformer::embed(const int32_t* d_ids, void* out, int64_t n) {
  cuda::EmbeddingParams ep;
  ep.table = w_.tok_embd();
  ep.ids = d_ids;
  ep.out = out;  // [n, n_embd]
  ep.n_tokens = n;
  ep.vocab = cfg_.vocab_size;
  ep.dim = cfg_.n_embd;
  ep.scale = cfg_.embed_scale;
  cuda::embedding(ep, stream_);
}

void GpuTransformer::project(const Projection& r) {
  const DeviceLayer& L = w_.layer(r.l);
  const int64_t T = r.T, E = cfg_.n_embd, D = cfg_.head_dim;
  const int64_t Q = int64_t(cfg_.n_head) * D, KV = int64_t(cfg_.n_kv_head) * D;
  void* h = act(layout_.h);  // [T, E]
  cuda::rmsnorm({r.x, L.attn_norm, h, nullptr, nullptr, T, E, cfg_.rms_eps}, stream_);
  if (r.q) gemm_->run({h, L.wq, r.q, T, Q, E}, stream_);
  if (r.k) gemm_->run({h, L.wk, r.k, T, KV, E}, stream_);
  if (r.v) gemm_->run({h, L.wv, r.v, T, KV, E}, stream_);
  if (cfg_.qkv_bias) {
    if (r.q) bias_add_rows({r.q, L.bq, T, Q, 0}, stream_);
    if (r.k) bias_add_rows({r.k, L.bk, T, KV, 0}, stream_);
    if (r.v) bias_add_rows({r.v, L.bv, T, KV, 0}, stream_);
  }
  if (cfg_.qk_norm) {  // each head's row of head_dim, in place: [T * heads, D]
    if (r.q) cuda::rmsnorm({r.q, L.q_norm, r.q, nullptr, nullptr, T * cfg_.n_head, D, cfg_.rms_eps}, stream_);
    if (r.k) cuda::rmsnorm({r.k, L.k_norm, r.k, nullptr, nullptr, T * cfg_.n_kv_head, D, cfg_.rms_eps}, stream_);
  }
  // RoPE on Q and/or K (the kernel's "q" operand is whichever is present, K then as its "k").
  cuda::RopeParams rp;
  rp.q = r.q ? r.q : r.k;
  rp.n_q_heads = r.q ? cfg_.n_head : cfg_.n_kv_head;
  rp.k = r.q ? r.k : nullptr;
  rp.n_k_heads = r.q && r.k ? cfg_.n_kv_head : 0;
  rp.head_dim = int(D);
  rp.n_tokens = T;
  rp.pos0 = r.pos0;
  rp.positions = r.positions;
  rp.inv_freq = w_.inv_freq(r.l);
  rp.attn_factor = w_.rope_factor(r.l);
  if (rp.q && !pre_rope_layer(r.l)) cuda::rope(rp, stream_);  // pre-RoPE: the method rotates (attend_pre_rope)
  // Benchmarks only: realistic attention structure on random weights. Prefill chunks (and eager
  // decode steps); graph-replayed decode steps (decode_layer) keep the model's Q/K. A function of
  // (layer, position, head), so Q and K made in separate calls get the same values.
  if (synthetic_qk_ && !r.positions) synthetic_qk_->fill({r.q, r.k, T, r.pos0, uint64_t(r.l) + 1}, stream_);
}

void GpuTransformer::attn_out(int l, const void* o, void* x, int64_t n) {
  const DeviceLayer& L = w_.layer(l);
  const int64_t E = cfg_.n_embd, Q = int64_t(cfg_.n_head) * cfg_.head_dim;
  if (!cfg_.post_norms) {
    gemm_->run({o, L.wo, x, n, E, Q, 1.f, 1.f}, stream_);  // x += o Wo^T (residual fused, beta = 1)
    return;
  }
  void* h = act(layout_.h);  // [n, E]: free once the projections are made
  gemm_->run({o, L.wo, h, n, E, Q}, stream_);
  cuda::RmsNormParams np{h, L.attn_post_norm, x, nullptr, nullptr, n, E, cfg_.rms_eps};
  np.add_to_y = true;  // x += rmsnorm(o Wo^T)
  cuda::rmsnorm(np, stream_);
}

void GpuTransformer::mlp(int l, void* x, int64_t n) {
  const DeviceLayer& L = w_.layer(l);
  const int64_t E = cfg_.n_embd, F = cfg_.n_ff;
  void* h = act(layout_.h);      // [mlp_rows, E]
  void* gu = act(layout_.gu);    // [mlp_rows, 2F]
  void* a = act(layout_.act);    // [mlp_rows, F]
  // mlp_rows rows at a time bounds the [rows, 2F] intermediate.
  for (int64_t r0 = 0; r0 < n; r0 += layout_.mlp_rows) {
    const int64_t m = std::min(layout_.mlp_rows, n - r0);
    void* xr = at(x, size_t(r0 * E));
    void* hr = at(h, size_t(r0 * E));
    cuda::rmsnorm({xr, L.ffn_norm, hr, nullptr, nullptr, m, E, cfg_.rms_eps}, stream_);
    gemm_->run({hr, L.w_gate_up, gu, m, 2 * F, E}, stream_);
    cuda::SwiGluParams sp;
    sp.gate = gu;
    sp.up = at(gu, size_t(F));
    sp.out = a;
    sp.n_rows = m;
    sp.dim = F;
    sp.gate_stride = 2 * F;
    sp.up_stride = 2 * F;
    sp.out_stride = F;
    sp.gelu_tanh = cfg_.activation == "gelu_tanh";
    cuda::swiglu(sp, stream_);
    if (!cfg_.post_norms) {
      gemm_->run({a, L.w_down, xr, m, E, F, 1.f, 1.f}, stream_);  // x += act Wdown^T
      continue;
    }
    gemm_->run({a, L.w_down, hr, m, E, F}, stream_);  // hr is free after the gate/up GEMM
    cuda::RmsNormParams np{hr, L.ffn_post_norm, xr, nullptr, nullptr, m, E, cfg_.rms_eps};
    np.add_to_y = true;  // x += rmsnorm(act Wdown^T)
    cuda::rmsnorm(np, stream_);
  }
}

}  // namespace longctx::gpu

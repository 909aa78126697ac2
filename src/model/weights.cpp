// weights.cpp: see weights.h.
#include "model/weights.h"

#include <fmt/format.h>
#include <string>

#include "model/qk_permute.h"
#include "model/tensor_names.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {

namespace {

using namespace tensor_names;

class Reader {
 public:
  Reader(const ModelFile& mf) : mf_(mf), gguf_(mf.format() == "gguf") {}

  std::string name(const TensorName& n, int layer = -1) const {
    const char* pat = gguf_ ? n.gguf : n.hf;
    return layer < 0 ? std::string(pat) : fmt::format(fmt::runtime(pat), layer);
  }
  bool has(const TensorName& n, int layer = -1) const { return mf_.find(name(n, layer)) != nullptr; }

  // Reads a tensor expected to have `shape` (row-major) into fp32.
  std::vector<float> read(const TensorName& n, std::vector<int64_t> shape, int layer = -1) const {
    const std::string nm = name(n, layer);
    const TensorView* t = mf_.find(nm);
    if (!t) fail("{}: missing tensor '{}'", mf_.path(), nm);
    // GGUF stores 1-D norms as [n]; some exporters add a leading 1. Compare element counts
    // and dims ignoring leading 1s.
    auto strip = [](std::vector<int64_t> s) {
      while (s.size() > 1 && s.front() == 1) s.erase(s.begin());
      return s;
    };
    if (strip(t->shape) != strip(shape)) {
      std::string want = "[";
      for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
      want += "]";
      fail("{}: tensor '{}' has shape {}, expected {} from the model config", mf_.path(), nm, t->shape_str(), want);
    }
    std::vector<float> out(size_t(t->numel()));
    const int64_t row = t->shape.back();
    const int64_t rows = t->numel() / row;
    const size_t row_bytes = dtype_row_bytes(t->dtype, row);
    global_pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) dequantize(t->dtype, t->data + r * row_bytes, out.data() + r * row, row);
    }, 64);
    return out;
  }

 private:
  const ModelFile& mf_;
  bool gguf_;
};

}  // namespace

CpuWeights parse_cpu_weights(const std::string& name) {
  if (name == "fp32") return CpuWeights::fp32;
  if (name == "quantized") return CpuWeights::quantized;
  fail("unknown CPU weights '{}' (known: fp32, quantized)", name);
}

namespace {
// Frees the fp32 copy of every matrix that has a quantized one.
void drop_quantized(ModelWeights& w) {
  auto drop = [](std::vector<float>& m, const QuantMatrix& q) {
    if (!q.empty()) std::vector<float>().swap(m);
  };
  if (!w.lm_head.empty()) drop(w.lm_head, w.quant->output);
  for (size_t l = 0; l < w.layers.size(); ++l) {
    LayerWeights& L = w.layers[l];
    const QuantLayerWeights& Q = w.quant->layers[l];
    drop(L.wq, Q.wq), drop(L.wk, Q.wk), drop(L.wv, Q.wv), drop(L.wo, Q.wo);
    drop(L.w_gate, Q.w_gate), drop(L.w_up, Q.w_up), drop(L.w_down, Q.w_down);
  }
}
}  // namespace

ModelWeights ModelWeights::load(const ModelFile& mf, const ModelConfig& c, CpuWeights mode) {
  Reader r(mf);
  ModelWeights w;
  const int64_t E = c.n_embd, D = c.head_dim, Q = int64_t(c.n_head) * D, KV = int64_t(c.n_kv_head) * D;
  w.tok_embd = r.read(kEmbd, {c.vocab_size, E});
  w.out_norm = r.read(kOutNorm, {E});
  if (!c.tied_embeddings) {
    if (!r.has(kOutput)) fail("{}: missing tensor '{}' (the config says embeddings are not tied)", mf.path(), r.name(kOutput));
    w.lm_head = r.read(kOutput, {c.vocab_size, E});
  }
  const bool permuted = mf.format() == "gguf" && c.arch == "llama";
  if (mf.format() == "gguf" && mf.find("rope_freqs.weight")) {
    w.rope_freqs = r.read({"rope_freqs.weight", ""}, {D / 2});
  }
  w.layers.resize(size_t(c.n_layer));
  const bool fused = c.arch == "phi3";
  // Rows [r0, r0 + n) of a row-major matrix with `cols` columns.
  auto rows = [](const std::vector<float>& m, int64_t r0, int64_t n, int64_t cols) {
    return std::vector<float>(m.begin() + r0 * cols, m.begin() + (r0 + n) * cols);
  };
  for (int l = 0; l < c.n_layer; ++l) {
    LayerWeights& L = w.layers[size_t(l)];
    L.attn_norm = r.read(kAttnNorm, {E}, l);
    if (fused) {
      const std::vector<float> qkv = r.read(kWqkv, {Q + 2 * KV, E}, l);
      L.wq = rows(qkv, 0, Q, E);
      L.wk = rows(qkv, Q, KV, E);
      L.wv = rows(qkv, Q + KV, KV, E);
    } else {
      L.wq = r.read(kWq, {Q, E}, l);
      L.wk = r.read(kWk, {KV, E}, l);
      L.wv = r.read(kWv, {KV, E}, l);
    }
    L.wo = r.read(kWo, {E, Q}, l);
    if (c.qk_norm) {
      L.q_norm = r.read(kQNorm, {D}, l);
      L.k_norm = r.read(kKNorm, {D}, l);
    }
    if (c.qkv_bias) {
      L.bq = r.read(kBq, {Q}, l);
      L.bk = r.read(kBk, {KV}, l);
      L.bv = r.read(kBv, {KV}, l);
    }
    if (permuted) {
      L.wq = permute_qk_rows(L.wq, c.n_head, c.head_dim, E, true);
      L.wk = permute_qk_rows(L.wk, c.n_kv_head, c.head_dim, E, true);
      if (!L.bq.empty()) L.bq = permute_qk_rows(L.bq, c.n_head, c.head_dim, 1, true);
      if (!L.bk.empty()) L.bk = permute_qk_rows(L.bk, c.n_kv_head, c.head_dim, 1, true);
    }
    if (c.post_norms) {
      L.attn_post_norm = r.read(kAttnPostNorm, {E}, l);
      L.ffn_norm = r.read(kFfnPreNorm, {E}, l);
      L.ffn_post_norm = r.read(kFfnPostNorm, {E}, l);
    } else {
      L.ffn_norm = r.read(kFfnNorm, {E}, l);
    }
    if (fused) {
      const std::vector<float> gate_up = r.read(kGateUp, {2 * int64_t(c.n_ff), E}, l);
      L.w_gate = rows(gate_up, 0, c.n_ff, E);
      L.w_up = rows(gate_up, c.n_ff, c.n_ff, E);
    } else {
      L.w_gate = r.read(kGate, {c.n_ff, E}, l);
      L.w_up = r.read(kUp, {c.n_ff, E}, l);
    }
    L.w_down = r.read(kDown, {E, c.n_ff}, l);
  }
  if (mode == CpuWeights::quantized) {
    w.quant = std::make_shared<const QuantModelWeights>(QuantModelWeights::load(mf, c));
    drop_quantized(w);
  }
  return w;
}

}  // namespace longctx

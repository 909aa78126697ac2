// quant_weights.cpp: see quant_weights.h.
#include "model/quant_weights.h"

#include <fmt/format.h>

#include <cstring>
#include <numeric>
#include <optional>
#include <string>

#include "loader/quantize.h"
#include "model/qk_permute.h"
#include "model/tensor_names.h"
#include "util/thread_pool.h"

namespace longctx {

namespace {

std::optional<QuantType> native_type(DType t) {
  switch (t) {
    case DType::Q4_0: return QuantType::q4_0;
    case DType::Q4_1: return QuantType::q4_1;
    case DType::Q8_0: return QuantType::q8_0;
    case DType::Q4_K: return QuantType::q4_k;
    default: return std::nullopt;
  }
}

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64; }

// Rows [r0, r0 + n) of tensor t, in the order given by `order` (row i of the result is source row
// r0 + order[i]; identity when empty), as a QuantMatrix; empty when t stays on the fp32 path.
QuantMatrix rows_of(const TensorView& t, int64_t r0, int64_t n, const std::vector<int64_t>& order = {}) {
  QuantMatrix m;
  const int64_t cols = t.shape.back();
  const std::optional<QuantType> nt = native_type(t.dtype);
  if (is_float(t.dtype) || !dtype_info(t.dtype).can_dequantize || cols % kQ8Block != 0) return m;
  if (nt && cols % quant_type_info(*nt).block_size != 0) return m;
  m.type = nt ? *nt : QuantType::q8_0;
  m.rows = n;
  m.cols = cols;
  m.row_bytes = size_t(cols / quant_type_info(m.type).block_size) * size_t(quant_type_info(m.type).block_bytes);
  m.data.resize(size_t(n) * m.row_bytes);
  const size_t src_bytes = dtype_row_bytes(t.dtype, cols);
  global_pool().parallel_for(n, [&](int64_t i0, int64_t i1) {
    std::vector<float> row(nt ? 0 : size_t(cols));
    for (int64_t i = i0; i < i1; ++i) {
      const uint8_t* src = t.data + size_t(r0 + (order.empty() ? i : order[size_t(i)])) * src_bytes;
      uint8_t* dst = m.data.data() + size_t(i) * m.row_bytes;
      if (nt) {
        std::memcpy(dst, src, m.row_bytes);
      } else {  // another block type: its fp32 values, re-quantized to Q8_0
        dequantize(t.dtype, src, row.data(), cols);
        quantize_row_q8_0(row.data(), dst, cols);
      }
    }
  }, 64);
  return m;
}

// Source row of each HF-order Q/K row in a llama GGUF file (qk_permute.h's inverse permutation).
std::vector<int64_t> unpermute_order(int n_heads, int D) {
  std::vector<float> idx(size_t(n_heads) * size_t(D));
  std::iota(idx.begin(), idx.end(), 0.f);  // exact: row counts are far below 2^24
  const std::vector<float> hf = permute_qk_rows(idx, n_heads, D, 1, true);
  return std::vector<int64_t>(hf.begin(), hf.end());
}

}  // namespace

QuantModelWeights QuantModelWeights::load(const ModelFile& mf, const ModelConfig& c) {
  using namespace tensor_names;
  const bool gguf = mf.format() == "gguf";
  auto get = [&](const TensorName& n, int l = -1) -> const TensorView& {
    const char* pat = gguf ? n.gguf : n.hf;
    return mf.get(l < 0 ? std::string(pat) : fmt::format(fmt::runtime(pat), l));
  };
  const int64_t D = c.head_dim, Q = int64_t(c.n_head) * D, KV = int64_t(c.n_kv_head) * D, F = c.n_ff;
  QuantModelWeights w;
  w.output = rows_of(get(c.tied_embeddings ? kEmbd : kOutput), 0, c.vocab_size);
  const bool permuted = gguf && c.arch == "llama";
  const std::vector<int64_t> q_order = permuted ? unpermute_order(c.n_head, c.head_dim) : std::vector<int64_t>{};
  const std::vector<int64_t> k_order = permuted ? unpermute_order(c.n_kv_head, c.head_dim) : std::vector<int64_t>{};
  w.layers.resize(size_t(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    QuantLayerWeights& L = w.layers[size_t(l)];
    if (c.arch == "phi3") {  // fused rows [Q | K | V] and [gate | up]
      const TensorView& qkv = get(kWqkv, l);
      L.wq = rows_of(qkv, 0, Q);
      L.wk = rows_of(qkv, Q, KV);
      L.wv = rows_of(qkv, Q + KV, KV);
      const TensorView& gate_up = get(kGateUp, l);
      L.w_gate = rows_of(gate_up, 0, F);
      L.w_up = rows_of(gate_up, F, F);
    } else {
      L.wq = rows_of(get(kWq, l), 0, Q, q_order);
      L.wk = rows_of(get(kWk, l), 0, KV, k_order);
      L.wv = rows_of(get(kWv, l), 0, KV);
      L.w_gate = rows_of(get(kGate, l), 0, F);
      L.w_up = rows_of(get(kUp, l), 0, F);
    }
    L.wo = rows_of(get(kWo, l), 0, c.n_embd);
    L.w_down = rows_of(get(kDown, l), 0, c.n_embd);
  }
  return w;
}

}  // namespace longctx

// rope_tables.cpp: see rope_tables.h.
#include "model/rope_tables.h"

#include "kernels/ref/ops.h"

namespace longctx {

RopeTables rope_tables(const ModelConfig& c, const std::vector<float>& rope_freqs, int64_t context) {
  const RopeScaling& rs = c.rope_scaling;
  const size_t half = size_t(c.head_dim / 2);
  RopeTables t;
  t.inv_freq.resize(size_t(c.n_layer) * half);
  t.factor.assign(size_t(c.n_layer), 1.f);
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerAttention la = c.layer(l);
    RopeParams rp;
    rp.head_dim = c.head_dim;
    rp.theta = la.rope_theta;
    // GGUF llama3 models give the scaling as divisors (rope_freqs); the config only names it.
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

}  // namespace longctx

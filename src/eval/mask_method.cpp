// mask_method.cpp: any registry method as a fidelity mask (see mask_method.h).
#include "eval/mask_method.h"

#include <algorithm>
#include <cmath>

#include "methods/spec.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx::eval {

namespace {

class MethodMask final : public MaskMethod {
 public:
  MethodMask(std::string spec, std::unique_ptr<AttentionMethod> m) : spec_(std::move(spec)), m_(std::move(m)) {}
  std::string name() const override { return spec_; }

  LayerMask build(const AttnCapture& layer) const override {
    AttnParams p;  // the whole prompt as one prefill chunk
    p.q = layer.q;
    p.k = layer.k;
    p.v = layer.v;
    p.n_q = layer.n_tokens;
    p.n_kv = layer.n_tokens;
    p.n_head = layer.n_head;
    p.n_kv_head = layer.n_kv_head;
    p.head_dim = layer.head_dim;
    p.q_pos0 = 0;
    p.scale = float(1.0 / std::sqrt(double(layer.head_dim)));
    p.layer = layer.layer;
    LayerMask m;
    m.n_tokens = layer.n_tokens;
    if (m_->route(step_of(p, Phase::prefill)) == Route::dense) {  // every causal key
      m.heads.resize(1);
      for (int64_t b = 0; b < m.n_blocks(); ++b)
        m.heads[0].push_back(BlockKeys{{{0, std::min(layer.n_tokens, (b + 1) * kMaskBlockQ)}}, {}});
      return m;
    }
    const auto state = m_->start_sequence();
    const SparseIndex idx = m_->build_index(p, Phase::prefill, *state, global_pool());
    m.heads.resize(idx.heads.size());
    for (size_t h = 0; h < idx.heads.size(); ++h) {
      const HeadIndex& hi = idx.heads[h];
      auto& blocks = m.heads[h];
      blocks.resize(size_t(hi.n_blocks()));
      for (int64_t b = 0; b < hi.n_blocks(); ++b) {
        for (const auto& r : hi.block_ranges(b)) blocks[size_t(b)].ranges.push_back({r.start, r.end});
        for (int32_t c : hi.block_cols(b)) blocks[size_t(b)].cols.push_back(c);
      }
    }
    return m;
  }

 private:
  std::string spec_;
  std::unique_ptr<AttentionMethod> m_;
};

}  // namespace

void check_mask_spec(const std::string& spec) { (void)parse_spec_clauses(spec); }

std::unique_ptr<MaskMethod> make_mask_method(const std::string& spec, const MethodContext& ctx) {
  return std::make_unique<MethodMask>(spec, make_attention_method(spec, ctx));
}

}  // namespace longctx::eval

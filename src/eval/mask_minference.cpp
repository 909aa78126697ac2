// mask_minference.cpp: MInference as a fidelity-evaluation method: `--attn minference=CFG.json`.
//
// For each captured layer, the engine's own MInference index builder (sparse/minference_index.h:
// vertical-slash estimated from the last 64 queries, block-sparse from pooled Q/K, A-shape) runs
// on the captured Q/K with the config's per-head patterns, and its index (one index head per
// query head) is converted to the evaluation's LayerMask. So `longctx eval attention --attn
// dense,minference=cfg.json` reports per-head error and recall of exactly what prefill computes
// for a single-chunk prompt.
#include <cmath>

#include "eval/mask_method.h"
#include "sparse/minference_config.h"
#include "sparse/minference_index.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx::eval {
namespace {

class MInferenceMask final : public MaskMethod {
 public:
  MInferenceMask(std::string spec, MInferenceConfig cfg) : spec_(std::move(spec)), cfg_(std::move(cfg)) {}
  std::string name() const override { return spec_; }

  LayerMask build(const AttnCapture& layer) const override {
    if (layer.layer < 0 || layer.layer >= int(cfg_.layers.size()))
      fail("{}: the config has {} layers, the model's layer {} has none", spec_, cfg_.layers.size(), layer.layer);
    const auto& heads = cfg_.layers[size_t(layer.layer)];
    if (int(heads.size()) != layer.n_head)
      fail("{}: layer {} has {} heads in the config, {} in the model", spec_, layer.layer, heads.size(),
           layer.n_head);
    AttnParams p;
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
    const SparseIndex idx = build_minference_index(p, heads, global_pool());
    LayerMask m;
    m.n_tokens = layer.n_tokens;
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
  MInferenceConfig cfg_;
};

}  // namespace

std::unique_ptr<MaskMethod> make_minference_mask(const std::string& spec, const std::string& arg) {
  if (arg.empty())
    fail("attention method '{}': give the per-head config, minference=CONFIG.json (make one with "
         "`longctx search-patterns`)",
         spec);
  return std::make_unique<MInferenceMask>(spec, MInferenceConfig::load(arg));
}

}  // namespace longctx::eval

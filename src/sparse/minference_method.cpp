// minference_method.cpp: see minference_method.h.
#include "sparse/minference_method.h"

#include <algorithm>
#include <charconv>
#include <span>
#include <vector>
#include <fmt/format.h>

#include "kernels/ref/attention.h"
#include "sparse/method_args.h"
#include "sparse/minference_index.h"
#include "sparse/sparse_attention.h"
#include "util/error.h"

namespace longctx {

namespace {

class MInferenceMethod final : public AttentionMethod {
 public:
  MInferenceMethod(MInferenceConfig cfg, MInferenceOptions opt) : cfg_(std::move(cfg)), opt_(std::move(opt)) {}

  std::string name() const override {
    return fmt::format("minference={}:dense_below={}:dense_layers={}", opt_.config_path, opt_.dense_below,
                       opt_.dense_layers);
  }

  void prefill(const AttnParams& p, ThreadPool& pool) override {
    if (p.layer < 0 || p.layer >= int(cfg_.layers.size()))
      fail("minference: layer {} is outside the config's {} layers", p.layer, cfg_.layers.size());
    if (p.n_q == 0) return;
    if (p.layer < opt_.dense_layers || p.n_kv < opt_.dense_below) {
      attention_dense_ref(p, pool);
      return;
    }
    const bool prompt_wide = prompt_layer_ == p.layer;
    const SparseIndex idx = build_minference_index(p, cfg_.layers[size_t(p.layer)], pool, opt_.ratio,
                                                   prompt_wide ? std::span<const VsLines>(prompt_lines_)
                                                               : std::span<const VsLines>());
    sparse_attention_ref(p, idx, pool);
  }

  void decode(const AttnParams& p, ThreadPool& pool) override { attention_dense_ref(p, pool); }

  bool estimates_per_prompt(int layer, int64_t n_kv) const override {
    if (layer < opt_.dense_layers || n_kv < opt_.dense_below || layer >= int(cfg_.layers.size())) return false;
    const auto& heads = cfg_.layers[size_t(layer)];
    return std::any_of(heads.begin(), heads.end(),
                       [](const HeadPattern& h) { return h.kind == PatternKind::VerticalSlash; });
  }

  void prepare_prompt(const AttnParams& p, ThreadPool& pool) override {
    if (p.layer < 0 || p.layer >= int(cfg_.layers.size()))
      fail("minference: layer {} is outside the config's {} layers", p.layer, cfg_.layers.size());
    prompt_lines_ = estimate_prompt_lines(p, cfg_.layers[size_t(p.layer)], pool, opt_.ratio);
    prompt_layer_ = p.layer;
  }

  void end_prompt() override {
    prompt_layer_ = -1;
    prompt_lines_.clear();
  }

 private:
  MInferenceConfig cfg_;
  MInferenceOptions opt_;
  int prompt_layer_ = -1;              // the layer prompt_lines_ belong to (-1: none)
  std::vector<VsLines> prompt_lines_;  // [n_head] prompt-wide VS lines (empty for other heads)
};

}  // namespace

MInferenceOptions parse_minference_options(const std::string& arg) {
  MInferenceOptions opt;
  for (const auto& piece : split_spec(arg, ':')) {
    const auto eq = piece.find('=');
    if (eq == std::string::npos) {
      if (!opt.config_path.empty())
        fail("minference: two config paths ('{}' and '{}'); options are written key=value", opt.config_path, piece);
      opt.config_path = piece;
      continue;
    }
    const std::string key = piece.substr(0, eq), val = piece.substr(eq + 1);
    if (key == "dense_below") {
      opt.dense_below = parse_count(val, "minference", "dense_below");
    } else if (key == "dense_layers") {
      opt.dense_layers = int(parse_count(val, "minference", "dense_layers"));
    } else if (key == "ratio") {
      double r = -1;
      const auto [ptr, ec] = std::from_chars(val.data(), val.data() + val.size(), r);
      if (val.empty() || ec != std::errc() || ptr != val.data() + val.size() || !(r > 0))
        fail("minference: ratio must be a positive number (got '{}')", val);
      opt.ratio = r;
    } else {
      fail("minference: unknown option '{}' (known: dense_below, dense_layers, ratio)", key);
    }
  }
  return opt;
}

std::unique_ptr<AttentionMethod> make_minference_method(MInferenceConfig cfg, const MInferenceOptions& opt,
                                                        const MethodContext& ctx) {
  cfg.validate(ctx.n_layer, ctx.n_head, ctx.model_name, opt.config_path.empty() ? "(in memory)" : opt.config_path);
  return std::make_unique<MInferenceMethod>(std::move(cfg), opt);
}

std::unique_ptr<AttentionMethod> make_minference_method(const std::string& arg, const MethodContext& ctx) {
  const MInferenceOptions opt = parse_minference_options(arg);
  if (opt.config_path.empty())
    fail("minference: no pattern config given for model '{}'. Make one with `longctx search-patterns -m MODEL "
         "--sample FILE -o CONFIG.json`, then pass --attn minference=CONFIG.json",
         ctx.model_name);
  return make_minference_method(MInferenceConfig::load(opt.config_path), opt, ctx);
}

}  // namespace longctx

// minference_method.cpp: see minference_method.h.
#include "methods/minference/minference_method.h"

#include <algorithm>
#include <charconv>
#include <span>
#include <vector>
#include <fmt/format.h>

#include "kernels/ref/attention.h"
#include "methods/method_args.h"
#include "methods/minference/minference_index.h"
#include "sparse/sparse_attention.h"
#include "util/error.h"

namespace longctx {

std::string MInferenceMethod::name() const {
  std::string n = fmt::format("minference={}:dense_below={}:dense_layers={}", opt_.config_path, opt_.dense_below,
                              opt_.dense_layers);
  if (opt_.ratio != 1.0) n += fmt::format(":ratio={}", opt_.ratio);
  return n;
}

namespace {

// The prompt-wide vertical-slash lines of the layer being prefilled layer-major.
struct MInferenceState final : MethodState {
  int prompt_layer = -1;              // the layer prompt_lines belong to (-1: none)
  std::vector<VsLines> prompt_lines;  // [n_head] prompt-wide VS lines (empty for other heads)
};

}  // namespace

void MInferenceMethod::check_layer(int layer) const {
  if (layer < 0 || layer >= int(cfg_.layers.size()))
    fail("minference: layer {} is outside the config's {} layers", layer, cfg_.layers.size());
}

Route MInferenceMethod::route(const AttnStep& s) const {
  if (s.phase == Phase::decode) return Route::dense;  // a prefill method (the paper decodes densely)
  return s.layer < opt_.dense_layers || s.n_kv < opt_.dense_below ? Route::dense : Route::sparse;
}

std::unique_ptr<MethodState> MInferenceMethod::start_sequence() const { return std::make_unique<MInferenceState>(); }

SparseIndex MInferenceMethod::build_index(const AttnParams& p, Phase, MethodState& state, ThreadPool& pool) const {
  check_layer(p.layer);
  const auto& st = static_cast<const MInferenceState&>(state);
  const bool prompt_wide = st.prompt_layer == p.layer;
  return build_minference_index(p, cfg_.layers[size_t(p.layer)], pool, opt_.ratio,
                                prompt_wide ? std::span<const VsLines>(st.prompt_lines) : std::span<const VsLines>());
}

bool MInferenceMethod::estimates_per_prompt(int layer, int64_t n_kv) const {
  if (layer < opt_.dense_layers || n_kv < opt_.dense_below || layer >= int(cfg_.layers.size())) return false;
  const auto& heads = cfg_.layers[size_t(layer)];
  return std::any_of(heads.begin(), heads.end(), [](const HeadPattern& h) { return h.kind == PatternKind::VerticalSlash; });
}

void MInferenceMethod::prepare_prompt(const AttnParams& p, MethodState& state, ThreadPool& pool) const {
  check_layer(p.layer);
  auto& st = static_cast<MInferenceState&>(state);
  st.prompt_lines = estimate_prompt_lines(p, cfg_.layers[size_t(p.layer)], pool, opt_.ratio);
  st.prompt_layer = p.layer;
}

void MInferenceMethod::end_prompt(MethodState& state) const {
  auto& st = static_cast<MInferenceState&>(state);
  st.prompt_layer = -1;
  st.prompt_lines.clear();
}

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

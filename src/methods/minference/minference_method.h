// minference_method.h: `--attn minference[=CONFIG.json[:OPTION=VALUE...]]`, MInference sparse prefill.
//
// What: per (layer, query head) pattern from a published-format config (minference_config.h);
// every prefill chunk builds that layer's index (minference_index.h) and runs the shared sparse
// mainloop. Decode stays dense (as in the paper).
// Spec: "minference=PATH" or "minference=PATH:opt=val:opt=val" (':'-separated, so PATH must not
// contain ':'). Options:
//   dense_below=N   dense attention while the keys of a chunk (n_kv) number fewer than N
//                   (short prompts gain nothing and pay the index cost; default 0 = never)
//   dense_layers=N  the first N layers stay dense (default 0)
//   ratio=R         scales every VS budget (k_v, k_s), like the reference's minference_ratio
// Chunked prefill: the engine's CPU prefill runs layer-major when a layer has vertical-slash
// heads (Transformer::forward_prompt): one estimate of each VS head's lines per layer from the
// prompt's last 64 queries (prepare_prompt), converted by every chunk for its own query blocks,
// as in the reference and on the GPU. Called chunk by chunk (Transformer::forward), a chunk
// estimates from its own last 64 queries against all cached keys instead.
// Without a config: an error telling the user to run `longctx search-patterns`.
#pragma once
#include <memory>
#include <string>

#include "methods/method.h"
#include "methods/minference/minference_config.h"

namespace longctx {

struct MInferenceOptions {
  std::string config_path;
  int64_t dense_below = 0;
  int dense_layers = 0;
  double ratio = 1.0;
};

// Parses the text after "minference=" (throws Error naming a bad or unknown option).
MInferenceOptions parse_minference_options(const std::string& arg);

// The method: routes by dense_layers / dense_below; per-request state = the prompt-wide lines.
class MInferenceMethod final : public AttentionMethod {
 public:
  MInferenceMethod(MInferenceConfig cfg, MInferenceOptions opt) : cfg_(std::move(cfg)), opt_(std::move(opt)) {}
  std::string name() const override;
  Route route(const AttnStep& s) const override;
  std::unique_ptr<MethodState> start_sequence() const override;
  SparseIndex build_index(const AttnParams& p, Phase phase, MethodState& state, ThreadPool& pool) const override;
  bool estimates_per_prompt(int layer, int64_t n_kv) const override;
  void prepare_prompt(const AttnParams& p, MethodState& state, ThreadPool& pool) const override;
  void end_prompt(MethodState& state) const override;
  const MInferenceConfig& config() const { return cfg_; }
  const MInferenceOptions& options() const { return opt_; }

 private:
  void check_layer(int layer) const;
  MInferenceConfig cfg_;
  MInferenceOptions opt_;
};

// From a parsed config (tests, search): validates it against ctx.
std::unique_ptr<AttentionMethod> make_minference_method(MInferenceConfig cfg, const MInferenceOptions& opt,
                                                        const MethodContext& ctx);
// The registry's factory: parses arg, loads and validates the config.
std::unique_ptr<AttentionMethod> make_minference_method(const std::string& arg, const MethodContext& ctx);

}  // namespace longctx

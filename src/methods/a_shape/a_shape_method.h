// a_shape_method.h: `--attn a_shape[=SINK,WINDOW]`, StreamingLLM-style static sparse attention.
//
// Every query block attends the first SINK keys and its last WINDOW keys (a_shape_index.h), for
// prefill chunks and, when a spec applies it to decode ("decode:a_shape=128,4096"), for decode
// steps (one query: the sinks and its WINDOW most recent keys). By default only prefill is
// sparse (the MInference paper runs its baselines with dense decode). Defaults: the paper's 1024
// sinks + 4096 window. No state, no estimation: the worked example of docs/architecture.md.
#pragma once
#include <memory>
#include <string>

#include "methods/a_shape/a_shape_index.h"
#include "methods/method.h"

namespace longctx {

class AShapeMethod final : public AttentionMethod {
 public:
  explicit AShapeMethod(AShapeParams a) : a_(a) {}
  std::string name() const override;
  Route route(const AttnStep&) const override { return Route::sparse; }
  SparseIndex build_index(const AttnParams& p, Phase phase, MethodState& state, ThreadPool& pool) const override;
  const AShapeParams& params() const { return a_; }

 private:
  AShapeParams a_;
};

// arg: "" (defaults) or "SINK,WINDOW".
std::unique_ptr<AttentionMethod> make_a_shape_method(const std::string& arg, const MethodContext& ctx);

}  // namespace longctx

// dense_method.cpp: dense causal attention as a method: every step routes dense (the model runs
// its dense kernel), so it never builds an index.
#include "methods/method.h"
#include "methods/registry.h"
#include "util/error.h"

namespace longctx {

namespace {

class DenseMethod final : public AttentionMethod {
 public:
  std::string name() const override { return "dense"; }
  Route route(const AttnStep&) const override { return Route::dense; }
  SparseIndex build_index(const AttnParams&, Phase, MethodState&, ThreadPool&) const override {
    fail("internal: the dense method has no sparse index");
  }
};

}  // namespace

std::unique_ptr<AttentionMethod> make_dense_method() { return std::make_unique<DenseMethod>(); }

}  // namespace longctx

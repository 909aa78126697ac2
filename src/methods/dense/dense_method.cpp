// dense_method.cpp: dense causal attention as a method: every step routes dense (the model runs
// its dense kernel), so it never builds an index. With self_extend=G:W (self_extend.h) the keys
// are cached pre-RoPE and the CPU step scores far keys at grouped positions.
#include <fmt/format.h>

#include "methods/method.h"
#include "methods/registry.h"
#include "util/error.h"

namespace longctx {

namespace {

class DenseMethod final : public AttentionMethod {
 public:
  explicit DenseMethod(SelfExtendParams se) : se_(se) {}
  std::string name() const override { return se_.on() ? "dense=" + self_extend_spec(se_) : "dense"; }
  MethodNeeds needs() const override {
    MethodNeeds n;
    if (se_.on()) n.keys = KeyLayout::pre_rope;
    return n;
  }
  Route route(const AttnStep&) const override { return Route::dense; }
  SparseIndex build_index(const AttnParams&, Phase, MethodState&, ThreadPool&) const override {
    fail("internal: the dense method has no sparse index");
  }
  const SelfExtendParams* self_extend(Phase) const override { return se_.on() ? &se_ : nullptr; }

 private:
  SelfExtendParams se_;
};

}  // namespace

std::unique_ptr<AttentionMethod> make_dense_method(SelfExtendParams se) { return std::make_unique<DenseMethod>(se); }

std::unique_ptr<AttentionMethod> make_dense_method_from(const std::string& arg) {
  constexpr std::string_view kKey = "self_extend=";
  if (arg.empty()) return make_dense_method();
  if (arg.rfind(kKey, 0) != 0)
    fail("attention method 'dense' takes only self_extend=G:W (got '{}')", arg);
  return make_dense_method(parse_self_extend(std::string_view(arg).substr(kKey.size()), "dense"));
}

}  // namespace longctx

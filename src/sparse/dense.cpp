// dense.cpp: dense causal attention as an AttentionMethod, and the --attn factory.
#include <string_view>

#include "kernels/ref/attention.h"
#include "sparse/attention_method.h"
#include "sparse/registry.h"
#include "util/error.h"

namespace longctx {

namespace {

class DenseMethod final : public AttentionMethod {
 public:
  std::string name() const override { return "dense"; }
  void prefill(const AttnParams& p, ThreadPool& pool) override { attention_dense_ref(p, pool); }
  void decode(const AttnParams& p, ThreadPool& pool) override { attention_dense_ref(p, pool); }
};

}  // namespace

std::unique_ptr<AttentionMethod> make_dense_method() { return std::make_unique<DenseMethod>(); }

std::unique_ptr<AttentionMethod> make_attention_method(const std::string& spec, const MethodContext& ctx) {
  const auto eq = spec.find('=');
  const std::string name = spec.substr(0, eq);
  const std::string arg = eq == std::string::npos ? "" : spec.substr(eq + 1);
  for (const auto& entry : method_registry()) {
    if (name == entry.name) return entry.make(arg, ctx);
  }
  std::string known;
  for (const auto& entry : method_registry()) known += std::string(known.empty() ? "" : ", ") + entry.name;
  fail("unknown attention method '{}' (known: {})", name, known);
}

}  // namespace longctx

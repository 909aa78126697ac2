// registry_gpu.cpp: the GPU builders of the registry's methods (gpu_method.h). Adding a method's
// GPU side = its <method>_gpu.cpp + one line in gpu_builders().
#include <fmt/format.h>

#include "methods/a_shape/a_shape_gpu.h"
#include "methods/gpu_method.h"
#include "methods/minference/minference_gpu.h"
#include "methods/phase_method.h"
#include "util/error.h"

namespace longctx {

namespace {

using GpuFactory = std::unique_ptr<GpuMethod> (*)(const AttentionMethod&, const MethodContext&);

// Each entry makes the GPU side of methods of its class (nullptr for any other method).
template <class M, std::unique_ptr<GpuMethod> (*Make)(const M&, const MethodContext&)>
std::unique_ptr<GpuMethod> of(const AttentionMethod& m, const MethodContext& ctx) {
  const auto* mm = dynamic_cast<const M*>(&m);
  return mm ? Make(*mm, ctx) : nullptr;
}

const std::vector<GpuFactory>& gpu_builders() {
  static const std::vector<GpuFactory> v = {
      of<AShapeMethod, make_a_shape_gpu>,
      of<MInferenceMethod, make_minference_gpu>,
  };
  return v;
}

// Whether m routes any step sparse: probes the largest step of every layer (methods route
// dense below thresholds, never above them).
bool ever_sparse(const AttentionMethod& m, const MethodContext& ctx, Phase ph) {
  constexpr int64_t kHuge = int64_t(1) << 40;
  for (int l = 0; l < ctx.n_layer; ++l)
    if (m.route({.layer = l, .phase = ph, .n_q = ph == Phase::decode ? 1 : 2, .q_pos0 = kHuge - 2, .n_kv = kHuge}) ==
        Route::sparse)
      return true;
  return false;
}

std::string problem_of(const AttentionMethod& m, const MethodContext& ctx, const AttentionMethod** prefill_side) {
  const AttentionMethod* pre = &m;
  if (const auto* ph = dynamic_cast<const PhaseMethod*>(&m)) {
    pre = ph->side(Phase::prefill);
    if (const AttentionMethod* dec = ph->side(Phase::decode); dec && ever_sparse(*dec, ctx, Phase::decode))
      return fmt::format("sparse decode ('{}') is not built on the GPU yet", m.name());
  } else if (ever_sparse(m, ctx, Phase::decode)) {
    return fmt::format("sparse decode ('{}') is not built on the GPU yet", m.name());
  }
  *prefill_side = pre && ever_sparse(*pre, ctx, Phase::prefill) ? pre : nullptr;
  if (!*prefill_side) return "";
  // cuda::sparse_attention runs head_dim 128 on the Hopper kernel, 64 on the generic one.
  if (ctx.head_dim != 128 && ctx.head_dim != 64)
    return fmt::format("attention method '{}' on the GPU needs head_dim 64 or 128, but {} has head_dim {}", m.name(),
                       ctx.model_name, ctx.head_dim);
  return "";
}

}  // namespace

std::string gpu_method_problem(const AttentionMethod& m, const MethodContext& ctx) {
  const AttentionMethod* pre = nullptr;
  std::string p = problem_of(m, ctx, &pre);
  if (!p.empty() || !pre) return p;
  for (GpuFactory f : gpu_builders())
    if (f(*pre, ctx)) return "";
  return fmt::format("attention method '{}' is not implemented on the GPU", pre->name());
}

std::unique_ptr<GpuMethod> make_gpu_method(const AttentionMethod& m, const MethodContext& ctx) {
  const AttentionMethod* pre = nullptr;
  if (const std::string p = problem_of(m, ctx, &pre); !p.empty()) fail("{}; use --device cpu", p);
  if (!pre) return nullptr;
  for (GpuFactory f : gpu_builders())
    if (auto g = f(*pre, ctx)) return g;
  fail("attention method '{}' is not implemented on the GPU; use --device cpu", pre->name());
}

}  // namespace longctx

// registry_gpu.cpp: the GPU builders of the registry's methods (gpu_method.h). Adding a method's
// GPU side = its <method>_gpu.cpp + one line in gpu_builders().
#include <fmt/format.h>

#include "methods/a_shape/a_shape_gpu.h"
#include "methods/gpu_method.h"
#include "methods/hip/hip_gpu.h"
#include "methods/infinitehip/infinitehip_gpu.h"
#include "methods/minference/minference_gpu.h"
#include "methods/phase_method.h"
#include "methods/self_extend/hip_self_extend_gpu.h"
#include "methods/self_extend/self_extend_gpu.h"
#include "methods/tokenselect/tokenselect_engine_gpu.h"
#include "util/error.h"

namespace longctx {

GpuDecodeIndex GpuMethod::build_decode(const GpuDecodeStep&, cuda::Stream) {
  fail("internal: this method has no GPU decode builder");
}

void GpuMethod::attend(const GpuAttendStep&, cuda::Stream) {
  fail("internal: this method's GPU builder reads rotated keys (no attend())");
}

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
      of<HipMethod, make_hip_gpu>,
      of<TokenSelectMethod, make_tokenselect_gpu>,
      of<InfiniteHipMethod, make_infinitehip_gpu>,
  };
  return v;
}

// Whether m routes any step of phase ph sparse: probes the largest step of every layer (methods
// route dense below thresholds, never above them).
bool ever_sparse(const AttentionMethod& m, const MethodContext& ctx, Phase ph) {
  constexpr int64_t kHuge = int64_t(1) << 40;
  for (int l = 0; l < ctx.n_layer; ++l)
    if (m.route({.layer = l, .phase = ph, .n_q = ph == Phase::decode ? 1 : 2, .q_pos0 = kHuge - 2, .n_kv = kHuge}) ==
        Route::sparse)
      return true;
  return false;
}

// The two sides of a per-phase composition, each with its own builder and buffers.
class GpuPhaseMethod final : public GpuMethod {
 public:
  GpuPhaseMethod(std::unique_ptr<GpuMethod> prefill, std::unique_ptr<GpuMethod> decode)
      : prefill_(std::move(prefill)), decode_(std::move(decode)) {}
  size_t device_bytes(const GpuShape& shape) const override {
    return (prefill_ ? prefill_->device_bytes(shape) : 0) + (decode_ ? decode_->device_bytes(shape) : 0);
  }
  void allocate(const GpuShape& shape, cuda::Stream s) override {
    if (prefill_) prefill_->allocate(shape, s);
    if (decode_) decode_->allocate(shape, s);
  }
  void release() override {
    if (prefill_) prefill_->release();
    if (decode_) decode_->release();
  }
  GpuIndex build_prefill(const GpuPrefillStep& step, cuda::Stream s) override {
    if (!prefill_) fail("internal: sparse prefill step with no prefill builder");
    return prefill_->build_prefill(step, s);
  }
  void prepare_prompt(const GpuPrefillStep& step, cuda::Stream s) override {
    if (prefill_) prefill_->prepare_prompt(step, s);
  }
  void end_prompt() override {
    if (prefill_) prefill_->end_prompt();
  }
  GpuDecodeIndex build_decode(const GpuDecodeStep& step, cuda::Stream s) override {
    if (!decode_) fail("internal: sparse decode step with no decode builder");
    return decode_->build_decode(step, s);
  }
  bool decodes() const override { return decode_ != nullptr; }
  bool decode_reads_fp8() const override { return !decode_ || decode_->decode_reads_fp8(); }
  int offload_line_tokens() const override { return decode_ ? decode_->offload_line_tokens() : 0; }
  // Prefill builders keep nothing across prompts (a builder that also decodes, e.g. InfiniteHiP's,
  // keeps its decode caches, unused as a prefill side): the decode side decides.
  bool keeps_sequence_state() const override { return decode_ && decode_->keeps_sequence_state(); }
  void start_sequence(cuda::Stream s) override {
    if (prefill_) prefill_->start_sequence(s);
    if (decode_) decode_->start_sequence(s);
  }

 private:
  std::unique_ptr<GpuMethod> prefill_, decode_;
};

struct Sides {
  const AttentionMethod* prefill = nullptr;  // null: every prefill step is dense
  const AttentionMethod* decode = nullptr;   // null: every decode step is dense
};

Sides sparse_sides(const AttentionMethod& m, const MethodContext& ctx) {
  Sides s{&m, &m};
  if (const auto* ph = dynamic_cast<const PhaseMethod*>(&m)) s = {ph->side(Phase::prefill), ph->side(Phase::decode)};
  if (s.prefill && !ever_sparse(*s.prefill, ctx, Phase::prefill)) s.prefill = nullptr;
  if (s.decode && !ever_sparse(*s.decode, ctx, Phase::decode)) s.decode = nullptr;
  return s;
}

// A factory that cannot serve this configuration throws Error saying why: that text becomes why.
std::unique_ptr<GpuMethod> builder_of(const AttentionMethod& m, const MethodContext& ctx, std::string& why) {
  try {
    for (GpuFactory f : gpu_builders())
      if (auto g = f(m, ctx)) return g;
  } catch (const Error& e) {
    why = e.what();
  }
  return nullptr;
}

// The GPU side, or why there is none ("" and a null builder: every step is dense).
std::unique_ptr<GpuMethod> try_make(const AttentionMethod& m, const MethodContext& ctx, std::string& why) {
  // Self-Extend (pre-RoPE keys) owns every step, both phases alike: dense (self_extend_gpu.h), or
  // with HiP's selection on the phases whose steps HiP routes sparse (hip_self_extend_gpu.h).
  const SelfExtendParams* se_pre = m.self_extend(Phase::prefill);
  const SelfExtendParams* se_dec = m.self_extend(Phase::decode);
  if (se_pre || se_dec) {
    const Sides sd = sparse_sides(m, ctx);
    const auto* hip_pre = dynamic_cast<const HipMethod*>(sd.prefill);
    const auto* hip_dec = dynamic_cast<const HipMethod*>(sd.decode);
    if (!se_pre || !se_dec || se_pre->group != se_dec->group || se_pre->neighbor != se_dec->neighbor)
      why = fmt::format("attention method '{}': Self-Extend on the GPU needs the same self_extend=G:W in both phases",
                        m.name());
    else if ((sd.prefill && !hip_pre) || (sd.decode && !hip_dec))
      why = fmt::format("attention method '{}': Self-Extend on the GPU runs with dense or hip steps only (e.g. "
                        "hip=self_extend=G:W or dense=self_extend=G:W)", m.name());
    else
      try {
        if (hip_pre || hip_dec) return make_hip_self_extend_gpu(*se_pre, hip_pre, hip_dec, ctx);
        return make_self_extend_gpu(*se_pre, ctx);
      } catch (const Error& e) {
        why = e.what();
      }
    return nullptr;
  }
  const Sides s = sparse_sides(m, ctx);
  if (!s.prefill && !s.decode) return nullptr;
  // Head dims: the sparse prefill and decode kernels run 64, 128 and 256 (Gemma 3's global
  // layers), and so does every method's own GPU part (A-shape's index, MInference's index
  // builders, HiP's estimator, InfiniteHiP's pruning stages, TokenSelect's paged_dot and
  // compaction); a method that takes fewer sizes refuses the rest in its factory, with its reason.
  auto runs_head_dim = [&](const AttentionMethod* side) {
    return !side || ctx.head_dim == 64 || ctx.head_dim == 128 || ctx.head_dim == 256;
  };
  if (!runs_head_dim(s.prefill) || !runs_head_dim(s.decode)) {
    why = fmt::format("attention method '{}' on the GPU needs head_dim 64, 128 or 256, but {} has head_dim {}",
                      m.name(), ctx.model_name, ctx.head_dim);
    return nullptr;
  }
  std::unique_ptr<GpuMethod> pre, dec;
  if (s.prefill && !(pre = builder_of(*s.prefill, ctx, why))) {
    if (why.empty()) why = fmt::format("attention method '{}' is not implemented on the GPU", s.prefill->name());
    return nullptr;
  }
  // A pre-RoPE method owns every attention step of the model (gpu_method.h): one method, both
  // phases. Checked after the builder, whose own refusal (e.g. InfiniteHiP's rope=on) names its reason.
  if (m.needs().keys == KeyLayout::pre_rope && (s.prefill != &m || s.decode != &m)) {
    why = fmt::format("attention method '{}' keeps pre-RoPE keys: on the GPU it must run both phases as one "
                      "method (e.g. --attn tokenselect)", m.name());
    return nullptr;
  }
  if (s.decode == s.prefill && pre) {  // one method for both phases: one builder serves both
    if (!pre->decodes()) why = fmt::format("sparse decode ('{}') is not implemented on the GPU", s.decode->name());
    return why.empty() ? std::move(pre) : nullptr;
  }
  if (s.decode && (!(dec = builder_of(*s.decode, ctx, why)) || !dec->decodes())) {
    if (why.empty()) why = fmt::format("sparse decode ('{}') is not implemented on the GPU", s.decode->name());
    return nullptr;
  }
  return std::make_unique<GpuPhaseMethod>(std::move(pre), std::move(dec));
}

}  // namespace

std::string gpu_method_problem(const AttentionMethod& m, const MethodContext& ctx) {
  std::string why;
  (void)try_make(m, ctx, why);
  return why;
}

std::unique_ptr<GpuMethod> make_gpu_method(const AttentionMethod& m, const MethodContext& ctx) {
  std::string why;
  auto g = try_make(m, ctx, why);
  if (!why.empty()) fail("{}; use --device cpu", why);
  return g;
}

}  // namespace longctx

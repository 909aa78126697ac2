// phase_method.h: two methods composed per phase ("prefill:X;decode:Y", spec.h): prefill steps
// go to one, decode steps to the other; a missing side runs dense. Its state holds one state per
// side. The GPU registry (registry_gpu.cpp) reads the sides through side().
#pragma once
#include <memory>
#include <string>

#include "methods/method.h"
#include "util/error.h"

namespace longctx {

class PhaseMethod final : public AttentionMethod {
 public:
  PhaseMethod(std::unique_ptr<AttentionMethod> prefill, std::unique_ptr<AttentionMethod> decode, std::string name)
      : prefill_(std::move(prefill)), decode_(std::move(decode)), name_(std::move(name)) {}

  std::string name() const override { return name_; }
  MethodNeeds needs() const override {
    MethodNeeds n;
    for (const auto* m : {prefill_.get(), decode_.get()}) {
      if (!m) continue;
      const MethodNeeds o = m->needs();
      if (o.keys != KeyLayout::rotated) n.keys = o.keys;
      if (o.page_size) n.page_size = o.page_size;
      n.offload = n.offload || o.offload;
    }
    return n;
  }
  Route route(const AttnStep& s) const override {
    const AttentionMethod* m = side(s.phase);
    return m ? m->route(s) : Route::dense;
  }
  std::unique_ptr<MethodState> start_sequence() const override {
    auto st = std::make_unique<State>();
    if (prefill_) st->prefill = prefill_->start_sequence();
    if (decode_) st->decode = decode_->start_sequence();
    return st;
  }
  SparseIndex build_index(const AttnParams& p, Phase phase, MethodState& state, ThreadPool& pool) const override {
    const AttentionMethod* m = side(phase);
    if (!m) fail("internal: index asked for a dense {} step", phase == Phase::prefill ? "prefill" : "decode");
    return m->build_index(p, phase, sub(state, phase), pool);
  }
  // Pre-RoPE keys: the side's key sets; a dense side attends every key at its own position.
  std::vector<KeySegment> select_keys(const AttnParams& p, Phase phase, const LayerRope& rope, MethodState& state,
                                      ThreadPool& pool) const override {
    if (const AttentionMethod* m = side(phase)) return m->select_keys(p, phase, rope, sub(state, phase), pool);
    std::vector<KeySegment> all(1, KeySegment{0, p.n_q, std::vector<int32_t>(size_t(p.n_kv))});
    for (int64_t j = 0; j < p.n_kv; ++j) all[0].keys[size_t(j)] = int32_t(j);
    return all;
  }
  const SelfExtendParams* self_extend(Phase phase) const override {
    const AttentionMethod* m = side(phase);
    return m ? m->self_extend(phase) : nullptr;
  }
  bool estimates_per_prompt(int layer, int64_t n_kv) const override {
    return prefill_ && prefill_->estimates_per_prompt(layer, n_kv);
  }
  void prepare_prompt(const AttnParams& p, MethodState& state, ThreadPool& pool) const override {
    if (prefill_) prefill_->prepare_prompt(p, sub(state, Phase::prefill), pool);
  }
  void end_prompt(MethodState& state) const override {
    if (prefill_) prefill_->end_prompt(sub(state, Phase::prefill));
  }
  const AttentionMethod* side(Phase ph) const { return ph == Phase::prefill ? prefill_.get() : decode_.get(); }

 private:
  struct State final : MethodState {
    std::unique_ptr<MethodState> prefill, decode;
  };
  static MethodState& sub(MethodState& s, Phase ph) {
    auto& st = static_cast<State&>(s);
    return *(ph == Phase::prefill ? st.prefill : st.decode);
  }
  std::unique_ptr<AttentionMethod> prefill_, decode_;
  std::string name_;
};

}  // namespace longctx

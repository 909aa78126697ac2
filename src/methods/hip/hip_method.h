// hip_method.h: `--attn hip[=KEY=VAL,...]`, HiP attention (Lee et al., "A Training-Free
// Sub-quadratic Cost Transformer Model Serving Framework with Hierarchically Pruned Attention").
//
// What: every layer from dense_layers on attends, per query head and 64-query block, the sinks,
// the k/b_k key blocks the hierarchical top-k picks (hip_mask.h) and a sliding window, for
// prefill and decode (the paper's default: both phases sparse). A step whose keys fit in
// sinks + window + k (n_kv - window - sinks <= k) is dense: nothing would be pruned.
// Decode caches the mask per layer in the sequence's state and re-estimates it every `refresh`
// steps (r_m): a step re-estimates when the layer has no mask, when refresh steps have passed
// since the last estimate, or when the position went back (a new request); the same step asked
// twice reuses its estimate. Between refreshes the
// window is anchored at the last estimate's region end, so the keys that slide out of a
// `window`-key window stay attended (the window grows to at most window + refresh - 1 keys) and
// no key falls between the cached blocks and the window; refresh <= window is required.
// Spec: hip=k=512,b_q=64,b_sq=2,b_k=2,b_sk=1,window=256,sinks=16,refresh=8,dense_layers=3 (any
// subset, any order; these are the paper's defaults). b_q must be 64 (the sparse index's query
// block). Composes per phase as every method: "prefill:minference=CFG;decode:hip".
// self_extend=G:W (self_extend.h; on the GPU: methods/self_extend/hip_self_extend_gpu.h): keys are cached pre-RoPE; the estimator ranks the
// search region with q and k rotated at the grouped positions (SE2) for every candidate (the
// region starts >= window keys behind each row, mostly beyond W; no score calibration across the
// boundary, unlike the authors' kernel), and the selected pairs are scored near (SE1) or grouped
// (SE2) per pair in one softmax (self_extend_attention.h). Decode's cached mask is reused as is.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "methods/hip/hip_mask.h"
#include "methods/method.h"

namespace longctx {

// Parses the text after "hip=" (throws Error naming a bad or unknown key).
HipParams parse_hip_params(const std::string& arg);

// A sequence's decode mask cache, one entry per layer.
struct HipDecodeCache {
  int64_t refresh_pos = -1;  // position of the step that estimated the mask (-1: none)
  int64_t key_end = 0;       // that step's region end (the window starts here until the next one)
  HipMask mask;              // [n_head] blocks of the one decode query
};

class HipState final : public MethodState {
 public:
  std::vector<HipDecodeCache> layers;
  int64_t estimates = 0;  // decode steps that re-estimated (for tests and stats)
};

// Whether a decode step at position pos re-estimates, given the layer's cache (the GPU builder
// applies the same rule on the device).
inline bool hip_refreshes(int64_t refresh_pos, int64_t pos, int refresh) {
  return refresh_pos < 0 || pos < refresh_pos || pos - refresh_pos >= refresh;
}

class HipMethod final : public AttentionMethod {
 public:
  explicit HipMethod(HipParams hp) : hp_(hp) {}
  std::string name() const override;
  MethodNeeds needs() const override {
    MethodNeeds n;
    if (hp_.self_extend.on()) n.keys = KeyLayout::pre_rope;
    return n;
  }
  const SelfExtendParams* self_extend(Phase) const override {
    return hp_.self_extend.on() ? &hp_.self_extend : nullptr;
  }
  Route route(const AttnStep& step) const override;
  std::unique_ptr<MethodState> start_sequence() const override { return std::make_unique<HipState>(); }
  SparseIndex build_index(const AttnParams& p, Phase phase, MethodState& state, ThreadPool& pool) const override;
  const HipParams& params() const { return hp_; }

 private:
  SparseIndex decode_index(const AttnParams& p, HipState& st, ThreadPool& pool) const;
  HipParams hp_;
};

std::unique_ptr<AttentionMethod> make_hip_method(const std::string& arg, const MethodContext& ctx);

}  // namespace longctx

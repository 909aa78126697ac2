// infinitehip_method.h: `--attn infinitehip[=PRESET,KEY=VAL,...]`, InfiniteHiP (multi-stage
// context pruning, per-stage decode mask caches, RoPE extrapolation; seeds/002, digest
// shared/notes/infinitehip.md). Spec and options: ihip_params.h.
//
// What, per layer not in dense_layers and per step (prefill chunk or decode token):
//   prefill  every 64-query block of the chunk runs all N pruning stages (ihip_mask.h) and
//            attends sinks + survivors + its streaming window (chunked prefill is the engine's:
//            each chunk's queries against every key so far);
//   decode   the stage outputs are cached per layer in the sequence's State and stage i is
//            refreshed every refresh[i] steps (the paper's Algorithm 4): a step refreshes from the
//            first stage s whose cache is missing, older than refresh[s] steps, or ahead of the
//            step (a new request), and then every stage after s too (with the presets' nested
//            schedules this is exactly Algorithm 4's counters; the step types are the paper's
//            None / S1 / S1&2 / All). Between stage-1 refreshes the window stays anchored at the
//            refresh's candidate end, so tokens that slide out of the n_stream-token window stay
//            attended until the next stage-1 refresh makes them candidates (the window grows to
//            at most n_stream + refresh[0] - 1 tokens).
// A step is dense when nothing would be pruned (the last row's candidates fit the smallest k).
// Keys: rope=on (default) caches keys un-rotated (KeyLayout::pre_rope): pruning rotates q and
// the probed keys at the paper's positions (ihip_prune.h: chunk-indexed in the first
// early_layers layers, relative in the rest) and the attention numbers each block's key set
// 0..L-1 in position order, the block's queries last (StreamingLLM-style, methods/run_cpu.h's
// attend_compacted_ref): no distance exceeds the ~3.3K attended keys, which is what lets a model
// run past its trained context. rope=off: the usual rotated cache, pruning on the rotated q.k,
// the sparse mainloop at absolute positions.
// Decisions on the paper's ambiguities: docs/architecture.md, "InfiniteHiP".
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "methods/infinitehip/ihip_mask.h"
#include "methods/infinitehip/ihip_params.h"
#include "methods/method.h"

namespace longctx {

class InfiniteHipMethod final : public AttentionMethod {
 public:
  explicit InfiniteHipMethod(IhipParams hp) : hp_(std::move(hp)) {}
  std::string name() const override { return "infinitehip=" + ihip_params_text(hp_); }
  MethodNeeds needs() const override {
    return {.keys = hp_.rope ? KeyLayout::pre_rope : KeyLayout::rotated, .page_size = 0, .offload = false};
  }
  Route route(const AttnStep& step) const override;
  std::unique_ptr<MethodState> start_sequence() const override { return std::make_unique<State>(); }
  SparseIndex build_index(const AttnParams& p, Phase phase, MethodState& state, ThreadPool& pool) const override;
  std::vector<KeySegment> select_keys(const AttnParams& p, Phase phase, const LayerRope& rope, MethodState& state,
                                      ThreadPool& pool) const override;
  const IhipParams& params() const { return hp_; }

  // A sequence's decode caches (exposed for tests and statistics).
  struct State final : MethodState {
    struct Layer {
      std::vector<int64_t> refresh_pos;           // [N] step position of each stage's last refresh (-1: none)
      std::vector<std::vector<int32_t>> outs;     // [N] each stage's cached output
      int64_t win_begin = 0;                      // the window's start, anchored at the stage-1 refresh
    };
    std::vector<Layer> layers;
    std::vector<int64_t> refreshes;  // [N] decode steps that refreshed stage i (and so every later one)
    int64_t cached_steps = 0;        // decode steps that refreshed nothing
    std::map<std::pair<const float*, int64_t>, IhipRopeTable> tables;  // (inv_freq, n_pos) -> cos/sin
  };

 private:
  // The key sets of p's blocks (one per 64-row block; one for a decode token).
  std::vector<IhipKeySet> key_sets(const AttnParams& p, Phase phase, const LayerRope* rope, State& st,
                                   ThreadPool& pool) const;
  IhipKeySet decode_set(const AttnParams& p, const IhipRopeTable* table, State& st) const;
  IhipParams hp_;
};

std::unique_ptr<AttentionMethod> make_infinitehip_method(const std::string& arg, const MethodContext& ctx);

}  // namespace longctx

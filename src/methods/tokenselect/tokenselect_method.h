// tokenselect_method.h: `--attn tokenselect[=KEY=VAL,...]`, dynamic token-level KV selection
// (TokenSelect, arXiv 2411.02886 v1; digest: shared/notes/tokenselect.md).
//
// What, per layer and step (prefill chunk or decode token), one key set shared by every head:
// n_init initial + k selected + n_local recent tokens (tokenselect_select.h), dense when the
// context fits that budget. Prefill: queries in sub-chunks of `chunk` rows; each selects once
// with the mean of its queries, against every key so far (its own rows sit in the local window:
// n_local >= chunk is required, so no query can see a later token). Decode: the selection cache
// (paper Alg. 1, per layer, in the MethodState): a new query whose cosine to the query of the
// last selection is >= theta reuses that selection; a miss selects again and replaces both.
// Keys (keys=pre_rope, default): cached un-rotated; the attention step rotates the selected keys
// at their compacted positions 0..L-1 and the queries at L-C+i (methods/run_cpu.h), so no
// distance exceeds the budget: the paper's length extrapolation. The selection query is then
// rotated at n_local + i against un-rotated keys (the authors' code). keys=rotated: the usual
// rotated cache, plain selection (the sparse mainloop over the set at absolute positions; the
// selection scores are the rotated q.k), which composes with rotated-key methods such as
// minference.
// Options (comma-separated KEY=VAL, any order): n_init, k, n_local, chunk (multiple of 64),
// theta (cosine threshold; > 1 disables the cache), vote=soft|hard|naive, keys=pre_rope|rotated,
// scores=f32|f16 (the per-head scores rounded to fp16 before the vote: on the GPU half the bytes
// of the scores; keeps 99.96% of the f32 selection on the default model, docs/benchmarks.md).
//   --attn tokenselect                       the paper's 2K+512, pre-RoPE keys, soft vote
//   --attn 'tokenselect=k=4096,n_local=4096' the paper's "4K+4K"
//   --attn 'prefill:minference=cfg.json;decode:tokenselect=keys=rotated'
// Engines: the CPU model, and the GPU model for keys=pre_rope with vote=soft (its GpuMethod,
// tokenselect_engine_gpu.h, runs TokenSelectGpuStep: selection + compacted pre-RoPE attention,
// tested against this class; the other variants are refused there with a message).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "methods/method.h"
#include "methods/tokenselect/tokenselect_select.h"

namespace longctx {

class TokenSelectMethod final : public AttentionMethod {
 public:
  explicit TokenSelectMethod(TokenSelectParams t) : t_(t) {}
  std::string name() const override;
  MethodNeeds needs() const override { return {.keys = t_.keys, .page_size = 0, .offload = false}; }
  // Dense while the context fits the budget (the selection would keep every key).
  Route route(const AttnStep& s) const override { return s.n_kv <= t_.budget() ? Route::dense : Route::sparse; }
  std::unique_ptr<MethodState> start_sequence() const override;
  // keys=rotated: the key sets as ranges (initial, local) and columns (selected) per query block.
  SparseIndex build_index(const AttnParams& p, Phase phase, MethodState& state, ThreadPool& pool) const override;
  // keys=pre_rope: the key sets of the step's sub-chunks.
  std::vector<KeySegment> select_keys(const AttnParams& p, Phase phase, const LayerRope& rope, MethodState& state,
                                      ThreadPool& pool) const override;
  const TokenSelectParams& params() const { return t_; }

  // The selection cache of one sequence (exposed for tests and statistics).
  struct State final : MethodState {
    struct Layer {
      bool first = true;               // no selection yet in this request
      std::vector<float> q;            // [n_head * head_dim] the query of the last selection
      std::vector<int32_t> selected;   // its selected positions
    };
    std::vector<Layer> layers;  // grown to the layers seen
    int64_t hits = 0, misses = 0;  // decode selections reused / made
    // audit (statistics, bench/tokenselect_cache.cpp): on a hit also make the fresh selection and
    // add |reused ∩ fresh| / |fresh| to overlap_sum (so overlap_sum / hits is the mean overlap).
    bool audit = false;
    double overlap_sum = 0;
    // audit_fp8 (statistics, bench/tokenselect_cache.cpp --fp8): at each fresh selection also
    // select over the keys rounded through e4m3 (fp8_roundtrip: what scoring an fp8 cache's keys
    // sees) and add |fp8 ∩ exact| / |exact| to fp8_overlap_sum, per phase.
    bool audit_fp8 = false;
    double fp8_overlap_sum[2] = {0, 0};  // [prefill, decode]
    int64_t fp8_selections[2] = {0, 0};
    // audit_f16 (statistics, bench/tokenselect_cache.cpp --f16): likewise with the scores rounded
    // to fp16 (SelectInput::scores_f16: the GPU step's fp16 scores) over the exact keys.
    bool audit_f16 = false;
    double f16_overlap_sum[2] = {0, 0};  // [prefill, decode]
    int64_t f16_selections[2] = {0, 0};
  };

 private:
  // The key sets of p's sub-chunks; rope: rotate the selection query (pre_rope) or not (nullptr).
  std::vector<KeySegment> plan(const AttnParams& p, Phase phase, const LayerRope* rope, State& st,
                               ThreadPool& pool) const;
  TokenSelectParams t_;
};

// arg: "" (defaults) or "KEY=VAL,..." (see above). Throws Error naming the bad option.
std::unique_ptr<AttentionMethod> make_tokenselect_method(const std::string& arg, const MethodContext& ctx);

}  // namespace longctx

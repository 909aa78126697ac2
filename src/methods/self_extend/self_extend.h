// self_extend.h: Self-Extend's positions (Jin et al. 2024, "LLM Maybe LongLM: Self-Extend LLM
// Context Window Without Tuning", arXiv 2401.01325 §3), the option `self_extend=G:W` that dense
// and HiP accept, and its parser.
//
// What: a model pretrained on L positions reads a longer prompt without training. For a query at
// absolute position q and a key at position k (k <= q):
//   (SE1) neighbour keys, q - k < W:  q and k keep their own positions (relative distance q - k);
//   (SE2) grouped keys,   q - k >= W: the key sits at floor(k / G) and the query at
//         floor(q / G) + shift, shift = W - floor(W / G)      (relative distance
//         floor(q / G) - floor(k / G) + W - floor(W / G));
//   (SE3) one softmax over both: each (q, k) pair takes its (SE1) or (SE2) score, never both.
//   (SE4) the largest prompt whose grouped distances stay inside the pretrained L:
//         (L - W) * G + W  (the authors' rule for choosing G and W).
// The shift joins the regimes: with G | k and G | W, a key at the boundary (q - k = W) gets
// distance W, one more than the farthest neighbour's W - 1. G = 1 gives shift 0: plain attention.
// Details the paper leaves open, as decided here (docs/self_extend.md):
//   - the boundary belongs to the grouped side (q - k == W is grouped; the authors' code: the
//     last W keys of a decode step are neighbours);
//   - shift uses integer division W - floor(W / G) (the paper's w_n - w_n // G_s);
//   - the attention factor of the model's RoPE scaling (YaRN, LongRoPE) applies to both sides;
//   - no log-scaling of the query (the authors' optional scale_base is off by default);
//   - sliding-window layers keep their own positions (their window is < L already).
// Why: the default 8K model (SmolLM2-135M) cannot read 16K-32K prompts otherwise; grouped
// positions keep every relative distance inside what it was trained on.
// How: keys are cached un-rotated (MethodNeeds::keys = pre_rope); the attention step (CPU: self_extend_attention.h,
// GPU, dense only: self_extend_gpu.h) rotates them twice, per (SE1) and (SE2), and merges exactly.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace longctx {

struct SelfExtendParams {
  int64_t group = 0;     // G: grouped positions are floor(pos / G); 0: Self-Extend off
  int64_t neighbor = 0;  // W (the paper's w_n): keys with q - k < W keep their own positions
  bool on() const { return group > 0; }
};

// (SE2): the grouped position of a key at k and of a query at q.
inline int64_t self_extend_key_pos(const SelfExtendParams& se, int64_t k) { return k / se.group; }
inline int64_t self_extend_query_pos(const SelfExtendParams& se, int64_t q) {
  return q / se.group + se.neighbor - se.neighbor / se.group;
}
// (SE1) vs (SE2): whether the pair (query at q, key at k <= q) uses the neighbour positions.
inline bool self_extend_is_neighbor(const SelfExtendParams& se, int64_t q, int64_t k) { return q - k < se.neighbor; }
// (SE4): the longest prompt a model pretrained on `trained` positions covers with these G, W.
inline int64_t self_extend_reach(const SelfExtendParams& se, int64_t trained) {
  return (trained - se.neighbor) * se.group + se.neighbor;
}

// Parses "G:W" (the text after "self_extend=" in a method's spec); throws Error naming
// `method` when G or W is not a positive integer or the ':' is missing.
SelfExtendParams parse_self_extend(std::string_view text, std::string_view method);

// "self_extend=G:W" (the spec form of a method's option), "" when off.
std::string self_extend_spec(const SelfExtendParams& se);

}  // namespace longctx

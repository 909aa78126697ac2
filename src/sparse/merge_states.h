// merge_states.h: combine two partial attention results over disjoint key sets exactly.
//
// What: given (O_a, LSE_a) over key set A and (O_b, LSE_b) over key set B (A and B disjoint),
// writes (O, LSE) of attention over A u B:
//   LSE = log(exp(LSE_a) + exp(LSE_b)),  O = (exp(LSE_a - LSE) O_a + exp(LSE_b - LSE) O_b).
// Why: sparse pieces (sink + window, selected keys, offloaded pages, split-KV) are computed
// separately and must add up to the attention over their union, with no approximation.
// How: per (row, head), with the max LSE subtracted first for stability; a side with LSE = -inf
// (no key) contributes nothing; both -inf gives O = 0, LSE = -inf. In-place use is allowed
// (out may alias a or b).
#pragma once
#include <cstdint>

namespace longctx {

class ThreadPool;

struct MergeStatesParams {
  const float* o_a = nullptr;    // [n_q, n_head, head_dim]
  const float* lse_a = nullptr;  // [n_head, n_q]
  const float* o_b = nullptr;    // [n_q, n_head, head_dim]
  const float* lse_b = nullptr;  // [n_head, n_q]
  float* o = nullptr;            // [n_q, n_head, head_dim]  (may alias o_a or o_b)
  float* lse = nullptr;          // [n_head, n_q]            (may alias lse_a or lse_b; optional)
  int64_t n_q = 0;
  int n_head = 0;
  int head_dim = 0;
};

void merge_attention_states(const MergeStatesParams& p, ThreadPool& pool);

}  // namespace longctx

// self_extend_attention.h: Self-Extend attention on the CPU (self_extend.h has the positions).
//
// What: one attention step of a layer whose keys are cached un-rotated (MethodNeeds::keys =
// pre_rope): every (query, key) pair scores with its neighbour (SE1) or grouped (SE2) rotation,
// and one softmax runs over all of them (SE3). Optionally restricted to a sparse index (HiP):
// the pair is attended iff the index selects it, exactly as sparse_attention_ref would.
// How: the two regimes cover disjoint key sets per row, so the step is two exact attentions
// merged by their LSE (sparse/merge_states.h):
//   near  q and keys rotated at their own positions, keys (q - W, q]: attention_dense_ref with
//         window W over the last W + n_q - 1 keys (or sparse_attention_ref with window W over
//         the index clipped to each block's neighbour keys);
//   far   q rotated at floor(q / G) + shift, keys at floor(k / G), keys [0, q - W]: the same
//         kernels with the query positions moved back by W (row q sees keys <= q - W; rows with
//         q < W see none and contribute nothing).
// Cost: dense attention's, plus rotating the chunk's queries twice and the prefix's keys once
// per regime (O(n_kv * head_dim) per step, cos/sin computed once per distinct position).
//   SelfExtendQK g = self_extend_grouped(p, se, rope, pool);   // also HiP's estimator input
//   attend_self_extend_ref({.p = p, .se = se, .rope = rope, .grouped = g}, pool);
#pragma once
#include <vector>

#include "kernels/params/attention.h"
#include "methods/method.h"
#include "methods/self_extend/self_extend.h"
#include "sparse/sparse_index.h"

namespace longctx {

class ThreadPool;

// p's queries and keys rotated at the grouped positions (SE2); p itself with q and k pointing
// at them (its positions, n_q and n_kv unchanged). Movable, not copyable (p points inside).
struct SelfExtendQK {
  std::vector<float> q;  // [n_q, n_head, head_dim]    query i at floor((q_pos0 + i) / G) + shift
  std::vector<float> k;  // [n_kv, n_kv_head, head_dim] key j at floor(j / G)
  AttnParams p;
  SelfExtendQK() = default;
  SelfExtendQK(const SelfExtendQK&) = delete;
  SelfExtendQK& operator=(const SelfExtendQK&) = delete;
  SelfExtendQK(SelfExtendQK&&) = default;
  SelfExtendQK& operator=(SelfExtendQK&&) = default;
};
SelfExtendQK self_extend_grouped(const AttnParams& p, const SelfExtendParams& se, const LayerRope& rope,
                                 ThreadPool& pool);

struct SelfExtendStep {
  const AttnParams& p;              // un-rotated q [n_q, n_head, d] and k/v [n_kv, n_kv_head, d]; writes o (lse)
  const SelfExtendParams& se;       // on()
  const LayerRope& rope;
  const SelfExtendQK& grouped;      // self_extend_grouped(p, se, rope)
  const SparseIndex* index = nullptr;  // null: dense causal; else the pairs it selects (causal on top)
};

// Writes p.o (and p.lse) of the step. Throws Error on a sliding-window layer (p.window > 0:
// those keep their own positions and run plain attention) or an index that does not fit p.
void attend_self_extend_ref(const SelfExtendStep& s, ThreadPool& pool);

}  // namespace longctx

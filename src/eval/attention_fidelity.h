// attention_fidelity.h: how far a sparse method's attention is from dense, per layer and head,
// on real captured Q/K/V (EVALUATION.md, "Attention fidelity").
//
// For each evaluated query row q of head h (causal, scale 1/sqrt(head_dim)):
//   p = softmax(q . K[0..q]) (dense), S = the method's kept keys for q (mask_method.h),
//   recall(q) = sum of p over S (share of dense attention mass inside the index),
//   o_dense = sum p v, o_sparse = sum over S of p v / recall(q) (softmax restricted to S).
// Per head: rel_err = ||O_sparse - O_dense||_F / ||O_dense||_F over the evaluated rows,
// recall = mean recall(q), min_recall, and density = mean |S| / (q + 1).
// Rows: all of them up to max_queries, else max_queries evenly spaced rows (last row included):
// the metrics are per-row averages, so a spread-out sample estimates them without O(n^2) work.
#pragma once
#include <cstdint>
#include <vector>

#include "eval/mask_method.h"
#include "longctx/engine.h"
#include "util/thread_pool.h"

namespace longctx::eval {

struct FidelityParams {
  int64_t max_queries = 1024;  // evaluated query rows per head (0 = all)
};

struct HeadFidelity {
  int layer = 0, head = 0;
  double rel_err = 0, recall = 1, min_recall = 1, density = 1;
};

// The query rows evaluated for n_tokens (sorted, unique, includes n_tokens - 1).
std::vector<int64_t> fidelity_rows(int64_t n_tokens, int64_t max_queries);

// Dense causal attention probabilities of (head, row q) over keys [0, q]; p.size() == q + 1.
void attention_probs(const AttnCapture& c, int head, int64_t q, std::vector<double>& p);
// kept[k] = 1 for keys k in [0, q] the mask keeps for (head, row q); kept.size() == q + 1.
void kept_keys(const LayerMask& m, int n_head, int head, int64_t q, std::vector<uint8_t>& kept);

// Metrics of every head of one layer (parallel over heads on pool).
std::vector<HeadFidelity> layer_fidelity(const AttnCapture& c, const LayerMask& m, const FidelityParams& p,
                                         ThreadPool& pool);

}  // namespace longctx::eval

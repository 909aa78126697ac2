// hip_mask.h: HiP's block-sparse masks (the paper's Algorithm B) for a chunk of queries, and the
// shared sparse index they give (Algorithm C's key set: sinks + selected key blocks + window).
//
// What: for each query head h and query block of b_q rows (chunk-relative, like
// sparse/sparse_index.h) whose first row sits at absolute position first:
//   sinks    keys [0, sinks)
//   window   keys [key_end, last + 1), key_end = max(sinks, first - window + 1): every row sees at
//            least its `window` most recent keys (itself included)
//   search   keys [sinks, key_end) in key blocks of b_k tokens (block a = [a*b_k, (a+1)*b_k)):
//            the hierarchical top-k (kernels/ref/hip_topk.h) picks k/b_k of them per head, from
//            the block's sampled queries (every b_sq-th row) against h's KV head (GQA: query
//            head h reads KV head h / (n_head / n_kv_head); masks are per query head).
// The three parts are disjoint up to the alignment of the region's edge blocks (the index format
// counts overlaps once), so no key is attended twice. When the region holds at most k/b_k blocks
// every block is taken: the block is dense.
// Why: Algorithm B with the notes' [code] choices (notes/hip.md §2.2): window and sinks outside
// the search; the middle-block representative; causal masking in the scores.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/params/attention.h"
#include "kernels/ref/hip_topk.h"
#include "methods/self_extend/self_extend.h"
#include "sparse/sparse_index.h"

namespace longctx {

class ThreadPool;

struct HipParams {
  HipTopkParams topk;      // paper defaults: k=512, b_q=64, b_sq=2, b_k=2, b_sk=1
  int64_t window = 256;    // w: sliding window of recent keys, always attended
  int64_t sinks = 16;      // attention-sink keys [0, sinks), always attended
  int refresh = 8;         // r_m: decode re-estimates the mask every r_m steps (<= window)
  int dense_layers = 3;    // l_d: the first l_d layers stay dense
  SelfExtendParams self_extend;  // off by default; on: the estimator sees grouped q/k (hip_method.h)
};

// The search region of a query block whose first row is at absolute position first.
struct HipRegion {
  int64_t key_end = 0;                      // window starts here; search covers [sinks, key_end)
  int64_t block_begin = 0, block_end = 0;   // the search region in key blocks
};
HipRegion hip_region(const HipParams& hp, int64_t first);

// Selected key blocks of a chunk, CSR over (query head, query block), head-major:
// entry (h, b) = blocks[ptr[h * n_qblk + b] .. ptr[h * n_qblk + b + 1]), sorted ascending.
struct HipMask {
  int n_head = 0;
  int64_t n_qblk = 0;
  std::vector<int64_t> ptr{0};
  std::vector<int32_t> blocks;
};

// Algorithm B over p's fp32 q [n_q, n_head, d] and k [n_kv, n_kv_head, d] (query blocks of
// hp.topk.b_q rows).
HipMask hip_estimate(const HipParams& hp, const AttnParams& p, ThreadPool& pool);

// The shared sparse index of a chunk (needs b_q == kSparseBlockQ): per query head and block,
// the sink range, the selected blocks (adjacent ones merged) and the window.
SparseIndex hip_sparse_index(const HipParams& hp, const HipMask& mask, const AttnParams& p);

}  // namespace longctx

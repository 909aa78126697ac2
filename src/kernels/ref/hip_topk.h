// hip_topk.h: HiP's hierarchical top-k key-block search (the paper's Algorithm B core), CPU
// reference; the CUDA twin is kernels/cuda/hip_estimate.cu (tested bit-equal on block ids; its
// tensor-core prefill scorer rounds differently: bit-equal on exact inputs, near ties judged).
//
// What: for one query block (a sample of its query rows) and one head's keys, the `k / b_k` key
// blocks of b_k tokens whose representative scores are the highest, found by bisection:
//   1. the search region [block_begin, block_end) (N key blocks) is cut into M = k / b_k chunks
//      of near-equal size (chunk m = [floor(N*m/M), floor(N*(m+1)/M)));
//   2. every iteration splits each chunk (a, g) into (a, floor(g/2)) and (a + floor(g/2),
//      g - floor(g/2)) (empty halves dropped), scores each branch by its middle block
//      u = a' + floor(g'/2), and keeps the M best branches (larger score first, then the earlier
//      branch: a total order, so results are reproducible and the GPU twin matches);
//   3. it stops when every chunk is one block: ceil(log2(ceil(N/M))) iterations.
//   If N <= M every block of the region is returned (nothing to prune).
// Branch score = max over the sampled queries q and the sampled keys kappa of the representative
// block (kappa = u*b_k + t*b_sk + b_sk - 1, t < b_k/b_sk) of q.kappa, over the pairs with
// kappa < key_end and kappa <= pos(q) (causal); no valid pair gives -inf. The score is unscaled
// (1/sqrt(d) does not change the order).
// Why one core: HiP's prefill and decode masks and InfiniteHiP's pruning stages all run this
// bisection with different parameters (notes/hip.md §2.2, notes/infinitehip.md).
// Dot product order (hip_dot): fp32 FMAs in 8 lanes, lane l accumulating the 8-element chunks
// c = l, l+8, ... in order, then the tree ((p0+p4)+(p2+p6)) + ((p1+p5)+(p3+p7)). This is the order
// of 8 GPU threads cooperating on one dot (16-byte loads, xor-shuffle tree), so the CPU and GPU
// scores are bit-identical for the same (bf16-representable) inputs.
#pragma once
#include <cstdint>
#include <vector>

namespace longctx {

struct HipTopkParams {
  int64_t k = 512;  // tokens selected per query block (k / b_k key blocks)
  int b_q = 64;     // query rows sharing one selection
  int b_sq = 2;     // query sampling stride inside a query block (estimation only)
  int b_k = 2;      // key block size: the selection's granularity
  int b_sk = 1;     // key sampling stride inside a key block (estimation only)
  int64_t budget_blocks() const { return k / b_k; }
};

// Throws Error naming the bad parameter (all >= 1, b_sq | b_q, b_sk | b_k, b_k | k, k/b_k >= 1).
void check_hip_topk_params(const HipTopkParams& p, const char* method);

// One search: the sampled queries and one head's keys.
struct HipSearch {
  const float* q = nullptr;       // sampled query row i at q + i * q_stride, i < n_qs
  int64_t q_stride = 0;
  const int64_t* q_pos = nullptr;  // [n_qs] absolute positions
  int n_qs = 0;
  const float* k = nullptr;        // key at position j: k + j * k_stride
  int64_t k_stride = 0;
  int head_dim = 0;
  int64_t block_begin = 0, block_end = 0;  // search region in key blocks
  int64_t key_end = 0;                     // keys >= key_end never score
};

// The sampled rows of a query block of `rows` rows: t*b_sq + b_sq - 1 for t*b_sq < rows, each
// clipped to rows - 1 (a short block, e.g. one decode query, samples its last row).
std::vector<int> hip_sample_rows(int rows, int b_sq);

float hip_dot(const float* a, const float* b, int d);

// Appends nothing; overwrites out with the sorted selected block ids (min(M, N) of them).
void hip_topk_blocks(const HipTopkParams& p, const HipSearch& s, std::vector<int32_t>& out);

}  // namespace longctx

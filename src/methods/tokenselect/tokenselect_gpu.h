// tokenselect_gpu.h: one TokenSelect attention step of one layer on the GPU, over a pre-RoPE KV
// pool read through a page-size-1 slot table: the selection (the chunk's rotated mean query,
// paged dot product over the candidates, head soft vote, top-k) and the attention over the
// budget's keys re-numbered 0..L-1. The GPU twin of TokenSelectMethod::plan +
// attend_compacted_ref (CPU); tested by tests/cuda/test_tokenselect_step.cpp, timed by
// bench/bench_tokenselect.cu (prefill chunks and decode steps).
//
// Steps, all on one stream with no host sync and no allocation (CUDA-graph capturable):
//   select:  qs     = selection_query(q rows rotated at n_local + i)        fp32 [n_head, D]
//            scores = paged_dot(qs, candidate slots [n_init, n_kv - n_local)) fp32 (or fp16) [n_head, M]
//                     (+ per head and CTA max / sum exp: the soft vote's first pass, fused)
//                     over k_pool, or over k_score: e4m3 keys (an fp8 cache's, or an fp8 shadow
//                     of a bf16 cache's pre-RoPE keys), half the bytes of the scan
//            vote   = soft_vote(scores) (or hard/naive: not built on the GPU)  fp32 [M]
//            keys   = [0, n_init) ++ top_k_select(vote) + n_init ++ [n_kv - n_local, n_kv)
//   attend:  K, V   = compact_kv(keys): gathered, K rotated at 0..L-1        bf16 [L, n_kv_head, D]
//                     (an fp8 pool, pool_fp8: the rows widened from e4m3 times their scales)
//            q_rot  = rope(q, L - C + i)                                      bf16 [C, n_head, D]
//            o      = attention_prefill(q_rot, K, V, q_pos0 = L - C, causal)  (C = 1: attention_decode)
// A context within the budget (n_kv <= n_init + k + n_local) attends keys 0..n_kv-1 (dense),
// without a selection. attend() uses the keys of the last select(): a decode step whose
// selection cache hits calls attend() only.
#pragma once
#include <cstdint>
#include <memory>

#include "kernels/cuda/paged_dot.h"
#include "kernels/cuda/runtime.h"
#include "methods/tokenselect/tokenselect_select.h"

namespace longctx {

struct TokenSelectGpuShape {
  int n_head = 0, n_kv_head = 0, head_dim = 0;
  int64_t max_kv = 0;    // the longest context a step sees
  int64_t max_rows = 0;  // the most query rows of one step (the prefill chunk)
  // The per-head scores' storage: fp32, or fp16 (half the bytes the scan writes and the vote reads;
  // rounding 2^-11 of |score|, so near-tie votes may swap: tests/cuda/test_tokenselect_step.cpp).
  cuda::ScoreElem scores = cuda::ScoreElem::f32;
};

struct TokenSelectGpuInput {
  const void* q = nullptr;       // bf16 [n_rows, n_head, head_dim], un-rotated
  int64_t n_rows = 0;            // C
  int64_t n_kv = 0;              // cached keys, the rows' own last (positions n_kv - C .. n_kv - 1)
  const void* k_pool = nullptr;  // bf16 [pool_rows, n_kv_head, head_dim], un-rotated
  const void* v_pool = nullptr;  // bf16 [pool_rows, n_kv_head, head_dim]
  const int32_t* slots = nullptr;  // device int32 [n_kv]: position -> pool row
  const float* inv_freq = nullptr;  // device fp32 [head_dim / 2]
  float rope_factor = 1.f;          // cos/sin multiplier (YaRN, LongRoPE), as the model's RoPE
  float scale = 0.f;                // softmax scale (0: 1/sqrt(head_dim))
  void* o = nullptr;                // bf16 [n_rows, n_head, head_dim]
  const void* k_score = nullptr;    // e4m3 [pool_rows, n_kv_head, head_dim] or nullptr: the keys the
  float k_score_scale = 1.f;        // selection scores (real = stored * scale; default: k_pool)
  // The fp8 KV cache: k_pool / v_pool are e4m3 (real = stored * k_scale / v_scale); the selection
  // scores them directly (as k_score), the compaction widens the budget's rows to bf16.
  bool pool_fp8 = false;
  float k_scale = 1.f, v_scale = 1.f;
  const int32_t* skip = nullptr;    // device int32 [1] or nullptr: nonzero skips score, vote and top-k
                                    // (the selection cache's hit, decided on the device)
  // A replayable decode step: the selection's counts (candidates, the local range's end) are
  // read from n_kv_dev (device int32 [1]: n_kv) and launched for n_kv_bound (>= every n_kv the
  // step is replayed for, all past the budget); the host n_kv then only decides selects().
  const int32_t* n_kv_dev = nullptr;
  int64_t n_kv_bound = 0;
};

class TokenSelectGpuStep {
 public:
  // Allocates every buffer a step needs for `shape` (throws Error naming the bytes and the free
  // memory); soft vote only (the hard and naive ablations run on the CPU).
  TokenSelectGpuStep(const TokenSelectParams& t, const TokenSelectGpuShape& shape);
  TokenSelectGpuStep(const TokenSelectGpuStep&) = delete;
  TokenSelectGpuStep& operator=(const TokenSelectGpuStep&) = delete;

  static size_t device_bytes(const TokenSelectParams& t, const TokenSelectGpuShape& shape);
  bool selects(int64_t n_kv) const { return n_kv > t_.budget(); }
  int64_t n_keys(int64_t n_kv) const { return selects(n_kv) ? t_.budget() : n_kv; }

  void select(const TokenSelectGpuInput& in, cuda::Stream s);  // writes keys(); needs selects(n_kv)
  void attend(const TokenSelectGpuInput& in, cuda::Stream s);  // with the keys of the last select
  void step(const TokenSelectGpuInput& in, cuda::Stream s) {   // a step without a selection cache
    if (selects(in.n_kv)) select(in, s);
    attend(in, s);
  }

  // The stages of select() and attend(), public for the benchmark's split.
  void stage_query(const TokenSelectGpuInput& in, cuda::Stream s);
  void stage_score(const TokenSelectGpuInput& in, cuda::Stream s);
  void stage_vote(const TokenSelectGpuInput& in, cuda::Stream s);
  void stage_top_k(const TokenSelectGpuInput& in, cuda::Stream s);  // then stage_ranges
  void stage_ranges(const TokenSelectGpuInput& in, cuda::Stream s);  // the initial and local keys
  void stage_compact(const TokenSelectGpuInput& in, cuda::Stream s);
  void stage_attention(const TokenSelectGpuInput& in, cuda::Stream s);

  const int32_t* keys() const { return keys_; }  // device int32 [n_keys(n_kv)] of the last step
  // The selection cache's handles (tokenselect_engine_gpu.h): the last stage_query's fp32
  // [n_head, head_dim], and the k selected positions inside keys() (a hit writes them back).
  const float* selection_query() const { return qs_; }
  int32_t* selected() { return keys_ + t_.n_init; }
  const float* vote() const { return vote_; }  // fp32 [M] of the last stage_vote (tests)

 private:
  void check(const TokenSelectGpuInput& in) const;

  TokenSelectParams t_;
  TokenSelectGpuShape shape_;
  int64_t max_m_ = 0;  // candidates of the longest context
  std::unique_ptr<cuda::DeviceArena> arena_;
  float *qs_ = nullptr, *vote_ = nullptr;
  void* scores_ = nullptr;  // shape_.scores [n_head, max_m_]
  float* head_stats_ = nullptr;  // fp32 [n_head, paged_dot_max_stats_parts(), 2]
  void *vote_ws_ = nullptr, *topk_ws_ = nullptr, *k_c_ = nullptr, *v_c_ = nullptr, *q_rot_ = nullptr;
  void* decode_ws_ = nullptr;
  size_t decode_ws_bytes_ = 0;
  int32_t* keys_ = nullptr;
};

}  // namespace longctx

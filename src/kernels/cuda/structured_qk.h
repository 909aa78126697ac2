// structured_qk.h (cuda): synthetic post-RoPE Q/K whose attention has the structure of real
// long-context heads, for benchmarking sparse attention with realistic (estimated) indices.
//
// Why: with i.i.d. random Q/K every key scores alike, so a vertical-slash or block-sparse
// estimate picks scattered lines and blocks (harsher than real heads, where slashes cluster near
// the diagonal, verticals are a few recurring tokens and selected blocks come in runs). MInference
// §2 / Fig. 2-4 describe what real heads look like; this generator plants exactly those
// mechanisms and lets the index builders find them, rather than planting the indices.
// How (rotate-half RoPE layout, head_dim 128, pair f = dims (f, f + 64)):
//   - positional part, the 32 highest-frequency pairs f < 32 (Llama-3 theta 500000, wavelengths
//     6 .. ~3400 tokens): k_j = R(j) c_g, q_i = a_h R(i) c_g with one random c_g per KV head, so
//     q_i . k_j = a_h sum_f |c_g,f|^2 cos((i - j) theta_f): a function of i - j only, peaked at
//     0 and decaying -> local window + slash lines;
//   - semantic part, the 32 lowest-frequency pairs (they rotate < 1 rad over thousands of tokens
//     in Llama-3, so treated as unrotated): attention sinks (keys 0..3 carry a direction u_g that
//     every query of the head asks for), vertical tokens (1 key in 256, chosen by a hash, carries
//     w_g: "newline"-like tokens every query looks at), topics (the context is cut into 2048-token
//     segments, each with one of 64 topic vectors; a query asks for its own segment's topic, so
//     it attends every block of every segment on the same topic: clustered block-sparse);
//   - i.i.d. noise N(0, 1) on every dimension of q and k (about 1 nat of logit noise);
//   - heads differ in mix: query head h is local-heavy, vertical-heavy, topic-heavy or mixed
//     (h % 4 after a shuffle), so a layer has the pattern variety of a real one.
// Logit sizes (scale 1/sqrt(128)): local peak ~10 nats for local heads, sinks ~8, verticals ~5,
// same topic ~4 above background.
// Everything is a function of (seed, absolute position, head), so a prompt filled chunk by chunk
// (pos0 > 0) gets the same vectors as in one piece. Angles are reduced modulo 2 pi in double
// before a float sincos, so positions up to millions keep their phase and the cost stays small.
// Used by: bench/bench_sparse.cu (--inputs structured) and, for benchmarks only, the GPU model
// (`longctx bench model --synthetic-qk`: after RoPE each layer's Q/K are replaced by these, so a
// random-weight model shows sparse methods realistic attention structure; V and everything else
// stay the model's).
#pragma once
#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace longctx::cuda {

struct StructuredQkFill {
  void* q = nullptr;  // bf16 [n_tok, n_head, 128]    (post-RoPE); nullptr = leave alone
  void* k = nullptr;  // bf16 [n_tok, n_kv_head, 128] (post-RoPE); nullptr = leave alone
  int64_t n_tok = 0;
  int64_t pos0 = 0;   // absolute position of row 0
  uint64_t seed = 1;  // e.g. one per layer
};

class StructuredQk {
 public:
  // Draws the per-KV-head constant vectors (host) and uploads them (one small allocation).
  StructuredQk(int n_head, int n_kv_head, uint64_t seed);
  ~StructuredQk();
  StructuredQk(const StructuredQk&) = delete;
  StructuredQk& operator=(const StructuredQk&) = delete;
  // Fills p.q / p.k on stream s (asynchronous; no allocation).
  void fill(const StructuredQkFill& p, Stream s = nullptr) const;

 private:
  int n_head_ = 0, n_kv_head_ = 0;
  void* table_ = nullptr;  // device fp32 [n_kv_head][per-head constants]
};

}  // namespace longctx::cuda

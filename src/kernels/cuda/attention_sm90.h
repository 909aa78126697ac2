// attention_sm90.h (cuda, internal): the Hopper (wgmma + TMA) prefill kernel, chosen by
// attention_prefill() when supported; exposed here for the tests and the benchmark.
#pragma once
#include "kernels/cuda/attention.h"

namespace longctx::cuda {

// True on an sm_90 device for head_dim 128 or 256, no sliding window, non-empty shapes.
bool attention_prefill_sm90_supported(const PrefillParams& p);
// Variants kept for the benchmark's comparison: simple = issue, wait, softmax, issue, wait;
// overlap = FA3's intra-warpgroup pipelining (S of tile t in flight with P V of tile t-1);
// pingpong = overlap + the two consumer warpgroups taking turns on the tensor cores.
enum class Sm90Variant : int { simple = 0, overlap = 1, pingpong = 2 };
// stages: depth of the K/V shared-memory ring: 2 or 3 at head_dim 128, 2 at head_dim 256 (Q's 64
// KB leaves room for two stages only).
// block_n: keys per K/V tile: 128 at head_dim 128; 64 or 80 at head_dim 256 (80 only without
// paged KV: 80-key tiles straddle 64-key pages).
int sm90_max_stages(int head_dim);
// Automatic choice.
// head_dim 128, from three H200 sweeps (bench/results/2026-11-22-*): with 3 stages, overlap led
// at 8K queries (582-620 vs 561-594 TFLOP/s), ping-pong at 32K (547-563 vs 521-534), and they
// tied at 128K.
// head_dim 256 (2 stages): HD256_HEURISTIC
inline int sm90_default_stages(int head_dim) { return head_dim == 256 ? 2 : 3; }
inline int sm90_default_block_n(int head_dim, bool paged) { return head_dim == 128 ? 128 : paged ? 64 : 80; }
inline Sm90Variant sm90_default_variant(int64_t n_q, int head_dim) {
  if (head_dim == 256) return Sm90Variant::simple;
  return n_q <= 16384 ? Sm90Variant::overlap : Sm90Variant::pingpong;
}
// block_n 0: sm90_default_block_n.
void attention_prefill_sm90(const PrefillParams& p, Stream s, Sm90Variant variant, int stages, int block_n = 0);
inline void attention_prefill_sm90(const PrefillParams& p, Stream s) {
  attention_prefill_sm90(p, s, sm90_default_variant(p.n_q, p.head_dim), sm90_default_stages(p.head_dim));
}
// The mma.sync (FlashAttention-2 style) kernel, any Ampere+ GPU, head_dim 16..256.
void attention_prefill_fa2(const PrefillParams& p, Stream s);

}  // namespace longctx::cuda

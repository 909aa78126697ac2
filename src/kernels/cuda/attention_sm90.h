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
// Automatic choice, from an H200 call (2026-11-26, bench/results/2026-11-26-h200-hd256-sm90-call2-*,
// ms at 8K / 32K / 128K queries, causal; K and V slots released separately; the order held in
// the next call, ...-sm90-5955758.json):
//   d = 256 (16 / 8 heads, 2 stages): overlap with 80-key tiles led everywhere: 0.839 / 13.28 /
//     217.4 (64-key tiles: overlap 0.840 / 14.32 / 233.3; simple 80: 0.926 / 14.15 / 226.1;
//     ping-pong 80: 0.916 / 15.56 / 221.6). Paged KV takes 64-key tiles, where overlap also led
//     or tied (ping-pong 232.2 at 128K).
//   d = 128 (32 / 8 heads): overlap with 3 stages led at 32K and 128K: 14.63 / 237.2 (ping-pong
//     15.14 / 242.5; the sweeps of 2026-11-22, one empty barrier per stage, had ping-pong ahead
//     at 32K, and in this call the previous binary's ping-pong, then the default, took 14.88 /
//     235.9).
inline int sm90_default_stages(int head_dim) { return head_dim == 256 ? 2 : 3; }
inline int sm90_default_block_n(int head_dim, bool paged) { return head_dim == 128 ? 128 : paged ? 64 : 80; }
inline Sm90Variant sm90_default_variant() { return Sm90Variant::overlap; }
// block_n 0: sm90_default_block_n.
void attention_prefill_sm90(const PrefillParams& p, Stream s, Sm90Variant variant, int stages, int block_n = 0);
inline void attention_prefill_sm90(const PrefillParams& p, Stream s) {
  attention_prefill_sm90(p, s, sm90_default_variant(), sm90_default_stages(p.head_dim));
}
// The mma.sync (FlashAttention-2 style) kernel, any Ampere+ GPU, head_dim 16..256.
void attention_prefill_fa2(const PrefillParams& p, Stream s);

}  // namespace longctx::cuda

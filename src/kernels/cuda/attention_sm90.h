// attention_sm90.h (cuda, internal): the Hopper (wgmma + TMA) prefill kernel, chosen by
// attention_prefill() when supported; exposed here for the tests and the benchmark.
#pragma once
#include "kernels/cuda/attention.h"

namespace longctx::cuda {

// True on an sm_90 device for head_dim 128 and non-empty shapes.
bool attention_prefill_sm90_supported(const PrefillParams& p);
// Variants kept for the benchmark's comparison: simple = issue, wait, softmax, issue, wait;
// overlap = FA3's intra-warpgroup pipelining (S of tile t in flight with P V of tile t-1);
// pingpong = overlap + the two consumer warpgroups taking turns on the tensor cores.
enum class Sm90Variant : int { simple = 0, overlap = 1, pingpong = 2 };
// stages: depth of the K/V shared-memory ring (2 or 3).
// Default from the H200 sweep of 2026-11-22 (bench/results/2026-11-22-h200-4ad3197.json):
// ping-pong with 3 stages was fastest at 32K and 128K and within 4% of the best at 8K; the
// variants differ by less than the run-to-run spread (~5%) at 8K.
inline constexpr Sm90Variant kSm90Default = Sm90Variant::pingpong;
inline constexpr int kSm90DefaultStages = 3;
void attention_prefill_sm90(const PrefillParams& p, Stream s, Sm90Variant variant = kSm90Default,
                            int stages = kSm90DefaultStages);
// The mma.sync (FlashAttention-2 style) kernel, any Ampere+ GPU, head_dim 64/128.
void attention_prefill_fa2(const PrefillParams& p, Stream s);

}  // namespace longctx::cuda

// ihip_params.h: InfiniteHiP's parameters, its presets and the `--attn infinitehip=...` text.
//
// Spec: infinitehip[=PRESET][,KEY=VAL...] (PRESET first if given; keys in any order):
//   PRESET        3k (default), 3k-fast, 3k-flash, 5k (paper Appendix F; notes/infinitehip.md §2.2)
//   l_c=A/B/C     chunk size per stage (the number of stages N is the list's length)
//   k=A/B/C       tokens kept per stage (multiples of l_c)
//   refresh=A/B/C decode steps between refreshes of each stage's cached mask
//   b_q=64        query block of every stage (the sparse index's block; the only value accepted)
//   n_sink=256, n_stream=1024   always-attended first and most recent tokens
//   early_layers=3, k_early=4096   the first layers prune with chunk-indexed RoPE and keep
//                 k_early tokens in the last stage (the paper's "k^(3) = 4096 for l <= 3")
//   rope=on|off   on: keys cached un-rotated; pruning uses the paper's RoPE (chunk-indexed /
//                 relative) and the attention StreamingLLM-style positions (the extrapolation);
//                 off: keys rotated at their own positions everywhere (composes with
//                 rotated-key methods such as minference)
//   dense_layers=I+J-K   layers that stay dense (0-based; '+'-separated, ranges with '-')
//   rank=paper|local  paper (default): chunks rank by their largest raw q.k logit; local: by the
//                 largest logit minus the row's largest logit over its sinks and window (its log
//                 attention weight against the local context: comparable across heads whose
//                 logit scales differ; kernels/ref/ihip_prune.h)
//   --attn infinitehip                       3K preset, RoPE extrapolation on
//   --attn 'infinitehip=5k,rope=off'
//   --attn 'infinitehip=rank=local'
//   --attn 'prefill:infinitehip'             dense decode (the paper's RULER setting)
//   --attn 'prefill:minference=cfg.json;decode:infinitehip=rope=off'
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ref/ihip_prune.h"

namespace longctx {

enum class IhipRank { paper, local };

struct IhipParams {
  std::vector<IhipStage> stages{{256, 32768}, {32, 8192}, {8, 2048}};  // 3K preset
  std::vector<int> refresh{16, 8, 4};
  int b_q = 64;
  int64_t n_sink = 256;
  int64_t n_stream = 1024;
  int early_layers = 3;
  int64_t k_early = 4096;
  bool rope = true;
  std::vector<int> dense_layers;  // sorted, unique
  IhipRank rank = IhipRank::paper;

  int n_stage() const { return int(stages.size()); }
  bool dense_layer(int layer) const;
  // Tokens kept by the last stage of `layer`.
  int64_t last_k(int layer) const { return layer < early_layers ? k_early : stages.back().k; }
  // The RoPE used while pruning `layer`.
  IhipRopeMode rope_mode(int layer) const {
    return !rope ? IhipRopeMode::none : layer < early_layers ? IhipRopeMode::chunk_indexed : IhipRopeMode::relative;
  }
};

// The presets by name (3k, 3k-fast, 3k-flash, 5k); throws Error for another name.
IhipParams ihip_preset(const std::string& name);

// Parses the text after "infinitehip=" (throws Error naming the bad key or value).
IhipParams parse_ihip_params(const std::string& arg);

// The canonical text (parse_ihip_params(ihip_params_text(p)) == p).
std::string ihip_params_text(const IhipParams& p);

}  // namespace longctx

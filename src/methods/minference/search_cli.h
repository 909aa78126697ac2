// search_cli.h: the `longctx search-patterns` subcommand (MInference offline pattern search).
//
//   longctx search-patterns -m MODEL --sample FILE [--sample FILE2 ...] -o CONFIG.json [-t N]
//       [--sample-tokens N] [--report REPORT.json] [--no-match-flops] [--reference-len N] [--dense-above E]
//       [--device cpu|cuda|auto]
// Tokenizes the sample texts, runs search_patterns (pattern_search.h) with dense capture, and
// writes the per-head config in the published MInference format; progress (layer i/N, elapsed,
// ETA, device) goes to stderr. The result is used with --attn minference=CONFIG.json.
// --device (as generate's; default cpu): cuda captures Q/K/V on the GPU (gpu_capture.cpp) and
// scores there too (gpu/gpu_search.h); auto takes the GPU when usable, else the CPU. Built into
// the longctx binary (src/cli/CMakeLists.txt), not longctx_sparse, to reach the GPU scorer.
#pragma once

namespace CLI {
class App;
}

namespace longctx {

void register_search_patterns_command(CLI::App& app);

}  // namespace longctx

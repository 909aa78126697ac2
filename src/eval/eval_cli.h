// eval_cli.h: the `longctx eval` subcommand.
//
//   longctx eval TASK -m MODEL --attn dense,a_shape --lengths 2k,4k,8k --samples 5
//                [--seed S] [--depths 0,0.5,1] [--json [FILE]] [--out DIR] [-n N] [-t N]
//                [--device cpu|cuda|auto] [--prefill-chunk N] [-c N [--extrapolate]] [--text FILE]
//                [--layer L --head H] [--max-queries N] [--no-chat] [--prompts] [-q]
// Shared options (-t, -c, -n, --device, --prefill-chunk, --seed) come from cli/options.h, with
// the same names and checks as generate's; bad values fail while parsing, before any model loads.
// TASK: passkey, niah, ruler (all RULER tasks) or one of niah_single, niah_multikey,
// niah_multivalue, niah_multiquery, vt, cwe, fwe; ppl; attention. See docs/evaluation.md.
#pragma once
#include <CLI/CLI.hpp>

#include "eval/eval_options.h"

namespace longctx {

// Adds `eval` to app; the engine comes from Engine::load.
void register_eval_command(CLI::App& app);
// Same with an injected engine factory (tests use a fake engine).
void register_eval_command(CLI::App& app, eval::EngineFactory factory);

}  // namespace longctx

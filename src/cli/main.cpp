// main.cpp: the `longctx` command line.
//
//   longctx generate -m MODEL (-p PROMPT | -f FILE | --chat MESSAGE) [-n N] [--json]
//   longctx inspect MODEL
//   longctx bench model [-m MODEL] --lengths 512,4096
//   longctx tiny-model --out DIR     (a tiny random-weight model, both formats)
//   longctx eval TASK ...            (when built with the eval suite)
//   longctx search-patterns ...      (MInference offline pattern search)
// Every failure prints "longctx: <what went wrong>" and exits non-zero.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "util/error.h"
#ifdef LONGCTX_WITH_EVAL
#include "eval/eval_cli.h"
#endif
#ifdef LONGCTX_WITH_SEARCH
#include "methods/minference/search_cli.h"
#endif

int main(int argc, char** argv) {
  CLI::App app{"longctx: long-context LLM inference (dense and sparse attention)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "longctx 0.1.0");
  longctx::cli::register_generate(app);
  longctx::cli::register_inspect(app);
  longctx::cli::register_bench(app);
  longctx::cli::register_tiny_model(app);
#ifdef LONGCTX_WITH_EVAL
  longctx::register_eval_command(app);
#endif
#ifdef LONGCTX_WITH_SEARCH
  longctx::register_search_patterns_command(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const longctx::Error& e) {
    std::fprintf(stderr, "longctx: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "longctx: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "longctx: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}

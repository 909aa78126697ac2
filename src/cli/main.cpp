// main.cpp: the `longctx` command line.
//
//   longctx generate -m MODEL (-p PROMPT | -f FILE | --chat MESSAGE) [-n N] [--json]
//   longctx inspect MODEL
//   longctx bench model [-m MODEL] --lengths 512,4096
//   longctx tiny-model --out DIR     (a tiny random-weight model, both formats)
//   longctx serve -m MODEL [--host H] [--port P]  (OpenAI-compatible HTTP server, when built with cpp-httplib)
//   longctx eval TASK ...            (when built with the eval suite)
//   longctx search-patterns ...      (MInference offline pattern search)
// Every failure prints "longctx: <what went wrong>" on stderr and exits non-zero: 2 when the
// command line is wrong (checked before anything loads), 1 when the work fails (cli/options.h).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/suggest.h"
#include "util/error.h"
#ifdef LONGCTX_WITH_EVAL
#include "eval/eval_cli.h"
#endif
#ifdef LONGCTX_WITH_SEARCH
#include "methods/minference/search_cli.h"
#endif

namespace {

using longctx::cli::kExitRuntime;
using longctx::cli::kExitUsage;

int report(const std::string& msg, int code) {
  std::fprintf(stderr, "longctx: %s\n", msg.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"longctx: long-context LLM inference (dense and sparse attention)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "longctx 0.1.0");
  app.option_defaults()->always_capture_default();  // every --help shows the defaults
  longctx::cli::register_generate(app);
  longctx::cli::register_inspect(app);
  longctx::cli::register_bench(app);
  longctx::cli::register_tiny_model(app);
#ifdef LONGCTX_WITH_SERVER
  longctx::cli::register_serve(app);
#endif
#ifdef LONGCTX_WITH_EVAL
  longctx::register_eval_command(app);
#endif
#ifdef LONGCTX_WITH_SEARCH
  longctx::register_search_patterns_command(app);
#endif
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    longctx::cli::check_command_words(app, args);
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ExtrasError& e) {
    return report(longctx::cli::explain_extras(app, args, e.what()), kExitUsage);
  } catch (const CLI::ParseError& e) {
    return report(longctx::cli::explain_parse_error(app, e.what()), kExitUsage);
  } catch (const longctx::Error& e) {
    return report(e.what(), kExitRuntime);
  } catch (const std::bad_alloc&) {
    return report("out of memory", kExitRuntime);
  } catch (const std::exception& e) {
    return report(std::string("internal error: ") + e.what(), kExitRuntime);
  }
  return 0;
}

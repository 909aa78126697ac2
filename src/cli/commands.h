// commands.h: the subcommands of the `longctx` binary, one file each.
#pragma once
#include <CLI/CLI.hpp>

namespace longctx::cli {

void register_generate(CLI::App& app);
void register_inspect(CLI::App& app);
void register_bench(CLI::App& app);
void register_tiny_model(CLI::App& app);
void register_serve(CLI::App& app);  // cmd_serve.cpp, built when cpp-httplib is installed

}  // namespace longctx::cli

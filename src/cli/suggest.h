// suggest.h: friendly command-line errors: a misspelt command or option gets the closest valid
// name ("unknown command 'generat' (did you mean 'generate'?)"), and CLI11's messages are
// reworded where they would puzzle a user. main() prints the result as `longctx: <message>`.
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace longctx::cli {

// The closest of `candidates` to `word` by edit distance, or "" when none is close enough to be
// a plausible typo.
std::string closest(const std::string& word, const std::vector<std::string>& candidates);

// Walks the leading words of `args` (before the first option) through app's subcommands and
// throws CLI::ValidationError for a word that names none, suggesting the closest.
void check_command_words(CLI::App& app, const std::vector<std::string>& args);

// The message for CLI11's "arguments were not expected": names the unknown option and the
// command it was given to, with the closest option of that command.
std::string explain_extras(CLI::App& app, const std::vector<std::string>& args, const std::string& what);

// Other CLI11 parse errors: "A subcommand is required" lists the commands; the rest as given.
std::string explain_parse_error(CLI::App& app, const std::string& what);

}  // namespace longctx::cli

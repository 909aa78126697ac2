// suggest.cpp: see suggest.h.
#include "cli/suggest.h"

#include <algorithm>

#include "cli/options.h"

namespace longctx::cli {

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The subcommand a parse reached: the deepest one that was given on the command line.
CLI::App* deepest_parsed(CLI::App& app) {
  CLI::App* cur = &app;
  for (bool descended = true; descended;) {
    descended = false;
    for (CLI::App* sub : cur->get_subcommands()) {  // the parsed ones
      cur = sub;
      descended = true;
      break;
    }
  }
  return cur;
}

std::string command_path(CLI::App* a) {
  std::string s;
  for (; a != nullptr; a = a->get_parent()) s = a->get_parent() ? " " + a->get_name() + s : "longctx" + s;
  return s;
}

std::vector<std::string> subcommand_names(CLI::App* a) {
  std::vector<std::string> names;
  for (CLI::App* s : a->get_subcommands([](CLI::App*) { return true; })) names.push_back(s->get_name());
  return names;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::vector<std::string> option_names(CLI::App* a) {
  std::vector<std::string> names;
  for (const CLI::Option* o : a->get_options()) {
    for (const auto& l : o->get_lnames()) names.push_back("--" + l);
    for (const auto& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

bool is_number(const std::string& s) {
  double v = 0;
  return detail::parse_double(s, v);
}

}  // namespace

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;  // a typo: at most a third of the word
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

void check_command_words(CLI::App& app, const std::vector<std::string>& args) {
  CLI::App* cur = &app;
  for (const auto& w : args) {
    if (w.empty() || w[0] == '-') return;
    const auto names = subcommand_names(cur);
    if (names.empty()) return;
    if (std::find(names.begin(), names.end(), w) == names.end()) {
      const std::string near = closest(w, names);
      usage_error(fmt::format("unknown command '{}' for '{}'{} (commands: {}; see {} --help)", w, command_path(cur),
                              near.empty() ? "" : " (did you mean '" + near + "'?)", joined(names), command_path(cur)));
    }
    cur = cur->get_subcommand(w);
  }
}

std::string explain_extras(CLI::App& app, const std::vector<std::string>& args, const std::string& what) {
  CLI::App* sub = deepest_parsed(app);
  const auto known = option_names(sub);
  for (const auto& w : args) {
    if (w.size() < 2 || w[0] != '-' || is_number(w)) continue;
    const std::string name = w.substr(0, w.find('='));
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    if (name == "--help" || name == "-h" || name == "--version") continue;
    std::string near = closest(name, known);
    if (near.empty() && name.size() >= 4) {  // a shortened name: --chunk for --prefill-chunk
      for (const auto& k : known)
        if (k.find(name.substr(name.find_first_not_of('-'))) != std::string::npos)
          near += (near.empty() ? "" : "' or '") + k;
    }
    return fmt::format("unknown option '{}' for '{}'{}; see {} --help", name, command_path(sub),
                       near.empty() ? "" : " (did you mean '" + near + "'?)", command_path(sub));
  }
  // No unknown option: a stray argument (CLI11 lists them after the colon).
  const size_t colon = what.find(": ");
  return fmt::format("unexpected argument '{}' for '{}'; see {} --help",
                     colon == std::string::npos ? what : what.substr(colon + 2), command_path(sub), command_path(sub));
}

std::string explain_parse_error(CLI::App& app, const std::string& what) {
  if (what.find("A subcommand is required") != std::string::npos) {
    CLI::App* sub = deepest_parsed(app);
    return fmt::format("'{}' needs a command: {} (see {} --help)", command_path(sub), joined(subcommand_names(sub)),
                       command_path(sub));
  }
  if (const size_t p = what.find(": 1 required "); p != std::string::npos && what.ends_with(" missing"))
    return what.substr(0, p) + " needs a value";
  // "Could not convert: --max-new-tokens = 99999999999" (a value that passed the checks but
  // does not fit the option's type).
  if (what.rfind("Could not convert: ", 0) == 0) {
    const std::string rest = what.substr(19);
    const size_t eq = rest.find(" = ");
    if (eq != std::string::npos)
      return rest.substr(0, eq) + ": '" + rest.substr(eq + 3) + "' is out of range for this option";
  }
  return what;
}

}  // namespace longctx::cli

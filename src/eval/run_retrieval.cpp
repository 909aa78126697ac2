// run_retrieval.cpp: the retrieval runner (passkey, niah, RULER): generate the samples once,
// run every method on them with greedy decoding, score, print the side-by-side table, and
// return JSON with every sample. Pictures: a depth x length heatmap per method for grid tasks
// (passkey, niah), a task x length heatmap per method for RULER.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <ostream>

#include "eval/eval_options.h"
#include "eval/lengths.h"
#include "eval/plots.h"
#include "eval/progress.h"
#include "eval/task.h"
#include "eval/text_table.h"
#include "util/error.h"

namespace longctx::eval {
namespace {

struct Planned {
  size_t task = 0;
  SampleSpec spec;
};

struct Done {
  double score = 0;
  std::string output, stop_reason;
  double prefill_s = 0, decode_s = 0;
};

std::string pct(double x) { return std::isnan(x) ? "-" : fmt::format("{:.1f}", x * 100.0); }

}  // namespace

nlohmann::json run_retrieval(const EvalOptions& o, const EngineFactory& factory, std::ostream& table_out) {
  const std::vector<std::string> task_names = expand_task(o.task);
  std::vector<std::unique_ptr<Task>> tasks;
  for (const auto& n : task_names) tasks.push_back(make_task(n));
  if (o.samples <= 0) fail("--samples must be at least 1 (got {})", o.samples);
  if (o.methods.empty()) fail("--attn names no attention method");
  if (!o.out_dir.empty()) require_pictures();  // --out asks for pictures: fail before the model loads
  std::shared_ptr<const BookText> book;
  if (!o.text_path.empty()) book = BookText::load(o.text_path);

  // The plan: every (task, length, depth, sample) cell, the same for every method.
  std::vector<Planned> plan;
  std::vector<std::vector<double>> depths_of(tasks.size());
  for (size_t t = 0; t < tasks.size(); ++t) {
    if (tasks[t]->depth_grid()) depths_of[t] = o.depths.empty() ? tasks[t]->default_depths() : o.depths;
    for (int64_t L : o.lengths) {
      const std::vector<double> ds = tasks[t]->depth_grid() ? depths_of[t] : std::vector<double>{-1.0};
      for (double d : ds)
        for (int i = 0; i < o.samples; ++i) {
          SampleSpec s;
          s.length = L;
          s.depth = d;
          s.index = i;
          s.seed = sample_seed(o.seed, task_names[t], L, d, i);
          plan.push_back({t, s});
        }
    }
  }
  int64_t total_weight = 0;
  for (const auto& p : plan) total_weight += p.spec.length;

  std::vector<Sample> samples(plan.size());
  std::vector<std::vector<Done>> done(o.methods.size(), std::vector<Done>(plan.size()));
  std::string model_name;
  for (size_t mi = 0; mi < o.methods.size(); ++mi) {
    const std::string& method = o.methods[mi];
    std::unique_ptr<Engine> engine = factory(load_options_for(o, method));
    if (!engine) fail("could not load the model for method '{}'", method);
    check_lengths(o, *engine);
    if (model_name.empty()) model_name = engine->config().name;
    PromptRenderer renderer(engine->tokenizer(), o.chat_template);
    TaskContext ctx{renderer, FitParams{}, book};
    ProgressReport progress(fmt::format("[{}]", method), int64_t(plan.size()), total_weight, !o.quiet);
    for (size_t i = 0; i < plan.size(); ++i) {
      const Task& task = *tasks[plan[i].task];
      const int mnt = o.max_new_tokens > 0 ? o.max_new_tokens : task.default_max_new_tokens();
      if (mi == 0) {  // prompts depend only on the seed and the tokenizer: made once
        SampleSpec spec = plan[i].spec;
        spec.budget = std::min<int64_t>(spec.length, engine->max_context() - mnt);
        samples[i] = task.make(ctx, spec);
        if (!o.save_prompts) {
          samples[i].prompt.clear();
          samples[i].prompt.shrink_to_fit();
        }
      }
      const Sample& s = samples[i];
      SamplingParams sp;
      sp.temperature = 0.f;
      sp.max_tokens = mnt;
      sp.seed = o.seed;
      GenerateResult g = engine->generate(s.tokens, sp);
      Done& d = done[mi][i];
      d.output = g.text;
      d.stop_reason = g.stop_reason;
      d.prefill_s = g.prefill_s;
      d.decode_s = g.decode_s;
      d.score = score_answer(s.metric, g.text, s.expected);
      std::string where = fmt::format("{} L={}", s.task, format_length(s.length));
      if (tasks[plan[i].task]->depth_grid()) where += fmt::format(" depth={:.0f}%", s.depth * 100);
      progress.done(s.length, fmt::format("{} ({} tokens): score {:.2f}", where, s.prompt_tokens, d.score));
    }
  }

  // Aggregates: mean score per (method, task, length) and per (method, task, depth, length).
  auto mean_over = [&](size_t mi, auto&& pred) {
    double sum = 0;
    int n = 0;
    for (size_t i = 0; i < plan.size(); ++i)
      if (pred(plan[i])) { sum += done[mi][i].score; ++n; }
    return n ? sum / n : NAN;
  };
  nlohmann::json results = nlohmann::json::array();
  for (size_t t = 0; t < tasks.size(); ++t) {
    table_out << task_names[t] << ": accuracy (%) by length, " << o.samples << " sample(s) per "
              << (tasks[t]->depth_grid() ? fmt::format("length x {} depths", depths_of[t].size()) : "length")
              << (model_name.empty() ? "" : ", model " + model_name) << "\n";
    std::vector<std::string> header{"length"};
    for (const auto& m : o.methods) header.push_back(m);
    TextTable table(header);
    std::vector<double> sums(o.methods.size(), 0.0);
    for (int64_t L : o.lengths) {
      std::vector<std::string> row{format_length(L)};
      for (size_t mi = 0; mi < o.methods.size(); ++mi) {
        const double acc = mean_over(mi, [&](const Planned& p) { return p.task == t && p.spec.length == L; });
        sums[mi] += acc;
        row.push_back(pct(acc));
        results.push_back({{"method", o.methods[mi]}, {"task", task_names[t]}, {"length", L}, {"accuracy", acc * 100.0},
                           {"n", o.samples * int(tasks[t]->depth_grid() ? depths_of[t].size() : 1)}});
      }
      table.row(row);
    }
    if (o.lengths.size() > 1) {
      std::vector<std::string> row{"mean"};
      for (double s : sums) row.push_back(pct(s / double(o.lengths.size())));
      table.row(row);
    }
    table.print(table_out);
    table_out << "\n";
  }
  if (tasks.size() > 1) {  // RULER: the mean over tasks per length
    table_out << o.task << ": mean accuracy (%) over " << tasks.size() << " tasks\n";
    std::vector<std::string> header{"length"};
    for (const auto& m : o.methods) header.push_back(m);
    TextTable table(header);
    for (int64_t L : o.lengths) {
      std::vector<std::string> row{format_length(L)};
      for (size_t mi = 0; mi < o.methods.size(); ++mi) {
        double sum = 0;
        for (size_t t = 0; t < tasks.size(); ++t)
          sum += mean_over(mi, [&](const Planned& p) { return p.task == t && p.spec.length == L; });
        row.push_back(pct(sum / double(tasks.size())));
      }
      table.row(row);
    }
    table.print(table_out);
    table_out << "\n";
  }

  // Pictures.
  nlohmann::json pictures = nlohmann::json::array();
  if (!o.out_dir.empty()) {
    std::filesystem::create_directories(o.out_dir);
    const std::string subtitle = fmt::format("{}{}{} sample{} per cell", model_name, model_name.empty() ? "" : ", ",
                                             o.samples, o.samples == 1 ? "" : "s");
    for (size_t mi = 0; mi < o.methods.size(); ++mi) {
      auto save = [&](const HeatmapData& h, const std::string& stem) {
        const std::string path = (std::filesystem::path(o.out_dir) / (stem + ".png")).string();
        write_png(path, accuracy_heatmap(h));
        pictures.push_back(path);
      };
      for (size_t t = 0; t < tasks.size(); ++t) {
        if (!tasks[t]->depth_grid()) continue;
        HeatmapData h;
        h.title = fmt::format("{}: {}", task_names[t], o.methods[mi]);
        h.subtitle = subtitle;
        h.lengths = o.lengths;
        for (double d : depths_of[t]) {
          h.rows.push_back(fmt::format("{:.0f}%", d * 100));
          std::vector<double> row;
          for (int64_t L : o.lengths)
            row.push_back(mean_over(mi, [&](const Planned& p) {
              return p.task == t && p.spec.length == L && p.spec.depth == d;
            }));
          h.score.push_back(row);
        }
        save(h, fmt::format("{}_{}", task_names[t], file_safe(o.methods[mi])));
      }
      if (tasks.size() > 1 || !tasks[0]->depth_grid()) {
        HeatmapData h;
        h.title = fmt::format("{}: {}", o.task, o.methods[mi]);
        h.subtitle = subtitle;
        h.lengths = o.lengths;
        h.y_title = "Task";
        for (size_t t = 0; t < tasks.size(); ++t) {
          h.rows.push_back(task_names[t]);
          std::vector<double> row;
          for (int64_t L : o.lengths)
            row.push_back(mean_over(mi, [&](const Planned& p) { return p.task == t && p.spec.length == L; }));
          h.score.push_back(row);
        }
        save(h, fmt::format("{}_{}", o.task, file_safe(o.methods[mi])));
      }
    }
  }

  nlohmann::json sample_json = nlohmann::json::array();
  for (size_t mi = 0; mi < o.methods.size(); ++mi)
    for (size_t i = 0; i < plan.size(); ++i) {
      const Sample& s = samples[i];
      const Done& d = done[mi][i];
      sample_json.push_back({{"method", o.methods[mi]},
                             {"task", s.task},
                             {"id", s.id},
                             {"length", s.length},
                             {"prompt_tokens", s.prompt_tokens},
                             {"depth", s.depth < 0 ? nlohmann::json(nullptr) : nlohmann::json(s.depth)},
                             {"expected", s.expected},
                             {"output", d.output},
                             {"metric", metric_name(s.metric)},
                             {"score", d.score},
                             {"correct", d.score >= 1.0},
                             {"stop_reason", d.stop_reason},
                             {"prefill_s", d.prefill_s},
                             {"decode_s", d.decode_s}});
      if (o.save_prompts) sample_json.back()["prompt"] = s.prompt;
    }
  return {{"kind", "retrieval"}, {"results", results}, {"samples", sample_json}, {"pictures", pictures},
          {"model_name", model_name}};
}

}  // namespace longctx::eval

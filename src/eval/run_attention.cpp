// run_attention.cpp: the `attention` runner (attention fidelity, EVALUATION.md).
//
// For each length: a needle prompt of that length (the niah task at 50% depth, or the --text book
// as haystack) is prefilled once with dense attention through Engine::capture_attention; in each
// layer's callback every method's mask is built from the captured Q/K and compared with dense
// (attention_fidelity.h). Output: per method and length, the mean relative error and recall over
// all heads, the worst heads, JSON with every (layer, head), and PNG attention maps of the
// worst head (and of --layer/--head when given) with the index overlaid.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <ostream>

#include "eval/attention_fidelity.h"
#include "eval/eval_options.h"
#include "eval/image.h"
#include "eval/lengths.h"
#include "eval/plots.h"
#include "eval/progress.h"
#include "eval/task.h"
#include "eval/text_table.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx::eval {
namespace {

constexpr double kPromptDepth = 0.5;
constexpr size_t kWorstShown = 5;

struct Picture {
  bool have = false;
  double rel_err = -1;
  int layer = 0, head = 0;
  Image img;
};

Image draw_head(const AttnCapture& c, const LayerMask& m, const HeadFidelity& h, int size, const std::string& method) {
  AttentionMapData d;
  d.title = fmt::format("{}: layer {}, head {}", method, h.layer, h.head);
  d.subtitle = fmt::format("{} tokens; relative error {:.3f}, recall {:.3f}", c.n_tokens, h.rel_err, h.recall);
  d.n_tokens = c.n_tokens;
  d.size = size;
  d.probs = [&](int64_t q, std::vector<double>& p) { attention_probs(c, h.head, q, p); };
  d.kept = [&](int64_t q, std::vector<uint8_t>& k) { kept_keys(m, c.n_head, h.head, q, k); };
  return attention_map(d);
}

}  // namespace

nlohmann::json run_attention(const EvalOptions& o, const EngineFactory& factory, std::ostream& table_out) {
  for (const auto& m : o.methods) check_mask_spec(m);  // bad specs fail before the model loads
  if (!o.out_dir.empty()) require_pictures();          // so does --out without picture support
  std::shared_ptr<const BookText> book;
  if (!o.text_path.empty()) book = BookText::load(o.text_path);
  // Capture is always dense; the methods are evaluated as masks over the captured Q/K/V.
  std::unique_ptr<Engine> engine = factory(load_options_for(o, "dense"));
  if (!engine) fail("could not load the model");
  check_lengths(o, *engine);
  const ModelConfig& cfg = engine->config();
  const MethodContext mc{cfg.n_layer, cfg.n_head, cfg.n_kv_head, cfg.head_dim, cfg.name};
  std::vector<std::unique_ptr<MaskMethod>> methods;
  for (const auto& m : o.methods) methods.push_back(make_mask_method(m, mc));
  if (o.attn_layer >= cfg.n_layer) fail("--layer {} is out of range: the model has {} layers", o.attn_layer, cfg.n_layer);
  if (o.attn_head >= cfg.n_head) fail("--head {} is out of range: the model has {} heads", o.attn_head, cfg.n_head);
  ThreadPool pool(o.threads);
  PromptRenderer renderer(engine->tokenizer(), o.chat_template);
  TaskContext ctx{renderer, FitParams{}, book};
  auto niah = make_task("niah");
  FidelityParams fp;
  fp.max_queries = o.max_queries;

  nlohmann::json results = nlohmann::json::array(), pictures = nlohmann::json::array();
  if (!o.out_dir.empty()) std::filesystem::create_directories(o.out_dir);
  int64_t total_weight = 0;
  for (int64_t L : o.lengths) total_weight += L * cfg.n_layer;
  ProgressReport progress("[attention]", int64_t(o.lengths.size()) * cfg.n_layer, total_weight, !o.quiet);
  for (int64_t L : o.lengths) {
    SampleSpec spec;
    spec.length = L;
    spec.budget = std::min<int64_t>(L, engine->max_context());
    spec.depth = kPromptDepth;
    spec.seed = sample_seed(o.seed, "attention", L, kPromptDepth, 0);
    const Sample prompt = niah->make(ctx, spec);
    std::vector<std::vector<HeadFidelity>> heads(methods.size());
    std::vector<Picture> worst(methods.size()), chosen(methods.size());
    engine->capture_attention(prompt.tokens, [&](const AttnCapture& c) {
      for (size_t mi = 0; mi < methods.size(); ++mi) {
        const LayerMask mask = methods[mi]->build(c);
        auto hf = layer_fidelity(c, mask, fp, pool);
        auto it = std::max_element(hf.begin(), hf.end(), [](auto& a, auto& b) { return a.rel_err < b.rel_err; });
        if (!o.out_dir.empty() && it != hf.end() && it->rel_err > 0 && (!worst[mi].have || it->rel_err > worst[mi].rel_err))
          worst[mi] = {true, it->rel_err, it->layer, it->head, draw_head(c, mask, *it, o.map_size, methods[mi]->name())};
        if (!o.out_dir.empty() && c.layer == o.attn_layer && o.attn_head >= 0) {
          const HeadFidelity& h = hf[size_t(o.attn_head)];
          chosen[mi] = {true, h.rel_err, h.layer, h.head, draw_head(c, mask, h, o.map_size, methods[mi]->name())};
        }
        heads[mi].insert(heads[mi].end(), hf.begin(), hf.end());
      }
      progress.done(L, fmt::format("L={} layer {}/{}", format_length(L), c.layer + 1, cfg.n_layer));
    });

    table_out << "attention fidelity at " << format_length(L) << " (" << prompt.prompt_tokens << " tokens, "
              << cfg.name << ", " << fidelity_rows(prompt.prompt_tokens, o.max_queries).size()
              << " query rows per head)\n";
    TextTable table({"method", "mean rel err", "max rel err", "mean recall", "min recall", "density", "worst heads (layer/head: err)"});
    for (size_t mi = 0; mi < methods.size(); ++mi) {
      auto& hs = heads[mi];
      if (hs.empty()) fail("the engine captured no attention layers for {} tokens", prompt.prompt_tokens);
      double err = 0, rec = 0, dens = 0, max_err = 0, min_rec = 1;
      nlohmann::json per_head = nlohmann::json::array();
      for (const auto& h : hs) {
        err += h.rel_err;
        rec += h.recall;
        dens += h.density;
        max_err = std::max(max_err, h.rel_err);
        min_rec = std::min(min_rec, h.min_recall);
        per_head.push_back({{"layer", h.layer}, {"head", h.head}, {"rel_err", h.rel_err}, {"recall", h.recall},
                            {"min_recall", h.min_recall}, {"density", h.density}});
      }
      const double n = double(hs.size());
      auto sorted = hs;
      std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.rel_err > b.rel_err; });
      std::string worst_s;
      for (size_t i = 0; i < std::min(kWorstShown, sorted.size()); ++i)
        worst_s += fmt::format("{}{}/{}: {:.3f}", i ? ", " : "", sorted[i].layer, sorted[i].head, sorted[i].rel_err);
      table.row({methods[mi]->name(), fmt::format("{:.4f}", err / n), fmt::format("{:.4f}", max_err),
                 fmt::format("{:.4f}", rec / n), fmt::format("{:.4f}", min_rec), fmt::format("{:.3f}", dens / n),
                 worst_s});
      nlohmann::json pics = nlohmann::json::array();
      for (Picture* pic : {&worst[mi], &chosen[mi]}) {
        if (!pic->have) continue;
        const std::string path =
            (std::filesystem::path(o.out_dir) /
             fmt::format("attention_{}_{}_L{}_H{}{}.png", file_safe(methods[mi]->name()), L, pic->layer, pic->head,
                         pic == &worst[mi] ? "_worst" : ""))
                .string();
        write_png(path, pic->img);
        pics.push_back(path);
        pictures.push_back(path);
      }
      results.push_back({{"method", methods[mi]->name()}, {"length", L}, {"prompt_tokens", prompt.prompt_tokens},
                         {"mean_rel_err", err / n}, {"max_rel_err", max_err}, {"mean_recall", rec / n},
                         {"min_recall", min_rec}, {"mean_density", dens / n}, {"heads", per_head},
                         {"pictures", pics}});
    }
    table.print(table_out);
    table_out << "\n";
  }
  return {{"kind", "attention"}, {"results", results}, {"pictures", pictures}, {"model_name", cfg.name}};
}

}  // namespace longctx::eval

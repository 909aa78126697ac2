// tokenselect_cache.cpp (bench, CPU): TokenSelect's decode selection cache on a real model: the
// hit rate and the overlap of a reused selection with the fresh one, against theta (issue 16;
// paper Fig. 6).
//
// What: the default model (or -m MODEL) prefilled once with --attn tokenselect on the first
// --tokens tokens of a text; then, for each theta, a copy of that KV cache decodes --steps
// greedy tokens with tokenselect=theta=T. Each decode step's layers look their selection cache
// up (cosine of the new selection query with the cached one >= theta); with the state's audit
// switch on, a hit also makes the fresh selection and records |reused ∩ fresh| / |fresh|.
// Output: one JSON object per theta (hits, misses, hit rate, mean overlap at hits, the greedy
// tokens' agreement with theta > 1 = no cache) and a table on stderr. --fp8: every fresh
// selection (prefill chunks, decode misses) is also made over the keys rounded through e4m3
// with one scale (what scoring an fp8 cache's keys sees: cuda::paged_dot's fp8 variant), and the
// mean |fp8 ∩ exact| / |exact| is reported per phase (the quality cost of fp8 scoring). --f16:
// likewise with the per-head scores rounded to fp16 (the GPU step's fp16 scores) over the exact keys.
// Run: build/bench/longctx_bench_tokenselect_cache [--tokens 6144] [--steps 64]
//        [--thetas 0.5,0.7,0.8,0.9,0.95] [--text FILE] [-m MODEL] [--threads 2] [--fp8] [--f16]
//        [--json OUT]
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "loader/model_file.h"
#include "longctx/engine.h"
#include "methods/method.h"
#include "methods/tokenselect/tokenselect_method.h"
#include "model/config.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/thread_pool.h"

using namespace longctx;

namespace {

struct Args {
  std::string model, text, json;
  int64_t tokens = 6144, steps = 64;
  int threads = 2;
  bool fp8 = false, f16 = false;
  std::vector<double> thetas = {0.5, 0.7, 0.8, 0.9, 0.95};
};

template <class T>
T number(const std::string& flag, const std::string& text) {
  T v{};
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size())
    fail("{} expects a number (got '{}')", flag, text);
  return v;
}

Args parse(int argc, char** argv) {
  Args a;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) fail("{} needs a value", argv[i]);
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "-m") a.model = value(i);
    else if (f == "--text") a.text = value(i);
    else if (f == "--json") a.json = value(i);
    else if (f == "--tokens") a.tokens = number<int64_t>(f, value(i));
    else if (f == "--steps") a.steps = number<int64_t>(f, value(i));
    else if (f == "--threads") a.threads = number<int>(f, value(i));
    else if (f == "--fp8") a.fp8 = true;
    else if (f == "--f16") a.f16 = true;
    else if (f == "--thetas") {
      a.thetas.clear();
      std::stringstream ss(value(i));
      for (std::string x; std::getline(ss, x, ',');) a.thetas.push_back(number<double>(f, x));
    } else {
      fail("unknown option '{}' (-m, --text, --tokens, --steps, --thetas, --threads, --fp8, --f16, --json)", f);
    }
  }
  if (a.model.empty()) a.model = default_model_path();
  if (a.text.empty()) a.text = std::string(std::getenv("HOME") ? std::getenv("HOME") : "") + "/.cache/longctx/texts/paradise_lost.txt";
  if (a.tokens < 1024 || a.steps < 1 || a.threads < 1) fail("--tokens >= 1024, --steps >= 1, --threads >= 1");
  return a;
}

int32_t argmax(const std::vector<float>& v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

struct Run {
  double theta = 0;
  int64_t hits = 0, misses = 0;
  double overlap = 0;
  double fp8_overlap = 0;  // mean over the decode misses (--fp8)
  int64_t fp8_n = 0;
  double f16_overlap = 0;  // mean over the decode misses (--f16)
  int64_t f16_n = 0;
  std::vector<int32_t> tokens;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    std::ifstream in(a.text);
    if (!in) fail("cannot read the text '{}' (scripts/fetch-text.sh fetches it)", a.text);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto file = open_model_file(a.model);
    const ModelConfig cfg = ModelConfig::from_model_file(*file);
    const auto tok = Tokenizer::from_model_file(*file);
    std::vector<int32_t> ids = tok->encode(text, true, false);
    if (int64_t(ids.size()) < a.tokens) fail("the text has {} tokens, fewer than --tokens {}", ids.size(), a.tokens);
    ids.resize(size_t(a.tokens));
    const MethodContext mc{cfg.n_layer, cfg.n_head, cfg.n_kv_head, cfg.head_dim, cfg.name};
    ThreadPool pool(a.threads);
    std::shared_ptr<const AttentionMethod> base = make_attention_method("tokenselect", mc);
    Transformer model(cfg, ModelWeights::load(*file, cfg), base, pool);
    const int64_t capacity = a.tokens + a.steps;
    auto prompt = model.new_sequence(capacity);
    model.attach(prompt.get());
    auto& pst = static_cast<TokenSelectMethod::State&>(*prompt->method);
    pst.audit_fp8 = a.fp8;
    pst.audit_f16 = a.f16;
    std::vector<float> logits;
    fmt::print(stderr, "prefill {} tokens...\n", a.tokens);
    model.forward(ids, 1, &logits);
    const double fp8_prefill = pst.fp8_selections[0] ? pst.fp8_overlap_sum[0] / double(pst.fp8_selections[0]) : 1.0;
    if (a.fp8)
      fmt::print(stderr, "fp8 scoring, prefill: {} selections, mean overlap with the exact keys' {:.4f}\n",
                 pst.fp8_selections[0], fp8_prefill);
    const double f16_prefill = pst.f16_selections[0] ? pst.f16_overlap_sum[0] / double(pst.f16_selections[0]) : 1.0;
    if (a.f16)
      fmt::print(stderr, "fp16 scores, prefill: {} selections, mean overlap with the fp32 scores' {:.4f}\n",
                 pst.f16_selections[0], f16_prefill);
    const int32_t first = argmax(logits);

    std::vector<double> thetas = a.thetas;
    thetas.push_back(2.0);  // no cache: the reference tokens
    std::vector<Run> runs;
    for (double theta : thetas) {
      std::shared_ptr<const AttentionMethod> m = make_attention_method(fmt::format("tokenselect=theta={}", theta), mc);
      SequenceState s;
      s.cache = prompt->cache;
      s.attn = m;
      s.method = m->start_sequence();
      auto& st = static_cast<TokenSelectMethod::State&>(*s.method);
      st.audit = true;
      st.audit_fp8 = a.fp8;
      st.audit_f16 = a.f16;
      model.attach(&s);
      Run r;
      r.theta = theta;
      int32_t next = first;
      for (int64_t i = 0; i < a.steps; ++i) {
        r.tokens.push_back(next);
        model.forward(std::span<const int32_t>(&next, 1), 1, &logits);
        next = argmax(logits);
      }
      r.hits = st.hits;
      r.misses = st.misses;
      r.overlap = st.hits ? st.overlap_sum / double(st.hits) : 1.0;
      r.fp8_n = st.fp8_selections[1];
      r.fp8_overlap = r.fp8_n ? st.fp8_overlap_sum[1] / double(r.fp8_n) : 1.0;
      r.f16_n = st.f16_selections[1];
      r.f16_overlap = r.f16_n ? st.f16_overlap_sum[1] / double(r.f16_n) : 1.0;
      runs.push_back(r);
      model.attach(prompt.get());
    }

    const Run& ref = runs.back();
    std::string json = fmt::format(
        "{{\"bench\": \"tokenselect decode selection cache vs theta (bench/tokenselect_cache.cpp)\", \"model\": \"{}\", "
        "\"prompt_tokens\": {}, \"decode_steps\": {}, \"layers\": {}, ",
        cfg.name, a.tokens, a.steps, cfg.n_layer);
    if (a.fp8)
      json += fmt::format("\"fp8_scoring_prefill\": {{\"selections\": {}, \"mean_overlap_with_exact\": {:.4f}}}, ",
                          pst.fp8_selections[0], fp8_prefill);
    if (a.f16)
      json += fmt::format("\"f16_scores_prefill\": {{\"selections\": {}, \"mean_overlap_with_f32_scores\": {:.4f}}}, ",
                          pst.f16_selections[0], f16_prefill);
    json += "\"runs\": [";
    fmt::print(stderr, "{:>6} {:>9} {:>9} {:>12} {:>22}\n", "theta", "hit rate", "overlap", "lookups", "tokens = no cache");
    for (size_t i = 0; i < runs.size(); ++i) {
      const Run& r = runs[i];
      int64_t same = 0;
      while (same < int64_t(r.tokens.size()) && r.tokens[size_t(same)] == ref.tokens[size_t(same)]) ++same;
      const double rate = double(r.hits) / double(std::max<int64_t>(1, r.hits + r.misses));
      fmt::print(stderr, "{:>6} {:>9.3f} {:>9.3f} {:>12} {:>14} of {}\n", r.theta, rate, r.overlap, r.hits + r.misses,
                 same, r.tokens.size());
      json += fmt::format("{}{{\"theta\": {}, \"hits\": {}, \"misses\": {}, \"hit_rate\": {:.4f}, "
                          "\"mean_overlap_at_hits\": {:.4f}, \"greedy_prefix_equal_to_no_cache\": {}",
                          i ? ", " : "", r.theta, r.hits, r.misses, rate, r.overlap, same);
      if (a.fp8) {
        json += fmt::format(", \"fp8_scoring_decode_misses\": {}, \"fp8_mean_overlap_with_exact\": {:.4f}", r.fp8_n,
                            r.fp8_overlap);
        fmt::print(stderr, "{:>6} fp8 scoring at {} decode misses: mean overlap with the exact keys' {:.4f}\n", r.theta,
                   r.fp8_n, r.fp8_overlap);
      }
      if (a.f16) {
        json += fmt::format(", \"f16_scores_decode_misses\": {}, \"f16_mean_overlap_with_f32_scores\": {:.4f}", r.f16_n,
                            r.f16_overlap);
        fmt::print(stderr, "{:>6} fp16 scores at {} decode misses: mean overlap with the fp32 scores' {:.4f}\n", r.theta,
                   r.f16_n, r.f16_overlap);
      }
      json += "}";
    }
    json += "]}\n";
    if (!a.json.empty()) {
      std::ofstream out(a.json);
      if (!out) fail("cannot write '{}'", a.json);
      out << json;
    }
    fmt::print("{}", json);
  } catch (const std::exception& e) {
    fmt::print(stderr, "longctx_bench_tokenselect_cache: {}\n", e.what());
    return 1;
  }
  return 0;
}

// cmd_bench.cpp: `longctx bench model`: prefill and decode throughput at given prompt lengths.
//
//   longctx bench model --lengths 512,4k --decode 32 --json bench/results/cpu.json
//   longctx bench attention --prefill 8192 --decode 131072      (CUDA builds, on a GPU)
// The prompt is natural text (a repeated paragraph) tokenized by the model's tokenizer and cut
// to exactly L tokens; decode runs --decode greedy tokens with EOS ignored.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "longctx/engine.h"
#include "util/error.h"
#ifdef LONGCTX_WITH_CUDA_BENCH
#include "bench/bench_attention.h"
#endif

namespace longctx::cli {

namespace {

constexpr const char* kFiller =
    "The history of the city begins with a small settlement on the river bank. Traders came by boat, "
    "and over the centuries the market grew into a town with walls, churches and a university. ";

int64_t parse_length(const std::string& s) {
  if (s.empty()) fail("empty length in --lengths");
  size_t pos = 0;
  int64_t v = 0;
  try {
    v = std::stoll(s, &pos);
  } catch (...) {
    fail("bad length '{}' in --lengths (expected e.g. 512, 4k, 1m)", s);
  }
  std::string suf = s.substr(pos);
  if (suf == "k" || suf == "K") v *= 1024;
  else if (suf == "m" || suf == "M") v *= 1024 * 1024;
  else if (!suf.empty()) fail("bad length '{}' in --lengths (expected e.g. 512, 4k, 1m)", s);
  if (v <= 0) fail("length '{}' in --lengths must be positive", s);
  return v;
}

struct BenchArgs {
  std::string model, lengths = "512,4k", json_path, attn = "dense";
  int decode = 32, threads = 0, repeats = 1;
};

void run(const BenchArgs& a) {
  std::vector<int64_t> lengths;
  for (size_t p = 0; p <= a.lengths.size();) {
    size_t q = a.lengths.find(',', p);
    if (q == std::string::npos) q = a.lengths.size();
    lengths.push_back(parse_length(a.lengths.substr(p, q - p)));
    p = q + 1;
  }
  LoadOptions lo;
  lo.model_path = a.model;
  lo.n_threads = a.threads;
  lo.attn = a.attn;
  auto eng = Engine::load(lo);
  const Tokenizer& tok = eng->tokenizer();
  const std::vector<int32_t> unit = tok.encode(kFiller, false, false);

  nlohmann::json out;
  out["benchmark"] = "model";
  out["model"] = eng->config().name;
  out["attn"] = a.attn;
  out["threads"] = a.threads > 0 ? a.threads : int(std::thread::hardware_concurrency());
  out["device"] = "cpu";
  out["results"] = nlohmann::json::array();
  std::fprintf(stderr, "%-8s %12s %14s %12s %14s\n", "length", "prefill s", "prefill tok/s", "decode s", "decode tok/s");
  for (int64_t L : lengths) {
    std::vector<int32_t> prompt;
    if (tok.adds_bos() && tok.bos_id() >= 0) prompt.push_back(tok.bos_id());
    while (int64_t(prompt.size()) < L) prompt.insert(prompt.end(), unit.begin(), unit.end());
    prompt.resize(size_t(L));
    SamplingParams sp;
    sp.max_tokens = a.decode;
    sp.stop_at_eos = false;
    double best_prefill = 1e30, best_decode = 1e30;
    for (int r = 0; r < a.repeats; ++r) {
      const auto res = eng->generate(prompt, sp);
      best_prefill = std::min(best_prefill, res.prefill_s);
      best_decode = std::min(best_decode, res.decode_s);
    }
    const double ptps = double(L) / best_prefill;
    const double dtps = a.decode > 1 ? double(a.decode - 1) / best_decode : 0;
    std::fprintf(stderr, "%-8lld %12.3f %14.1f %12.3f %14.1f\n", (long long)L, best_prefill, ptps, best_decode, dtps);
    out["results"].push_back({{"length", L},
                              {"prefill_s", best_prefill},
                              {"prefill_tokens_per_s", ptps},
                              {"decode_tokens", a.decode},
                              {"decode_s", best_decode},
                              {"decode_tokens_per_s", dtps}});
  }
  const std::string s = out.dump(2);
  if (a.json_path.empty()) {
    std::printf("%s\n", s.c_str());
  } else {
    std::ofstream f(a.json_path);
    if (!f) fail("cannot write '{}'", a.json_path);
    f << s << "\n";
  }
}

}  // namespace

void register_bench(CLI::App& app) {
  auto* b = app.add_subcommand("bench", "Benchmarks (JSON output)");
  b->require_subcommand(1);
  auto args = std::make_shared<BenchArgs>();
  auto* m = b->add_subcommand("model", "Prefill and decode tokens/s of a model at given prompt lengths");
  m->add_option("-m,--model", args->model, "Model (default: SmolLM2-135M-Instruct)");
  m->add_option("--lengths", args->lengths, "Prompt lengths, e.g. 512,4k");
  m->add_option("--decode", args->decode, "Tokens to decode after each prefill")->check(CLI::NonNegativeNumber);
  m->add_option("--repeats", args->repeats, "Runs per length (the best is reported)")->check(CLI::PositiveNumber);
  m->add_option("--attn", args->attn, "Attention method");
  m->add_option("-t,--threads", args->threads, "CPU threads (0 = all cores)");
  m->add_option("--json", args->json_path, "Write the JSON here instead of stdout");
  m->callback([args] { run(*args); });

  // bench attention: the CUDA kernels vs nothing else in-process; scripts/gpu-check.sh runs it
  // with torch SDPA (cuDNN, flash) side by side on the device.
  auto* a = b->add_subcommand("attention",
                              "CUDA attention kernels: prefill 8K-128K, decode 128K-1M (JSON); options: "
                              "--prefill N,.. --decode N,.. --no-ops --reps-scale X --json FILE");
  a->allow_extras();
  a->callback([a] {
#ifdef LONGCTX_WITH_CUDA_BENCH
    std::vector<std::string> rest = a->remaining();
    std::vector<char*> argv{const_cast<char*>("longctx bench attention")};
    for (auto& r : rest) argv.push_back(r.data());
    const int rc = bench_attention_main(int(argv.size()), argv.data());
    if (rc != 0) fail("bench attention failed (exit code {})", rc);
#else
    (void)a;
    fail("this longctx was built without CUDA: `bench attention` needs nvcc at build time and a GPU to run");
#endif
  });
}

}  // namespace longctx::cli

// options.h: the command-line options that several `longctx` subcommands share, registered in
// one place so that one idea has one name everywhere (generate, bench model, eval,
// search-patterns), with the same checks and the default shown in every --help.
//
//   -t,--threads N          CPU threads (0 = all cores; above the core count: capped, with a warning)
//   --device cpu|cuda|auto  where the model runs
//   --prefill-chunk N       prefill chunk in tokens (CPU; --gpu-chunk is the GPU's)
//   --cpu-weights quantized|fp32  CPU matmuls on the file's quantized blocks (fast) or on fp32
//   -c,--max-context N      context limit; past the model's trained context only with --extrapolate
//   -n,--max-new-tokens N   tokens to generate
//   --seed N                random seed (>= 0)
//   --attn-tiles bf16|fp8   GPU sparse prefill attention's K/V tiles (fp8: from the fp8 KV cache)
// Checks run while the command line is parsed, so a bad value fails before any model loads.
// They throw CLI::ValidationError, which main() prints as `longctx: <what is wrong>` and exits
// with kExitUsage; errors found while working (an unreadable model, ...) exit with kExitRuntime.
// Header-only: also used by src/eval/eval_cli.cpp and src/methods/minference/search_cli.cpp, which are
// linked into other libraries than the CLI's own sources.
#pragma once
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "longctx/engine.h"
#include "loader/model_file.h"
#include "model/config.h"
#include "util/error.h"

namespace longctx::cli {

// Exit codes of the longctx binary (documented in the README, "Using it").
constexpr int kExitRuntime = 1;  // the work failed: unreadable model, prompt too long, ...
constexpr int kExitUsage = 2;    // the command line is wrong: nothing was loaded or run

// A usage error found after parsing (e.g. a missing combination of options): exits kExitUsage.
[[noreturn]] inline void usage_error(const std::string& msg) { throw CLI::ValidationError(msg); }

namespace detail {

// A validator with no text in --help (the option's description says what is allowed).
inline CLI::Validator quiet_validator(std::function<std::string(std::string&)> f) {
  return CLI::Validator(std::move(f), "");
}

// Parses a whole string as a number; false on junk, trailing text or out of range.
inline bool parse_int(const std::string& s, long long& v) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  v = std::strtoll(s.c_str(), &end, 10);
  return errno == 0 && *end == '\0';
}
inline bool parse_double(const std::string& s, double& v) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return errno == 0 && *end == '\0';
}

}  // namespace detail

// An integer >= min (min 0: "must not be negative"; 1: "must be positive").
inline CLI::Validator integer_at_least(long long min) {
  return detail::quiet_validator([min](std::string& s) -> std::string {
    long long v = 0;
    if (!detail::parse_int(s, v)) return "'" + s + "' is not a whole number";
    if (v < min) return min == 0 ? "must not be negative (got " + s + ")" : "must be at least " + std::to_string(min) + " (got " + s + ")";
    return "";
  });
}

// A finite real number >= 0 (rejects nan and inf).
inline CLI::Validator finite_non_negative() {
  return detail::quiet_validator([](std::string& s) -> std::string {
    double v = 0;
    if (!detail::parse_double(s, v) || !std::isfinite(v)) return "'" + s + "' is not a finite number";
    if (v < 0) return "must not be negative (got " + s + ")";
    return "";
  });
}

// A probability in (0, 1].
inline CLI::Validator probability_above_zero() {
  return detail::quiet_validator([](std::string& s) -> std::string {
    double v = 0;
    if (!detail::parse_double(s, v) || !std::isfinite(v)) return "'" + s + "' is not a finite number";
    if (!(v > 0 && v <= 1)) return "must be in (0, 1] (got " + s + "; 1 = off)";
    return "";
  });
}

// One of a fixed list of words.
inline CLI::Validator one_of(std::vector<std::string> words, std::string what) {
  return detail::quiet_validator([words, what](std::string& s) -> std::string {
    std::string list;
    for (size_t i = 0; i < words.size(); ++i) {
      if (words[i] == s) return "";
      list += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
    }
    return "unknown " + what + " '" + s + "' (expected " + list + ")";
  });
}

namespace detail {

// "" when `s` can be written: an existing file (or folder, when `folder`) that is writable, or a
// new one in a writable folder; with `make_parents`, missing parent folders are created by the
// writer, so the nearest existing ancestor must be a writable folder.
inline std::string check_writable(const std::string& s, bool folder, bool make_parents) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(s);
  if (fs::exists(p, ec)) {
    if (fs::is_directory(p, ec) != folder)
      return "'" + s + "' is " + (folder ? "a file, not a folder" : "a folder, not a file");
    return access(s.c_str(), W_OK) == 0 ? "" : "cannot write '" + s + "' (permission denied)";
  }
  fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  while (make_parents && !fs::exists(dir, ec) && dir.has_parent_path() && dir.parent_path() != dir)
    dir = dir.parent_path();
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    return "cannot write '" + s + "': '" + dir.string() + "' is not a folder";
  if (!fs::is_directory(dir, ec)) return "cannot write '" + s + "': the folder '" + dir.string() + "' does not exist";
  if (access(dir.c_str(), W_OK) != 0)
    return "cannot write '" + s + "': the folder '" + dir.string() + "' is not writable";
  return "";
}

}  // namespace detail

// A file that can be created or overwritten (see detail::check_writable). Checked before the
// work, so a long run does not end with "cannot write".
inline CLI::Validator writable_file(bool make_parents = false) {
  return detail::quiet_validator(
      [make_parents](std::string& s) -> std::string { return detail::check_writable(s, false, make_parents); });
}
// A folder that exists and is writable, or can be created.
inline CLI::Validator writable_folder() {
  return detail::quiet_validator([](std::string& s) -> std::string { return detail::check_writable(s, true, true); });
}

// An existing, readable file (not a folder).
inline CLI::Validator readable_file() {
  return detail::quiet_validator([](std::string& s) -> std::string {
    std::error_code ec;
    if (!std::filesystem::exists(s, ec)) return "no such file '" + s + "'";
    if (std::filesystem::is_directory(s, ec)) return "'" + s + "' is a folder, not a file";
    if (access(s.c_str(), R_OK) != 0) return "cannot read '" + s + "' (permission denied)";
    return "";
  });
}

// The number of CPU cores (at least 1).
inline int core_count() { return std::max(1u, std::thread::hardware_concurrency()); }

// -t/--threads: >= 0; above the core count it is capped, with a warning: more threads than cores
// only make them wait for each other.
inline CLI::Option* add_threads(CLI::App* c, int& threads) {
  auto cap = detail::quiet_validator([](std::string& s) -> std::string {
    long long v = 0;
    if (!detail::parse_int(s, v)) return "'" + s + "' is not a whole number";
    if (v < 0) return "must not be negative (got " + s + "; 0 = all cores)";
    if (v > core_count()) {
      std::fprintf(stderr, "longctx: -t %s is more than the %d cores of this machine; using %d\n", s.c_str(),
                   core_count(), core_count());
      s = std::to_string(core_count());
    }
    return "";
  });
  return c->add_option("-t,--threads", threads, "CPU threads (0 = all cores; more than the cores is capped)")
      ->transform(cap);
}

inline CLI::Option* add_device(CLI::App* c, std::string& device) {
  return c->add_option("--device", device, "cpu, cuda (the GPU; fails if unusable) or auto (the GPU when usable, else the CPU)")
      ->check(one_of({"cpu", "cuda", "auto"}, "device"));
}

// The CLI runs the CPU path on the quantized weights by default (LoadOptions keeps "fp32").
constexpr const char* kCliCpuWeights = "quantized";
inline CLI::Option* add_cpu_weights(CLI::App* c, std::string& cpu_weights) {
  return c->add_option("--cpu-weights", cpu_weights,
                       "CPU matmul weights: quantized (the file's 4/8-bit blocks, 8-bit activations: fast) or fp32 "
                       "(dequantized at load: the exact reference)")
      ->check(one_of({"quantized", "fp32"}, "CPU weights"));
}

// --kv-offload and --kv-host-layers (generate, bench model, serve): GPU KV offload (gpu/gpu_offload.h).
struct KvOffloadArgs {
  bool on = false;
  int host_layers = -1;  // -1: automatic
  std::string page_table = "auto";
  std::string residual = "host";
};
inline void add_kv_offload(CLI::App* c, KvOffloadArgs& a) {
  c->add_flag("--kv-offload", a.on,
              "GPU: keep the KV cache of layers that do not fit HBM in pinned host memory behind GPU caches (one "
              "sequence, --attn hip decode); sized up front against the GPU and host budgets");
  c->add_option("--kv-host-layers", a.host_layers,
                "With --kv-offload: layers whose K/V live in host memory (default: as few as the GPU needs)")
      ->check(integer_at_least(0));
  c->add_option("--kv-page-table", a.page_table,
                "With --kv-offload: page tables of the host layers' GPU caches: vector (one entry a line, grows with "
                "the context), hash (fixed size, 4 buckets a cache slot), auto (vector unless only hash fits)")
      ->check(CLI::IsMember({"auto", "vector", "hash"}));
  c->add_option("--kv-offload-residual", a.residual,
                "With --kv-offload: the prefill's residual stream in pinned host memory, through two GPU chunk "
                "buffers (host: GPU staging O(chunk)), or whole in GPU memory (gpu)")
      ->check(CLI::IsMember({"host", "gpu"}));
}

// --attn-tiles (generate, bench model, eval: the commands with --kv-cache): LoadOptions::attn_tiles.
inline CLI::Option* add_attn_tiles(CLI::App* c, std::string& tiles) {
  return c
      ->add_option("--attn-tiles", tiles,
                   "GPU: K/V tiles of the sparse prefill attention (MInference, A-shape, HiP): bf16 (the layer's K/V "
                   "staged in bf16), or fp8 (the e4m3 rows of --kv-cache fp8, read straight by the kernel: half the "
                   "bytes, the values decode sees; HiP's prefill estimate scores the same e4m3 keys). Dense steps "
                   "read bf16 either way")
      ->check(one_of({"bf16", "fp8"}, "attention tile type"));
}

inline CLI::Option* add_prefill_chunk(CLI::App* c, int64_t& chunk) {
  return c->add_option("--prefill-chunk", chunk, "Prefill chunk on the CPU in tokens (bounds activation memory)")
      ->check(integer_at_least(1));
}

inline CLI::Option* add_max_new_tokens(CLI::App* c, int& n, const std::string& what) {
  return c->add_option("-n,--max-new-tokens", n, what)->check(integer_at_least(0));
}

inline CLI::Option* add_seed(CLI::App* c, uint64_t& seed, const std::string& what) {
  return c->add_option("--seed", seed, what)->check(integer_at_least(0));
}

// -c/--max-context and --extrapolate. The check against the model's trained context needs the
// model's metadata: check_max_context, called first thing in the subcommand's callback.
struct ContextArgs {
  int64_t max_context = 0;  // 0 = the model's trained context
  bool extrapolate = false;
};
inline void add_max_context(CLI::App* c, ContextArgs& a) {
  c->add_option("-c,--max-context", a.max_context,
                "Context limit in tokens (0 = the model's trained context; more needs --extrapolate)")
      ->check(integer_at_least(0));
  c->add_flag("--extrapolate", a.extrapolate,
              "Allow -c past the model's trained context (RoPE extrapolation: quality usually drops)");
}

// Refuses -c past the trained context of the model at `model_path` (empty = the default model)
// unless --extrapolate: reads only the file's metadata, before the weights load.
inline void check_max_context(const ContextArgs& a, const std::string& model_path) {
  if (a.max_context == 0 || a.extrapolate) return;
  const std::string path = model_path.empty() ? default_model_path() : model_path;
  const ModelConfig cfg = ModelConfig::from_model_file(*open_model_file(path));
  if (a.max_context > cfg.context_length)
    usage_error(fmt::format("-c {} is past the trained context of {} ({} tokens); add --extrapolate to run past it "
                            "anyway (quality usually drops)",
                            a.max_context, cfg.name.empty() ? path : cfg.name, cfg.context_length));
}

}  // namespace longctx::cli

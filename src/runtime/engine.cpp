// engine.cpp: longctx::Engine: loads a model file, owns the tokenizer, the transformer and its
// KV cache, and runs chunked prefill + sampled decode for one sequence.
//
// The transformer runs on the CPU (model/Transformer, fp32) or, in a CUDA build
// (LONGCTX_WITH_GPU) with LoadOptions::device "cuda"/"auto", on the GPU (gpu/GpuTransformer,
// bf16). --device auto falls back to the CPU, with a one-line note on stderr, when there is no
// usable GPU, the model does not fit, or a prompt's KV cache does not fit. The --attn method runs
// on either: the GPU model takes the same spec (methods/: dense, minference, a_shape;
// sparse prefill needs head_dim 128 there, else --device cuda fails and auto runs on the CPU).
#include "longctx/engine.h"

#include <cblas.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "gpu/attn_tiles_options.h"
#include "model/transformer.h"
#include "runtime/sequence_batch.h"
#include "runtime/sequence_run.h"
#include "util/error.h"
#include "util/thread_pool.h"

#ifdef LONGCTX_WITH_GPU
#include "gpu/device_probe.h"
#include "gpu/device_weights.h"
#include "gpu/geometry.h"
#include "methods/gpu_method.h"
#include "gpu/gpu_transformer.h"
#include "gpu/memory_plan.h"
#include "gpu/null_tokenizer.h"
#endif

namespace longctx {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Seed of --random-weights models: fixed, so benchmark runs are repeatable.
constexpr uint64_t kRandomWeightsSeed = 1;

void note(const std::string& s) { std::fprintf(stderr, "longctx: %s\n", s.c_str()); }

class CpuEngine final : public Engine {
 public:
  explicit CpuEngine(const LoadOptions& o) : opts_(o) {
    if (opts_.n_threads > 0) set_num_threads(opts_.n_threads);
    // Our pool splits work; each BLAS call runs on one thread (no oversubscription).
    openblas_set_num_threads(1);
    if (opts_.prefill_chunk <= 0) fail("prefill chunk must be positive (got {})", opts_.prefill_chunk);
    if (opts_.device != "cpu" && opts_.device != "cuda" && opts_.device != "auto")
      fail("unknown device '{}' (expected cpu, cuda or auto)", opts_.device);
    parse_cpu_weights(opts_.cpu_weights);  // a bad name fails before the model loads
    check_attn_tiles();
    const bool random = !opts_.random_weights.empty();
#ifndef LONGCTX_WITH_GPU
    if (random) fail("--random-weights generates the weights on a GPU, but this longctx was built without CUDA");
    if (opts_.device == "cuda")
      fail("--device cuda: this longctx was built without CUDA (rebuild with -DLONGCTX_CUDA=ON where nvcc is "
           "installed, or use --device cpu)");
    if (opts_.device == "auto") note("built without CUDA; running on the CPU");
#else
    if (random && opts_.device == "cpu")
      fail("--random-weights generates the weights on the GPU: use --device cuda (or auto)");
    if (random) {
      cfg_ = gpu::geometry_config(opts_.random_weights);
      tok_ = gpu::make_null_tokenizer(cfg_.vocab_size);
      if (!opts_.model_path.empty()) {  // a real tokenizer for the random model (its file's tensors unused)
        file_ = open_model_file(opts_.model_path);
        tok_ = Tokenizer::from_model_file(*file_);
        if (tok_->vocab_size() != cfg_.vocab_size)  // random logits sample every id of the geometry
          fail("{}: its tokenizer has {} tokens but the --random-weights geometry '{}' samples from {}; pick a "
               "tokenizer of that vocabulary size", opts_.model_path, tok_->vocab_size(), opts_.random_weights,
               cfg_.vocab_size);
      }
    }
#endif
    if (!random) {
      const std::string path = opts_.model_path.empty() ? default_model_path() : opts_.model_path;
      file_ = open_model_file(path);
      cfg_ = ModelConfig::from_model_file(*file_);
      tok_ = Tokenizer::from_model_file(*file_);
      if (tok_->vocab_size() > cfg_.vocab_size)
        fail("{}: tokenizer has {} tokens but the model's vocabulary is {}", path, tok_->vocab_size(), cfg_.vocab_size);
    }
    max_ctx_ = opts_.max_context > 0 ? opts_.max_context : cfg_.context_length;
    if (opts_.attn_tiles == "fp8" &&
        make_attention_method(opts_.attn, method_context())->needs().keys == KeyLayout::pre_rope)
      fail("--attn {} keeps pre-RoPE keys and attends every step itself; --attn-tiles fp8 is for the sparse prefill "
           "kernel (MInference, A-shape, HiP): drop it",
           opts_.attn);
#ifdef LONGCTX_WITH_GPU
    if (opts_.device != "cpu") on_gpu_ = load_gpu(random);
#endif
    if (!on_gpu_) ensure_cpu();
  }

  const ModelConfig& config() const override { return cfg_; }
  const Tokenizer& tokenizer() const override { return *tok_; }
  int64_t max_context() const override { return max_ctx_; }
  std::string device() const override { return on_gpu_ ? "cuda" : "cpu"; }

  GenerateResult generate(std::span<const int32_t> prompt, const SamplingParams& sp, const ProgressFn& progress,
                          const TokenFn& on_token) override {
    check_prompt(prompt, sp, "");
    const int64_t n = int64_t(prompt.size());
    SequenceRun run(sp, n);
    reset_model(n + sp.max_tokens);

    std::vector<float> logits;
    const auto t0 = Clock::now();
    prefill(prompt, 1, &logits, progress, t0);
    run.res.prefill_s = seconds_since(t0);

    const auto t1 = Clock::now();
    int32_t id = -1;
    while (run.next(*tok_, logits, &id)) {
      if (on_token && !on_token(id, run.stream.take_ready())) {
        run.res.stop_reason = "callback";
        break;
      }
      if (run.finished()) break;
      forward_model(std::span(&id, 1), 1, &logits);
    }
    run.res.decode_s = seconds_since(t1);
    run.res.text = run.stream.text();
    if (on_token) {
      const std::string rest = run.stream.take_rest();
      if (!rest.empty()) on_token(-1, rest);
    }
    return std::move(run.res);
  }

  std::vector<GenerateResult> generate_batch(std::span<const std::vector<int32_t>> prompts, const SamplingParams& sp,
                                             const ProgressFn& progress) override {
    for (size_t i = 0; i < prompts.size(); ++i) check_prompt(prompts[i], sp, fmt::format("prompt {}: ", i));
    const int64_t n_seq = int64_t(prompts.size());
    if (n_seq == 0) return {};
    std::vector<int64_t> slot(static_cast<size_t>(n_seq));  // prompt i's sequence: the slot-th made
    // Per device: a new sequence for prompt i (capacity: prompt + max_tokens) prefilled by `fill`
    // while attached, and one batched decode step of the sequences in `rows`.
    std::function<void(int64_t, const std::function<void()>&)> new_prefilled;
    std::function<void(std::span<const int64_t>, std::span<const int32_t>, std::vector<float>&)> decode_step;
    std::vector<std::unique_ptr<SequenceState>> seqs;
#ifdef LONGCTX_WITH_GPU
    std::vector<std::unique_ptr<gpu::GpuSequence>> gpu_seqs;
    if (on_gpu_ && !gpu_->batches_decode()) return Engine::generate_batch(prompts, sp, progress);  // one at a time
    if (on_gpu_) reserve_gpu_sequences(prompts, sp);  // the fit check, before any work (auto: may move to the CPU)
    if (on_gpu_) {
      new_prefilled = [&](int64_t i, const std::function<void()>& fill) {
        gpu_seqs.push_back(gpu_->new_sequence(int64_t(prompts[size_t(i)].size()) + sp.max_tokens));
        const Attached<gpu::GpuTransformer, gpu::GpuSequence> on(*gpu_, gpu_seqs.back().get());
        fill();
      };
      decode_step = [&](std::span<const int64_t> rows, std::span<const int32_t> ids, std::vector<float>& out) {
        std::vector<gpu::GpuSequence*> step;
        for (int64_t i : rows) step.push_back(gpu_seqs[size_t(slot[size_t(i)])].get());
        gpu_->decode_batch(step, ids, out);
      };
    }
#endif
    if (!on_gpu_) {
      new_prefilled = [&](int64_t i, const std::function<void()>& fill) {
        seqs.push_back(model_->new_sequence(int64_t(prompts[size_t(i)].size()) + sp.max_tokens));
        const Attached<Transformer, SequenceState> on(*model_, seqs.back().get());
        fill();
      };
      decode_step = [&](std::span<const int64_t> rows, std::span<const int32_t> ids, std::vector<float>& out) {
        std::vector<SequenceState*> step;
        for (int64_t i : rows) step.push_back(seqs[size_t(slot[size_t(i)])].get());
        model_->decode_batch(step, ids, out);
      };
    }
    const auto t0 = Clock::now();
    std::vector<SequenceRun> runs;
    for (const auto& p : prompts) runs.emplace_back(sp, int64_t(p.size()));
    std::vector<std::vector<float>> logits(static_cast<size_t>(n_seq));  // [n_seq][vocab] of the prefills
    // Prefill order: as given, except that with the GPU's fp8 cache the longest prompt goes first:
    // the sequences share the per-layer scales its prefill sets (gpu_transformer.h), so they
    // cover the most keys.
    std::vector<int64_t> order(static_cast<size_t>(n_seq));
    for (int64_t i = 0; i < n_seq; ++i) order[size_t(i)] = i;
#ifdef LONGCTX_WITH_GPU
    if (on_gpu_ && gpu_->kv_cache() == gpu::KvCacheType::fp8)
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return prompts[size_t(a)].size() > prompts[size_t(b)].size(); });
#endif
    for (int64_t k = 0; k < n_seq; ++k) {  // prefill each prompt into its own sequence
      const int64_t i = order[size_t(k)];
      slot[size_t(i)] = k;
      const auto& p = prompts[size_t(i)];
      const auto tp = Clock::now();
      new_prefilled(i, [&] { prefill(p, 1, &logits[size_t(i)], {}, tp); });
      runs[size_t(i)].res.prefill_s = seconds_since(tp);
      if (progress) progress({k + 1, n_seq, seconds_since(t0)});
    }
    // The rows of the next decode step: which sequences, and the token each appends.
    std::vector<int64_t> active;
    std::vector<int32_t> ids;
    auto advance = [&](int64_t i, std::span<const float> row, std::vector<int64_t>& next, std::vector<int32_t>& next_ids) {
      int32_t id = -1;
      if (runs[size_t(i)].next(*tok_, row, &id) && !runs[size_t(i)].finished()) {
        next.push_back(i);
        next_ids.push_back(id);
      }
    };
    const auto t1 = Clock::now();
    for (int64_t i = 0; i < n_seq; ++i) advance(i, logits[size_t(i)], active, ids);  // first tokens
    std::vector<float> rows;  // [active, vocab]
    const int64_t V = cfg_.vocab_size;
    while (!active.empty()) {
      decode_step(active, ids, rows);
      std::vector<int64_t> next;
      std::vector<int32_t> next_ids;
      for (size_t r = 0; r < active.size(); ++r)
        advance(active[r], std::span<const float>(rows.data() + int64_t(r) * V, size_t(V)), next, next_ids);
      active.swap(next);
      ids.swap(next_ids);
    }
    const double decode_s = seconds_since(t1);
    std::vector<GenerateResult> out;
    for (SequenceRun& r : runs) {
      r.res.decode_s = decode_s;  // the batch's decode time (shared by its sequences)
      r.res.text = r.stream.text();
      out.push_back(std::move(r.res));
    }
    return out;
  }

  std::unique_ptr<SequenceBatch> start_batch(const BatchOptions& o) override {
    if (!o.batched) return make_serial_batch(*this, opts_.attn, o);
#ifdef LONGCTX_WITH_GPU
    // Methods with per-sequence decode state on the GPU (HiP) run one sequence at a time, queued.
    if (on_gpu_ && !gpu_->batches_decode()) return make_serial_batch(*this, opts_.attn, o);
    if (on_gpu_) return make_gpu_batch({*gpu_, *tok_, cfg_, max_ctx_, opts_.prefill_chunk, opts_.attn}, o);
#endif
    return make_cpu_batch({*model_, *tok_, cfg_, max_ctx_, opts_.prefill_chunk, opts_.attn}, o);
  }

  std::vector<float> score(std::span<const int32_t> tokens, const ProgressFn& progress) override {
    const int64_t n = int64_t(tokens.size());
    if (n < 2) fail("scoring needs at least 2 tokens (got {})", n);
    if (n > max_ctx_) fail("the text has {} tokens, more than the model's context of {} tokens", n, max_ctx_);
    reset_model(n);
    // The text runs as one prompt (the same chunks and, for MInference, the same one estimate per
    // text as generate's prefill); its logits arrive a few rows at a time and become log-probs
    // at once, so memory stays at [chunk, vocab] floats whatever the length.
    std::vector<float> out(size_t(n - 1));
    const int64_t V = cfg_.vocab_size;
    const LogitsSink take = [&](int64_t row, int64_t rows, const float* lg) {
      for (int64_t t = row; t < row + rows && t + 1 < n; ++t)
        out[size_t(t)] = log_prob(lg + (t - row) * V, V, tokens[size_t(t + 1)]);
    };
    const auto t0 = Clock::now();
#ifdef LONGCTX_WITH_GPU
    if (on_gpu_) {  // chunks or layer-major, as prefill; progress per layer when layer-major
      gpu::LayerProgressFn lp;
      if (progress) lp = [&](int done, int n_layer) { progress({n * done / n_layer, n, seconds_since(t0)}); };
      gpu_->forward(tokens, n, take, lp);
      if (progress) progress({n, n, seconds_since(t0)});
      return out;
    }
#endif
    const int64_t step = chunk_size();
    if (model_->prompt_wide(n, step)) {  // MInference: one estimate per text, layer-major
      Transformer::LayerProgressFn lp;
      if (progress) lp = [&](int done, int n_layer) { progress({n * done / n_layer, n, seconds_since(t0)}); };
      model_->forward_prompt(tokens, step, n, take, lp);
      return out;
    }
    std::vector<float> logits;
    for (int64_t c0 = 0; c0 < n; c0 += step) {
      const int64_t c1 = std::min(n, c0 + step);
      model_->forward(tokens.subspan(size_t(c0), size_t(c1 - c0)), c1 - c0, &logits);
      take(c0, c1 - c0, logits.data());
      if (progress) progress({c1, n, seconds_since(t0)});
    }
    return out;
  }

  std::vector<float> logits(std::span<const int32_t> tokens, int64_t n_last) override {
    const int64_t n = int64_t(tokens.size());
    if (n == 0) fail("logits: no tokens");
    if (n > max_ctx_) fail("the input has {} tokens, more than the model's context of {} tokens", n, max_ctx_);
    n_last = std::clamp<int64_t>(n_last, 1, n);
    reset_model(n);
    std::vector<float> all, chunk;
    const int64_t step = chunk_size();
    if (!on_gpu_ && model_->prompt_wide(n, step)) {  // as prefill(): one estimate per prompt
      model_->forward_prompt(tokens, step, n_last, &all);
      return all;
    }
    for (int64_t c0 = 0; c0 < n; c0 += step) {
      const int64_t c1 = std::min(n, c0 + step);
      const int64_t want = std::max<int64_t>(0, c1 - std::max(c0, n - n_last));
      forward_model(tokens.subspan(size_t(c0), size_t(c1 - c0)), want, &chunk);
      if (want > 0) all.insert(all.end(), chunk.begin(), chunk.end());
    }
    return all;
  }

  void capture_attention(std::span<const int32_t> tokens, const AttnObserver& observer) override {
    const int64_t n = int64_t(tokens.size());
    if (n == 0) fail("capture_attention: no tokens");
    if (n > max_ctx_) fail("the input has {} tokens, more than the model's context of {} tokens", n, max_ctx_);
#ifdef LONGCTX_WITH_GPU
    if (on_gpu_) return gpu_->capture_attention(tokens, observer);  // dense, layer-major (gpu_capture.cpp)
#endif
    model_->reset(n);
    model_->forward(tokens, 0, nullptr, &observer);
  }

 private:
  // Errors before any work (what names the prompt in a batch).
  void check_prompt(std::span<const int32_t> prompt, const SamplingParams& sp, const std::string& what) const {
    if (prompt.empty()) fail("{}the prompt is empty (no tokens)", what);
    if (sp.max_tokens < 0) fail("max tokens must be >= 0 (got {})", sp.max_tokens);
    const int64_t n = int64_t(prompt.size());
    if (n > max_ctx_) fail("{}the prompt has {} tokens, more than the model's context of {} tokens", what, n, max_ctx_);
    if (n + sp.max_tokens > max_ctx_)
      fail("{}the prompt ({} tokens) plus {} new tokens exceeds the context of {} tokens; lower -n to at most {}", what,
           n, sp.max_tokens, max_ctx_, max_ctx_ - n);
  }

  void prefill(std::span<const int32_t> prompt, int64_t n_logits, std::vector<float>* logits,
               const ProgressFn& progress, Clock::time_point t0) {
    const int64_t n = int64_t(prompt.size());
#ifdef LONGCTX_WITH_GPU
    if (on_gpu_ && gpu_->layer_major()) {  // one call, all chunks per layer; progress per layer
      gpu::LayerProgressFn lp;
      if (progress)
        lp = [&](int done, int n_layer) { progress({n * done / n_layer, n, seconds_since(t0)}); };
      gpu_->forward(prompt, n_logits, logits, lp);
      return;
    }
#endif
    const int64_t step = chunk_size();
    if (!on_gpu_ && model_->prompt_wide(n, step)) {  // MInference: one estimate per prompt, layer-major
      Transformer::LayerProgressFn lp;
      if (progress) lp = [&](int done, int n_layer) { progress({n * done / n_layer, n, seconds_since(t0)}); };
      model_->forward_prompt(prompt, step, n_logits, logits, lp);
      return;
    }
    for (int64_t c0 = 0; c0 < n; c0 += step) {
      const int64_t c1 = std::min(n, c0 + step);
      forward_model(prompt.subspan(size_t(c0), size_t(c1 - c0)), c1 == n ? n_logits : 0, logits);
      if (progress) progress({c1, n, seconds_since(t0)});
    }
  }

#ifdef LONGCTX_WITH_GPU
  // Sizes the GPU KV pool for the batch's sequences (prompt + max_tokens each) before any work:
  // when it does not fit, --device cuda fails with needed vs free, --device auto moves to the CPU.
  void reserve_gpu_sequences(std::span<const std::vector<int32_t>> prompts, const SamplingParams& sp) {
    std::vector<int64_t> caps;
    for (const auto& p : prompts) caps.push_back(int64_t(p.size()) + sp.max_tokens);
    const std::string problem = gpu_->sequences_fit_problem(caps);
    if (problem.empty()) return gpu_->reserve_sequences(caps);
    leave_gpu(problem);
  }

  // What the GPU cannot hold: --device cuda fails with the problem (needed vs free); --device
  // auto says so and moves to the CPU.
  void leave_gpu(const std::string& problem) {
    if (opts_.device != "auto" || !file_ || !opts_.random_weights.empty())
      fail("--device {}: {}", opts_.device, problem);
    note(problem + "; --device auto: running on the CPU");
    gpu_.reset();
    on_gpu_ = false;
    ensure_cpu();
  }
#endif

  MethodContext method_context() const { return {cfg_.n_layer, cfg_.n_head, cfg_.n_kv_head, cfg_.head_dim, cfg_.name}; }

  // --attn-tiles: what needs no model and no GPU, before anything loads (the GPU model checks the
  // method's side too: gpu::attn_tiles_problem).
  void check_attn_tiles() const {
    if (opts_.attn_tiles != "bf16" && opts_.attn_tiles != "fp8")
      fail("unknown attention tile type '{}' (known: bf16, fp8)", opts_.attn_tiles);
    if (opts_.attn_tiles == "bf16") return;
    if (opts_.device == "cpu")
      fail("--attn-tiles fp8 is a GPU option (the CPU path attends its own fp32 cache): use --device cuda");
    if (const std::string p = gpu::attn_tiles_cache_problem(opts_.kv_cache == "fp8", opts_.kv_offload); !p.empty())
      fail("{}", p);
  }

  // The CPU transformer (built on first need: at load, or when --device auto falls back).
  void ensure_cpu() {
    if (model_) return;
    if (!file_) fail("internal: no model file to load CPU weights from");
    if (opts_.synthetic_qk) fail("synthetic Q/K (--synthetic-qk) is a GPU benchmark option: use --device cuda");
    if (opts_.kv_cache != "bf16" && opts_.kv_cache != "fp8")
      fail("unknown KV cache type '{}' (known: bf16, fp8)", opts_.kv_cache);
    if (opts_.kv_offload) {
      if (opts_.device == "cpu") fail("--kv-offload is a GPU option (the CPU path keeps its cache in host memory): use --device cuda");
      note("--kv-offload applies on the GPU only; the CPU path keeps its cache in host memory");
    }
    if (opts_.attn_tiles != "bf16")
      note(fmt::format("--attn-tiles {} applies on the GPU only; the CPU path attends its own cache",
                       opts_.attn_tiles));
    if (opts_.kv_cache != "bf16") {
      if (opts_.device == "cpu") fail("--kv-cache {} is a GPU option (the CPU path keeps its own cache): use --device cuda", opts_.kv_cache);
      note(fmt::format("--kv-cache {} applies on the GPU only; the CPU path keeps its own cache", opts_.kv_cache));
    }
    MethodContext mc{cfg_.n_layer, cfg_.n_head, cfg_.n_kv_head, cfg_.head_dim, cfg_.name};
    auto method = make_attention_method(opts_.attn, mc);
    model_ = std::make_unique<Transformer>(cfg_, ModelWeights::load(*file_, cfg_, parse_cpu_weights(opts_.cpu_weights)),
                                           std::move(method), global_pool());
  }

  int64_t chunk_size() const {
#ifdef LONGCTX_WITH_GPU
    if (on_gpu_ && gpu_->layer_major()) return max_ctx_;  // the whole input per call
    if (on_gpu_) return gpu_->chunk();
#endif
    return opts_.prefill_chunk;
  }

  void reset_model(int64_t capacity) {
#ifdef LONGCTX_WITH_GPU
    if (on_gpu_) {
      const std::string problem = gpu_->kv_fit_problem(capacity);
      if (problem.empty()) return gpu_->reset(capacity);
      leave_gpu(problem);
    }
#endif
    model_->reset(capacity);
  }

  void forward_model(std::span<const int32_t> tokens, int64_t n_logits, std::vector<float>* logits) {
#ifdef LONGCTX_WITH_GPU
    if (on_gpu_) return gpu_->forward(tokens, n_logits, logits);
#endif
    model_->forward(tokens, n_logits, logits);
  }

#ifdef LONGCTX_WITH_GPU
  // Puts the model on the GPU if it can go there; else fails (--device cuda, random weights) or
  // notes why and returns false (--device auto).
  bool load_gpu(bool random) {
    const int64_t chunk =
        opts_.gpu_chunk > 0 ? opts_.gpu_chunk : std::max<int64_t>(1, std::min(gpu::kDefaultChunk, max_ctx_));
    std::string why;
    const gpu::Probe pr = gpu::probe_device();
    if (!pr.usable) {
      why = pr.why;
    } else {
      // A bad spec or config throws here, with the CPU method's message; a method the GPU
      // cannot run on this model (head_dim) is a reason to stay on the CPU.
      const MethodContext mc{cfg_.n_layer, cfg_.n_head, cfg_.n_kv_head, cfg_.head_dim, cfg_.name};
      why = gpu::gpu_model_problem(cfg_);
      if (why.empty()) why = gpu_method_problem(*make_attention_method(opts_.attn, mc), mc);
    }
    if (why.empty() && opts_.attn_tiles != "bf16") {  // a usage error, not a reason to leave the GPU
      gpu::GpuOptions to;
      to.attn = opts_.attn;
      to.attn_tiles = gpu::parse_attn_tiles(opts_.attn_tiles);
      to.kv_cache = gpu::parse_kv_cache(opts_.kv_cache);
      to.kv_offload.on = opts_.kv_offload;
      const MethodContext mc = method_context();
      const auto m = make_attention_method(opts_.attn, mc);
      const std::string p = gpu::attn_tiles_problem(to, *m, make_gpu_method(*m, mc).get());
      if (!p.empty()) fail("{}", p);
    }
    if (why.empty()) {
      const size_t w = gpu::weight_bytes(cfg_), a = gpu::arena_layout(cfg_, chunk).total;
      if (w + a + gpu::kReserveBytes > pr.free_bytes)
        why = fmt::format("{} needs {} of GPU memory ({} weights in bf16, {} activations, {} reserve) but '{}' has {} free",
                          cfg_.name, gpu::gib(w + a + gpu::kReserveBytes), gpu::gib(w), gpu::gib(a),
                          gpu::gib(gpu::kReserveBytes), pr.name, gpu::gib(pr.free_bytes));
    }
    if (!why.empty()) {
      if (opts_.device == "cuda" || random)
        fail("--device {}: {}{}", opts_.device, why, random ? "" : "; use --device cpu");
      note(why + "; --device auto: running on the CPU");
      return false;
    }
    gpu::DeviceWeights w = random ? gpu::DeviceWeights::random(cfg_, kRandomWeightsSeed, nullptr)
                                  : gpu::DeviceWeights::upload(cfg_, ModelWeights::load(*file_, cfg_), nullptr);
    gpu::GpuOptions go;
    go.chunk = chunk;
    go.attn = opts_.attn;
    go.synthetic_qk = opts_.synthetic_qk;
    go.kv_cache = gpu::parse_kv_cache(opts_.kv_cache);
    go.attn_tiles = gpu::parse_attn_tiles(opts_.attn_tiles);
    go.kv_offload.on = opts_.kv_offload;
    go.kv_offload.host_layers = opts_.kv_host_layers;
    go.kv_offload.page_table = gpu::parse_page_table(opts_.kv_page_table);
    if (opts_.kv_offload_residual != "host" && opts_.kv_offload_residual != "gpu")
      fail("--kv-offload-residual '{}': known are host, gpu", opts_.kv_offload_residual);
    go.kv_offload.host_residual = opts_.kv_offload_residual == "host";
    gpu_ = std::make_unique<gpu::GpuTransformer>(cfg_, std::move(w), go);
    return true;
  }

  std::unique_ptr<gpu::GpuTransformer> gpu_;
#endif

  LoadOptions opts_;
  std::unique_ptr<ModelFile> file_;
  ModelConfig cfg_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<Transformer> model_;  // CPU path (null while on the GPU)
  bool on_gpu_ = false;
  int64_t max_ctx_ = 0;
};

}  // namespace

std::unique_ptr<Engine> Engine::load(const LoadOptions& opts) { return std::make_unique<CpuEngine>(opts); }

std::string default_model_path() {
  std::filesystem::path base;
  if (const char* c = std::getenv("LONGCTX_CACHE"); c && *c) {
    base = c;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    base = std::filesystem::path(h) / ".cache" / "longctx";
  } else {
    base = ".longctx-cache";
  }
  const auto p = base / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(p))
    fail("the default model is not installed at '{}'; run scripts/fetch-model.sh (or pass -m MODEL)", p.string());
  return p.string();
}

}  // namespace longctx

// engine.h: the public C++ API of longctx: load a model, tokenize, generate, score.
//
// Tools (CLI, eval, bench, server) use only this header and the types it names; no layer below
// the runtime includes it (they share ModelConfig, the Tokenizer and AttnCapture from their own
// headers).
//   auto eng = longctx::Engine::load({.model_path = "model.gguf"});
//   auto ids = eng->tokenizer().encode("Hello", true, false);
//   auto res = eng->generate(ids, {.max_tokens = 32});
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/attn_capture.h"  // AttnCapture, AttnObserver
#include "model/config.h"
#include "tokenizer/tokenizer.h"
#include "util/progress.h"  // Progress, ProgressFn

namespace longctx {

struct LoadOptions {
  std::string model_path;       // .gguf file or HF safetensors directory; empty = default model
  int n_threads = 0;            // 0 = all cores
  int64_t max_context = 0;      // 0 = the model's trained context length
  std::string attn = "dense";   // attention method: "dense", "minference[=CONFIG]", ...
  int64_t prefill_chunk = 512;  // tokens per prefill chunk (bounds activation memory)
  // "cpu", "cuda" (fails with the reason when no usable GPU or the KV cache will not fit) or
  // "auto" (the GPU when usable and the model fits, else the CPU, with a note on stderr).
  std::string device = "cpu";
  // A named geometry ("llama3-8b", "llama3.1-8b", "qwen2.5-7b", "smollm2-135m"; ":N" keeps N
  // layers) with random weights generated on the GPU instead of model_path: for benchmarks; no
  // tokenizer (token ids only), unless model_path is set: then that file's tokenizer (e.g. a GGUF
  // holding only the tokenizer metadata; its tensors are not read). Needs the CUDA build and a GPU.
  std::string random_weights = {};  // (an initializer: designated-initializer users get no -Wextra warning)
  int64_t gpu_chunk = 0;  // tokens per prefill chunk on the GPU; 0 = automatic (16K)
  // Benchmarks only (GPU, head_dim 128): after RoPE, every layer's prefill Q and K are replaced by
  // structured synthetic vectors (kernels/cuda/structured_qk.h: local/slash, sink, vertical and
  // topic structure), so sparse methods see realistic attention patterns with random weights.
  bool synthetic_qk = false;
  // KV cache on the GPU: "bf16", or "fp8" (e4m3 with per-layer scales: half the memory, so e.g.
  // Llama-3-8B at 1M tokens fits one 141 GB GPU; the prefill then runs layer by layer). The CPU
  // path keeps its own cache and rejects "fp8" with --device cpu.
  std::string kv_cache = "bf16";
  // K/V tiles of the GPU's sparse prefill attention: "bf16" (the layer's K/V staged in bf16), or
  // "fp8" (the fp8 cache's e4m3 rows, read straight by the sparse kernel: needs kv_cache "fp8",
  // a sparse post-RoPE method, no kv_offload; dense steps stay bf16). Refused with --device cpu.
  std::string attn_tiles = "bf16";
  // KV offload on the GPU (gpu/gpu_offload.h): the KV cache in pinned host memory behind GPU caches
  // for layers that do not fit HBM, with a sparse decode method that reads through them (--attn
  // hip); one sequence. kv_host_layers: layers kept in host memory (-1: as few as the GPU needs).
  // kv_page_table: the host layers' caches' page tables, "auto" | "vector" | "hash".
  // kv_offload_residual: where the layer-major prefill keeps the prompt's residual stream with
  // offload, "host" (pinned, streamed through two GPU chunk buffers) | "gpu" (all of it in HBM).
  bool kv_offload = false;
  int kv_host_layers = -1;
  std::string kv_page_table = "auto";
  std::string kv_offload_residual = "host";
  // CPU matmul weights: "fp32" (dequantized at load: the exact reference path) or "quantized"
  // (the file's 4/8-bit blocks with 8-bit activations: several times less memory traffic per
  // token; model/quant_weights.h). The CLI defaults to "quantized".
  std::string cpu_weights = "fp32";
};

struct SamplingParams {
  float temperature = 0.f;  // 0 = greedy
  int top_k = 0;            // 0 = off
  float top_p = 1.f;        // 1 = off
  uint64_t seed = 0;
  int max_tokens = 128;
  std::vector<std::string> stop = {};  // stop strings (not included in the output text)
  bool stop_at_eos = true;
};

// Called with each generated token id and its text piece (complete UTF-8 only); return false to stop.
using TokenFn = std::function<bool(int32_t id, const std::string& piece)>;

struct GenerateResult {
  std::vector<int32_t> tokens;   // generated ids (stop string tokens included, EOS excluded)
  std::string text;              // decoded generated text, cut before a stop string
  std::string stop_reason;       // "eos", "stop", "length", "callback"
  int64_t prompt_tokens = 0;
  double prefill_s = 0, decode_s = 0;
};

// ---- Step-level batching: the API a server's scheduler drives (Engine::start_batch) ----
// Sequences join and leave at any step; each step advances every decoding sequence by one token
// in one batched decode call and runs up to one prefill chunk of tokens of the prefilling ones
// (in turn), so a long prompt never freezes the other sequences' streams.
//   auto batch = eng->start_batch({.kv_tokens = 65536});
//   int64_t id = batch->open({.prompt = ids, .sp = {.max_tokens = 32}});
//   while (batch->stats().sequences > 0) batch->step([](const SequenceEvent& e) { ...; return true; });

struct SequenceRequest {
  std::vector<int32_t> prompt = {};  // (initializers: designated-initializer users get no -Wextra warning)
  SamplingParams sp = {};
  std::string attn = {};  // this sequence's attention method spec; empty = the engine's (LoadOptions::attn)
  bool logprobs = false;  // report log p(token) of each sampled token (one log-softmax per token)
};

// What one step did for one sequence: a sampled token, or its end (or both).
struct SequenceEvent {
  int64_t id = 0;
  int32_t token = -1;       // the sampled token; -1 = none (the sequence ended without one: EOS)
  float logprob = 0.f;      // log p(token) under the model's distribution (SequenceRequest::logprobs)
  std::string text;         // text released now (complete UTF-8; a possible stop string held back)
  bool finished = false;    // the sequence's last event: it is closed and its KV cache freed
  std::string stop_reason;  // when finished: "eos", "stop" or "length"
  int64_t prompt_tokens = 0, completion_tokens = 0;  // so far
};
// Called for each event of a step; return false to close that sequence at once (a client gone).
using SequenceEventFn = std::function<bool(const SequenceEvent&)>;

struct BatchOptions {
  int64_t kv_tokens = 0;      // KV cache budget of all open sequences, in tokens; 0 = max_context()
  int max_sequences = 64;     // open sequences at most (rows of one decode step)
  int64_t prefill_chunk = 0;  // prompt tokens per step; 0 = LoadOptions::prefill_chunk
  // false: one whole sequence per step (the serial batch over generate()): the baseline batched
  // serving is measured against (`longctx serve --no-batching`).
  bool batched = true;
};

struct BatchStats {
  int64_t sequences = 0, prefilling = 0;    // open sequences; those still in their prompt
  int64_t kv_tokens = 0, kv_capacity = 0;   // tokens reserved by open sequences (prompt + max_tokens); the budget
  int64_t kv_used = 0;                      // tokens now in the open sequences' caches
  int64_t prefill_tokens = 0, decode_tokens = 0;  // totals since start_batch
  double prefill_s = 0, decode_s = 0;             // time in prefill chunks and decode steps (totals)
  int64_t steps = 0;
};

// One engine's open sequences. Not thread-safe: one thread (the scheduler) calls everything, and
// the Engine runs no other call while a batch has open sequences.
class SequenceBatch {
 public:
  virtual ~SequenceBatch() = default;
  // Why the request can never run (empty prompt, over the context or the KV budget, bad attention
  // spec, bad sampling values), or "" when it can.
  virtual std::string check(const SequenceRequest& r) const = 0;
  // Whether it can open now (room in the KV budget and a free row).
  virtual bool fits_now(const SequenceRequest& r) const = 0;
  // Opens it (throws Error with check()'s reason, or when it does not fit now); nothing runs yet.
  virtual int64_t open(const SequenceRequest& r) = 0;
  // One step over every open sequence; on_event per sampled token and per finished sequence.
  virtual void step(const SequenceEventFn& on_event) = 0;
  // Closes a sequence at any time, freeing its KV cache (an unknown id is ignored).
  virtual void close(int64_t id) = 0;
  virtual BatchStats stats() const = 0;
};

// Thread-safety: an Engine runs one call at a time (calls from several threads must be serialised
// by the caller); several sequences share it through generate_batch or a SequenceBatch
// (start_batch). config(), tokenizer() and max_context() are const and safe from any thread. Separate Engines are
// independent (no process-wide state, except the GPU statistics read by benchmarks:
// gpu::last_gpu_*_stats()).
class Engine {
 public:
  static std::unique_ptr<Engine> load(const LoadOptions& opts);
  virtual ~Engine() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  virtual int64_t max_context() const = 0;

  // Prefills the prompt (chunked) and samples up to max_tokens. Throws Error if the prompt plus
  // max_tokens exceeds max_context().
  virtual GenerateResult generate(std::span<const int32_t> prompt, const SamplingParams& sp,
                                  const ProgressFn& progress = {}, const TokenFn& on_token = {}) = 0;

  // Several prompts generated together: each prompt is prefilled on its own (chunked, with its
  // own method state), then every unfinished sequence advances by one token per batched decode
  // step (the projections, MLP and LM head run once for all rows; attention per sequence, each
  // with its own length). Each result equals generate() of its prompt alone with the same
  // sampling parameters (greedy: the same tokens; on the GPU up to near-tied logits, since the
  // GEMMs and the decode split plan depend on the row count, and with the fp8 cache only the
  // longest prompt keeps its own per-layer scales: the sequences share the pool's). Checks every
  // prompt before any work. The GPU batches decode in one paged KV pool, except for methods that
  // keep per-sequence decode state on the device (HiP): their prompts run one after another, as
  // in this default, which engines without batching keep.
  // progress: done = prompts prefilled, total = prompts.
  virtual std::vector<GenerateResult> generate_batch(std::span<const std::vector<int32_t>> prompts,
                                                     const SamplingParams& sp, const ProgressFn& progress = {}) {
    std::vector<GenerateResult> out;
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < prompts.size(); ++i) {
      out.push_back(generate(prompts[i], sp));
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
      if (progress) progress({int64_t(i + 1), int64_t(prompts.size()), dt.count()});
    }
    return out;
  }

  // A step-level batch over this engine (above). The CPU and GPU engines batch decode steps
  // (Transformer::decode_batch, GpuTransformer::decode_batch over its paged pool, pages taken as
  // sequences grow) and interleave prefill chunks; this default (and the GPU with a method that
  // keeps per-sequence decode state, e.g. HiP, or BatchOptions::batched false) runs each
  // sequence's whole generate() in the step that reaches it, one after another: correct, not
  // batched.
  virtual std::unique_ptr<SequenceBatch> start_batch(const BatchOptions& opts);

  // Teacher-forced log-probabilities: out[i] = log p(tokens[i+1] | tokens[0..i]), size n-1. The
  // text is prefilled as one prompt (generate's chunks; MInference: its one estimate per prompt).
  virtual std::vector<float> score(std::span<const int32_t> tokens, const ProgressFn& progress = {}) = 0;

  // Logits [n_last, vocab] of the last n_last positions after a fresh prefill of tokens.
  virtual std::vector<float> logits(std::span<const int32_t> tokens, int64_t n_last = 1) = 0;

  // Runs a fresh prefill of tokens from position 0 and calls observer once per layer with its
  // post-RoPE Q, K, V of all tokens as fp32 (for attention-fidelity evaluation and pattern
  // search). On the CPU: one chunk, through the loaded --attn method (load with "dense" for a
  // dense capture, as search-patterns does). On the GPU: a layer-major prefill, always dense,
  // with bf16 activations (the KV cache is freed; the next call resets it).
  virtual void capture_attention(std::span<const int32_t> tokens, const AttnObserver& observer) = 0;

  // Where the model runs: "cpu" or "cuda" (after --device auto's choice).
  virtual std::string device() const { return "cpu"; }
};

// The default model's path in the model cache ($LONGCTX_CACHE or ~/.cache/longctx).
std::string default_model_path();

}  // namespace longctx

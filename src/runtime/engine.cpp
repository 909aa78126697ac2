// engine.cpp: longctx::Engine on the CPU: loads a model file, owns the tokenizer, the
// transformer and its KV cache, and runs chunked prefill + sampled decode for one sequence.
#include "longctx/engine.h"

#include <cblas.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "model/transformer.h"
#include "runtime/sampler.h"
#include "runtime/text_stream.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace longctx {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Tokens per chunk when scoring: logits of every position are needed, [chunk, vocab] floats.
constexpr int64_t kScoreChunk = 256;

class CpuEngine final : public Engine {
 public:
  explicit CpuEngine(const LoadOptions& o) : opts_(o) {
    if (opts_.n_threads > 0) set_num_threads(opts_.n_threads);
    // Our pool splits work; each BLAS call runs on one thread (no oversubscription).
    openblas_set_num_threads(1);
    if (opts_.prefill_chunk <= 0) fail("prefill chunk must be positive (got {})", opts_.prefill_chunk);
    const std::string path = opts_.model_path.empty() ? default_model_path() : opts_.model_path;
    file_ = open_model_file(path);
    cfg_ = ModelConfig::from_model_file(*file_);
    tok_ = Tokenizer::from_model_file(*file_);
    if (tok_->vocab_size() > cfg_.vocab_size)
      fail("{}: tokenizer has {} tokens but the model's vocabulary is {}", path, tok_->vocab_size(), cfg_.vocab_size);
    max_ctx_ = opts_.max_context > 0 ? opts_.max_context : cfg_.context_length;
    MethodContext mc{cfg_.n_layer, cfg_.n_head, cfg_.n_kv_head, cfg_.head_dim, cfg_.name};
    auto method = make_attention_method(opts_.attn, mc);
    model_ = std::make_unique<Transformer>(cfg_, ModelWeights::load(*file_, cfg_), std::move(method), global_pool());
  }

  const ModelConfig& config() const override { return cfg_; }
  const Tokenizer& tokenizer() const override { return *tok_; }
  int64_t max_context() const override { return max_ctx_; }

  GenerateResult generate(std::span<const int32_t> prompt, const SamplingParams& sp, const ProgressFn& progress,
                          const TokenFn& on_token) override {
    if (prompt.empty()) fail("the prompt is empty (no tokens)");
    if (sp.max_tokens < 0) fail("max tokens must be >= 0 (got {})", sp.max_tokens);
    const int64_t n = int64_t(prompt.size());
    if (n > max_ctx_)
      fail("the prompt has {} tokens, more than the model's context of {} tokens", n, max_ctx_);
    if (n + sp.max_tokens > max_ctx_)
      fail("the prompt ({} tokens) plus {} new tokens exceeds the context of {} tokens; lower -n to at most {}", n,
           sp.max_tokens, max_ctx_, max_ctx_ - n);
    Sampler sampler(sp);
    GenerateResult res;
    res.prompt_tokens = n;
    model_->reset(n + sp.max_tokens);

    std::vector<float> logits;
    const auto t0 = Clock::now();
    prefill(prompt, 1, &logits, progress, t0);
    res.prefill_s = seconds_since(t0);

    TextStream stream(sp.stop);
    const auto t1 = Clock::now();
    res.stop_reason = "length";
    for (int i = 0; i < sp.max_tokens; ++i) {
      const int32_t id = sampler.sample(logits);
      if (sp.stop_at_eos && tok_->is_end_of_generation(id)) {
        res.stop_reason = "eos";
        break;
      }
      res.tokens.push_back(id);
      const bool stopped = stream.push(tok_->token_bytes(id));
      if (on_token) {
        const std::string piece = stream.take_ready();
        if (!on_token(id, piece)) {
          res.stop_reason = "callback";
          break;
        }
      }
      if (stopped) {
        res.stop_reason = "stop";
        break;
      }
      if (i + 1 < sp.max_tokens) model_->forward(std::span(&id, 1), 1, &logits);
    }
    res.decode_s = seconds_since(t1);
    res.text = stream.text();
    if (on_token) {
      const std::string rest = stream.take_rest();
      if (!rest.empty()) on_token(-1, rest);
    }
    return res;
  }

  std::vector<float> score(std::span<const int32_t> tokens, const ProgressFn& progress) override {
    const int64_t n = int64_t(tokens.size());
    if (n < 2) fail("scoring needs at least 2 tokens (got {})", n);
    if (n > max_ctx_) fail("the text has {} tokens, more than the model's context of {} tokens", n, max_ctx_);
    model_->reset(n);
    std::vector<float> out;
    out.reserve(size_t(n - 1));
    std::vector<float> logits;
    const int64_t V = cfg_.vocab_size;
    const auto t0 = Clock::now();
    for (int64_t c0 = 0; c0 < n; c0 += kScoreChunk) {
      const int64_t c1 = std::min(n, c0 + kScoreChunk);
      model_->forward(tokens.subspan(size_t(c0), size_t(c1 - c0)), c1 - c0, &logits);
      for (int64_t t = c0; t < c1 && t + 1 < n; ++t) {
        const float* row = logits.data() + (t - c0) * V;
        float mx = row[0];
        for (int64_t j = 1; j < V; ++j) mx = std::max(mx, row[j]);
        double sum = 0;
        for (int64_t j = 0; j < V; ++j) sum += std::exp(double(row[j] - mx));
        out.push_back(float(row[tokens[size_t(t + 1)]] - mx - std::log(sum)));
      }
      if (progress) progress({c1, n, seconds_since(t0)});
    }
    return out;
  }

  std::vector<float> logits(std::span<const int32_t> tokens, int64_t n_last) override {
    const int64_t n = int64_t(tokens.size());
    if (n == 0) fail("logits: no tokens");
    if (n > max_ctx_) fail("the input has {} tokens, more than the model's context of {} tokens", n, max_ctx_);
    n_last = std::clamp<int64_t>(n_last, 1, n);
    model_->reset(n);
    std::vector<float> all, chunk;
    for (int64_t c0 = 0; c0 < n; c0 += opts_.prefill_chunk) {
      const int64_t c1 = std::min(n, c0 + opts_.prefill_chunk);
      const int64_t want = std::max<int64_t>(0, c1 - std::max(c0, n - n_last));
      model_->forward(tokens.subspan(size_t(c0), size_t(c1 - c0)), want, &chunk);
      if (want > 0) all.insert(all.end(), chunk.begin(), chunk.end());
    }
    return all;
  }

  void capture_attention(std::span<const int32_t> tokens, const AttnObserver& observer) override {
    const int64_t n = int64_t(tokens.size());
    if (n == 0) fail("capture_attention: no tokens");
    if (n > max_ctx_) fail("the input has {} tokens, more than the model's context of {} tokens", n, max_ctx_);
    model_->reset(n);
    model_->forward(tokens, 0, nullptr, &observer);
  }

 private:
  void prefill(std::span<const int32_t> prompt, int64_t n_logits, std::vector<float>* logits,
               const ProgressFn& progress, Clock::time_point t0) {
    const int64_t n = int64_t(prompt.size());
    for (int64_t c0 = 0; c0 < n; c0 += opts_.prefill_chunk) {
      const int64_t c1 = std::min(n, c0 + opts_.prefill_chunk);
      model_->forward(prompt.subspan(size_t(c0), size_t(c1 - c0)), c1 == n ? n_logits : 0, logits);
      if (progress) progress({c1, n, seconds_since(t0)});
    }
  }

  LoadOptions opts_;
  std::unique_ptr<ModelFile> file_;
  ModelConfig cfg_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<Transformer> model_;
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

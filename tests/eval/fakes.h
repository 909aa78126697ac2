// fakes.h: a byte-level fake tokenizer and a fake Engine for testing the eval plumbing without a
// model: one token per byte, a ChatML-like template, answers that copy the long numbers found
// in the prompt, a fixed log-probability for perplexity, and structured synthetic Q/K/V.
#pragma once
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "eval/rng.h"
#include "longctx/engine.h"
#include "util/error.h"

namespace longctx::evaltest {

class FakeTokenizer : public Tokenizer {
 public:
  static constexpr int32_t kBos = 256, kEos = 257;
  explicit FakeTokenizer(bool chat = true, bool bos = true) : chat_(chat), bos_(bos) {}
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool) const override {
    std::vector<int32_t> ids;
    if (add_bos && bos_) ids.push_back(kBos);
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::string s;
    for (int32_t id : ids)
      if (id < 256) s += char(id);
      else if (!skip_special) s += id == kBos ? "<s>" : "</s>";
    return s;
  }
  std::string token_bytes(int32_t id) const override { return id < 256 ? std::string(1, char(id)) : ""; }
  int32_t vocab_size() const override { return 258; }
  int32_t bos_id() const override { return bos_ ? kBos : -1; }
  int32_t eos_id() const override { return kEos; }
  bool is_end_of_generation(int32_t id) const override { return id == kEos; }
  bool adds_bos() const override { return bos_; }
  std::string kind() const override { return "fake:bytes"; }
  std::string apply_chat_template(std::span<const ChatMessage> messages, bool add_generation_prompt) const override {
    if (!chat_) fail("fake tokenizer: no chat template");
    std::string s;
    for (const auto& m : messages) s += "<|" + m.role + "|>\n" + m.content + "\n";
    if (add_generation_prompt) s += "<|assistant|>\n";
    return s;
  }

 private:
  bool chat_, bos_;
};

// Answers with every run of >= 5 digits in the prompt (so passkey / NIAH score 1), or with
// "I do not know" when loaded with attn "blind" (a method that loses the needle).
class FakeEngine : public Engine {
 public:
  explicit FakeEngine(LoadOptions lo, int64_t ctx = 8192) : lo_(std::move(lo)), ctx_(ctx) {
    cfg_.arch = "llama";
    cfg_.name = "fake-model";
    cfg_.n_layer = 2;
    cfg_.n_head = 4;
    cfg_.n_kv_head = 2;
    cfg_.head_dim = 8;
    cfg_.context_length = ctx;
  }
  const ModelConfig& config() const override { return cfg_; }
  const Tokenizer& tokenizer() const override { return tok_; }
  int64_t max_context() const override { return ctx_; }

  GenerateResult generate(std::span<const int32_t> prompt, const SamplingParams& sp, const ProgressFn&,
                          const TokenFn&) override {
    if (int64_t(prompt.size()) + sp.max_tokens > ctx_) fail("fake engine: prompt too long ({})", prompt.size());
    ++generate_calls;
    last_prompt_tokens = int64_t(prompt.size());
    GenerateResult r;
    r.prompt_tokens = int64_t(prompt.size());
    r.stop_reason = "eos";
    if (lo_.attn == "blind") {
      r.text = "I do not know";
      return r;
    }
    const std::string text = tok_.decode(prompt, true);
    std::string run, out;
    auto flush = [&] {
      if (run.size() >= 5 && out.find(run) == std::string::npos) out += (out.empty() ? "" : ", ") + run;
      run.clear();
    };
    for (char c : text) {
      if (c >= '0' && c <= '9') run += c;
      else flush();
    }
    flush();
    r.text = " " + out + ".";
    return r;
  }
  std::vector<float> score(std::span<const int32_t> tokens, const ProgressFn&) override {
    return std::vector<float>(tokens.size() - 1, -std::log(4.0f));  // ppl 4
  }
  std::vector<float> logits(std::span<const int32_t>, int64_t) override { return {}; }
  void capture_attention(std::span<const int32_t> tokens, const AttnObserver& obs) override {
    const int64_t n = int64_t(tokens.size());
    const int H = cfg_.n_head, KV = cfg_.n_kv_head, D = cfg_.head_dim;
    std::vector<float> q(size_t(n * H * D)), k(size_t(n * KV * D)), v(size_t(n * KV * D));
    for (int layer = 0; layer < cfg_.n_layer; ++layer) {
      eval::Rng rng(uint64_t(1000 + layer));
      for (auto& x : q) x = float(0.5 + 0.5 * (rng.uniform() * 2 - 1));  // positive mean: the sink wins
      for (auto& x : v) x = float(rng.uniform() * 2 - 1);
      for (int64_t t = 0; t < n; ++t)
        for (int h = 0; h < KV; ++h)
          for (int d = 0; d < D; ++d)  // a sink at position 0 plus noise
            k[size_t((t * KV + h) * D + d)] = float((t == 0 ? 6.0 : 0.0) + 0.5 * (rng.uniform() * 2 - 1));
      AttnCapture c;
      c.layer = layer;
      c.n_tokens = n;
      c.n_head = H;
      c.n_kv_head = KV;
      c.head_dim = D;
      c.q = q.data();
      c.k = k.data();
      c.v = v.data();
      obs(c);
    }
  }

  int generate_calls = 0;
  int64_t last_prompt_tokens = 0;

 private:
  LoadOptions lo_;
  int64_t ctx_;
  ModelConfig cfg_;
  FakeTokenizer tok_;
};

}  // namespace longctx::evaltest

// null_tokenizer.cpp: see null_tokenizer.h.
#include "gpu/null_tokenizer.h"

#include "util/error.h"

namespace longctx::gpu {

namespace {

class NullTokenizer final : public Tokenizer {
 public:
  explicit NullTokenizer(int32_t v) : vocab_(v) {}
  std::vector<int32_t> encode(std::string_view, bool, bool) const override {
    fail("a --random-weights model has no tokenizer: it takes token ids only (e.g. longctx bench model)");
  }
  std::string decode(std::span<const int32_t>, bool) const override { return ""; }
  std::string token_bytes(int32_t) const override { return ""; }
  int32_t vocab_size() const override { return vocab_; }
  int32_t bos_id() const override { return -1; }
  int32_t eos_id() const override { return -1; }
  bool is_end_of_generation(int32_t) const override { return false; }
  bool adds_bos() const override { return false; }
  std::string kind() const override { return "none"; }
  std::string apply_chat_template(std::span<const ChatMessage>, bool) const override {
    fail("a --random-weights model has no chat template (it takes token ids only)");
  }

 private:
  int32_t vocab_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_null_tokenizer(int32_t vocab_size) { return std::make_unique<NullTokenizer>(vocab_size); }

}  // namespace longctx::gpu

// tokenizer_base.cpp: see tokenizer_base.h.
#include "tokenizer/tokenizer_base.h"

#include <array>
#include <string_view>

#include "util/error.h"

namespace longctx::tok {

namespace {
// Control tokens that end a turn or a document in the supported families (besides eos/eot).
constexpr std::array<std::string_view, 8> kEndOfGenerationTexts = {
    "<|eot_id|>", "<|im_end|>", "<|endoftext|>", "<|end_of_text|>",
    "<|eom_id|>", "</s>",       "<end_of_turn>", "<|end|>",
};
}  // namespace

TokenizerBase::TokenizerBase(Vocab vocab, std::vector<AddedToken> added) : vocab_(std::move(vocab)) {
  const int32_t n = vocab_.size();
  if (n == 0) fail("tokenizer vocabulary is empty");
  if (vocab_.types.empty()) vocab_.types.assign(size_t(n), TokenType::Normal);
  if (int32_t(vocab_.types.size()) != n) {
    fail("tokenizer has {} token types for {} tokens", vocab_.types.size(), n);
  }
  auto check_special = [&](int32_t& id, const char* what) {
    if (id >= n || id < -1) fail("bad {} token id {} of vocab {}", what, id, n);
  };
  check_special(vocab_.bos, "bos");
  check_special(vocab_.eos, "eos");
  check_special(vocab_.eot, "eot");
  check_special(vocab_.eom, "eom");
  check_special(vocab_.unk, "unk");
  check_special(vocab_.pad, "pad");

  for (auto& t : added) {
    if (!vocab_.valid_id(t.id)) fail("bad added token id {} of vocab {} (\"{}\")", t.id, n, t.text);
    if (t.special) special_ids_.insert(t.id);
    specials_.add(std::move(t));
  }
  for (int32_t id : {vocab_.eos, vocab_.eot, vocab_.eom}) {
    if (id >= 0) eog_.insert(id);
  }
  for (int32_t id = 0; id < n; ++id) {
    if (vocab_.types[id] != TokenType::Control) continue;
    special_ids_.insert(id);
    for (auto text : kEndOfGenerationTexts) {
      if (vocab_.tokens[id] == text) eog_.insert(id);
    }
  }
  if (!vocab_.chat_template.empty()) {
    const std::string bos_text = vocab_.bos >= 0 ? vocab_.tokens[vocab_.bos] : "";
    const std::string eos_text = vocab_.eos >= 0 ? vocab_.tokens[vocab_.eos] : "";
    // An unrecognised template is only an error when someone asks to use it.
    try {
      chat_.emplace(ChatTemplate::detect(vocab_.chat_template, bos_text, eos_text));
    } catch (const Error&) {
      chat_.reset();
    }
  }
}

void TokenizerBase::check_id(int32_t id) const {
  if (!vocab_.valid_id(id)) fail("bad token id {} of vocab {}", id, vocab_.size());
}

std::vector<int32_t> TokenizerBase::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  bool after_special = true;
  for (const auto& f : specials_.partition(text, parse_special)) {
    if (f.id >= 0) {
      out.push_back(f.id);
      after_special = true;
    } else {
      encode_plain(text.substr(f.begin, f.end - f.begin), {after_special, f.begin == 0}, out);
      after_special = false;
    }
  }
  return out;
}

std::string TokenizerBase::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    check_id(id);
    if (skip_special && special_ids_.contains(id)) continue;
    out += token_bytes(id);
  }
  finish_decode(out);
  return out;
}

std::string TokenizerBase::apply_chat_template(std::span<const ChatMessage> messages,
                                               bool add_generation_prompt) const {
  if (vocab_.chat_template.empty()) fail("model has no chat template (tokenizer kind {})", kind());
  if (!chat_) {
    // Re-run detection to raise its error message (lists the supported families).
    ChatTemplate::detect(vocab_.chat_template, "", "");
    fail("chat template not usable");
  }
  return chat_->render(messages, add_generation_prompt);
}

std::string TokenizerBase::chat_family() const { return chat_ ? chat_->family_name() : ""; }

}  // namespace longctx::tok

// tokenizer.h: text <-> token ids for every supported model family, plus chat prompts.
//
// Kinds: byte-level BPE (GPT-2 / SmolLM2, Llama-3, Qwen2 pre-tokenizer regexes) and
// SentencePiece-style BPE (Llama-2 / Mistral, with byte fallback tokens <0xNN>).
// Built from GGUF metadata (tokenizer.ggml.*) or from HF tokenizer.json + tokenizer_config.json
// (found in ModelFile::metadata() under "tokenizer" / "tokenizer_config"); both kinds exist in
// both forms. All of encode/decode/token_bytes/apply_chat_template are const and thread-safe.
// Any input bytes are accepted (invalid UTF-8 included); bad ids and unusable vocabularies or
// templates throw longctx::Error naming the problem.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loader/model_file.h"

namespace longctx {

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant"
  std::string content;
};

class Tokenizer {
 public:
  // Dispatches on mf.format(): "gguf" -> from_gguf_metadata(metadata()), "safetensors" ->
  // from_hf_json(metadata()["tokenizer"], metadata()["tokenizer_config"]).
  static std::unique_ptr<Tokenizer> from_model_file(const ModelFile& mf);
  // From GGUF key/values (tokenizer.ggml.model "gpt2" or "llama", tokens, merges/scores, ...).
  static std::unique_ptr<Tokenizer> from_gguf_metadata(const nlohmann::json& meta);
  // From a HF tokenizer.json (byte-level BPE) and tokenizer_config.json (may be null/empty).
  static std::unique_ptr<Tokenizer> from_hf_json(const nlohmann::json& tokenizer,
                                                 const nlohmann::json& tokenizer_config);
  virtual ~Tokenizer() = default;

  // add_bos: prepend BOS when the model's config asks for it (add_bos_token); parse_special:
  // text like "<|im_start|>" becomes its special token instead of being split as plain text.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const = 0;
  // Concatenated bytes of the tokens (special tokens rendered unless skip_special).
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special = false) const = 0;
  // The raw bytes one token stands for (may be a partial UTF-8 sequence).
  virtual std::string token_bytes(int32_t id) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 if none
  virtual int32_t eos_id() const = 0;  // -1 if none
  virtual bool is_end_of_generation(int32_t id) const = 0;  // eos, eot, <|im_end|>, <|eot_id|>, ...
  virtual bool adds_bos() const = 0;  // the model's default for add_bos
  // "bpe:gpt2", "bpe:llama3", "bpe:qwen2", "bpe:smollm", "bpe:custom" (other tokenizer.json
  // pre-tokenizer pipelines), "spm".
  virtual std::string kind() const = 0;

  // Renders messages with the model's chat template (family detected from the template text:
  // ChatML, Llama-3, Llama-3.1, Llama-2/Mistral [INST]; see chat_template.h); throws Error if the
  // model has no usable template, or where the Jinja template itself would raise. The result
  // contains special-token text (e.g. BOS): encode it with add_bos=false, parse_special=true.
  virtual std::string apply_chat_template(std::span<const ChatMessage> messages,
                                          bool add_generation_prompt) const = 0;
};

}  // namespace longctx

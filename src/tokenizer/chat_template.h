// chat_template.h: renders chat messages into a prompt string the way the model's Jinja
// chat template would, for the template families longctx supports.
//
// We do not embed a Jinja interpreter: the family is recognised from the template text and
// rendered by hand-written C++ that reproduces the published templates byte for byte (checked
// against jinja2 renderings in tests/data/tokenizer). Family-specific details that vary between
// models of a family (ChatML's default system prompt) are read from the template text itself.
//   chatml   <|im_start|>role\ncontent<|im_end|>\n  (SmolLM2, Qwen2, Qwen2.5)
//   llama3   <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>  (Llama-3)
//   llama3.1 as llama3, always opened by a system turn with "Cutting Knowledge Date" and
//            "Today Date" lines (Llama-3.1 / 3.2 / 3.3; tool messages become ipython turns)
//   llama2   [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST]  (Llama-2-chat)
//   mistral  [INST] ... [/INST] without system prompts  (Mistral-7B-Instruct v0.1/v0.2)
//   gemma    <start_of_turn>role\ncontent<end_of_turn>\n, role "model" for the assistant, a system
//            message prefixed to the first user turn (Gemma 2 / Gemma 3)
#pragma once
#include <span>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace longctx::tok {

class ChatTemplate {
 public:
  enum class Family { ChatML, Llama3, Llama31, Llama2, Mistral, Gemma };

  // Recognises the family of `jinja`; bos_text / eos_text are what the template's bos_token and
  // eos_token expand to. Throws Error listing the supported families for anything else.
  static ChatTemplate detect(std::string_view jinja, std::string bos_text, std::string eos_text);

  // Throws Error where the Jinja template would raise (e.g. roles not alternating for [INST]).
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  Family family() const { return family_; }
  std::string family_name() const;
  // ChatML: the system prompt used when the conversation has none ("" if the template has none).
  const std::string& default_system() const { return default_system_; }
  // Llama-3.1: the "Today Date" text. Templates that call strftime_now get today's date
  // ("%d %b %Y", e.g. "26 Jul 2024"); others the date_string default written in the template.
  const std::string& date_string() const { return date_string_; }
  void set_date_string(std::string d) { date_string_ = std::move(d); }

 private:
  std::string render_chatml(std::span<const ChatMessage> m, bool gen) const;
  std::string render_llama3(std::span<const ChatMessage> m, bool gen) const;
  std::string render_llama31(std::span<const ChatMessage> m, bool gen) const;
  std::string render_llama2(std::span<const ChatMessage> m) const;
  std::string render_mistral(std::span<const ChatMessage> m) const;
  std::string render_gemma(std::span<const ChatMessage> m, bool gen) const;

  Family family_ = Family::ChatML;
  std::string bos_, eos_;
  // ChatML details.
  bool has_default_system_ = false;
  bool default_system_in_loop_ = false;  // emitted only when there is at least one message
  std::string default_system_;
  bool tool_responses_ = false;          // Qwen2.5-style <tool_response> blocks for role "tool"
  // Llama-3.1 details.
  std::string knowledge_date_;
  std::string date_string_;
  // Mistral details: some versions put a space after eos_token.
  bool space_after_eos_ = false;
};

// The published Gemma 3 chat template (google/gemma-3-*-it), for Gemma GGUF files converted
// without tokenizer.chat_template (gemma-3-270m's Q4_K_M file has none).
extern const char* const kGemma3ChatTemplate;

// Python str.strip() with no arguments (what Jinja's trim filter and .strip() do): removes
// Unicode whitespace from both ends.
std::string python_strip(std::string_view s);

}  // namespace longctx::tok

// chat_template.cpp: see chat_template.h.
#include "tokenizer/chat_template.h"

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace longctx::tok {

namespace {
constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kHeaderStart = "<|start_header_id|>";
constexpr std::string_view kInst = "[INST]";
constexpr std::string_view kSysOpen = "<<SYS>>";
constexpr std::string_view kStartOfTurn = "<start_of_turn>";
constexpr std::string_view kToolResponse = "<tool_response>";
constexpr std::string_view kKnowledgeDate = "Cutting Knowledge Date: ";
constexpr std::string_view kDateStringSet = "set date_string = \"";
constexpr const char* kDefaultKnowledgeDate = "December 2023";
constexpr const char* kDefaultDateString = "26 Jul 2024";
constexpr const char* kTodayFormat = "%d %b %Y";
constexpr size_t kDateBufferSize = 64;
constexpr size_t kTemplatePreviewChars = 120;

// Python's str.isspace() code points.
bool is_python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Decodes the backslash escapes of a Jinja (Python-style) string literal body.
std::string unescape_literal(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      default: out += '\\'; out += c; break;
    }
  }
  return out;
}

// Finds a literal "<|im_start|>system\n<text><|im_end|>" in a ChatML template, i.e. a default
// system prompt written into the template. Returns its byte offset, or npos.
size_t find_default_system(std::string_view jinja, std::string& text) {
  const std::string head = std::string(kImStart) + "system";
  for (size_t pos = jinja.find(head); pos != std::string_view::npos; pos = jinja.find(head, pos + 1)) {
    size_t body = pos + head.size();
    if (jinja.compare(body, 2, "\\n") == 0) {
      body += 2;
    } else if (jinja.compare(body, 1, "\n") == 0) {
      body += 1;
    } else {
      continue;
    }
    const size_t end = jinja.find(kImEnd, body);
    if (end == std::string_view::npos) continue;
    const std::string_view lit = jinja.substr(body, end - body);
    if (lit.empty() || lit.find_first_of("'\"{}+") != std::string_view::npos) continue;
    text = unescape_literal(lit);
    return pos;
  }
  return std::string_view::npos;
}

// The text after `key` up to the next quote or escaped newline, or "" if key is absent.
std::string literal_after(std::string_view jinja, std::string_view key) {
  const size_t pos = jinja.find(key);
  if (pos == std::string_view::npos) return {};
  const size_t b = pos + key.size();
  size_t e = b;
  while (e < jinja.size() && jinja[e] != '"' && jinja[e] != '\'' && jinja[e] != '\\' && jinja[e] != '\n') ++e;
  return std::string(jinja.substr(b, e - b));
}

std::string today_string() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[kDateBufferSize];
  const size_t n = std::strftime(buf, sizeof(buf), kTodayFormat, &tm);
  return std::string(buf, n);
}

// Jinja's tojson on a string (Python json.dumps with ensure_ascii=False).
std::string json_string(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void append_chatml_turn(std::string& out, std::string_view role, std::string_view content) {
  out += kImStart;
  out += role;
  out += '\n';
  out += content;
  out += kImEnd;
  out += '\n';
}
}  // namespace

const char* const kGemma3ChatTemplate = R"jinja({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
)jinja";

std::string python_strip(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e) {
    size_t n;
    const uint32_t cp = utf8_decode(s, b, n);
    if (cp == kInvalidCodepoint || !is_python_space(cp)) break;
    b += n;
  }
  while (e > b) {
    // Step back to the start of the last character.
    size_t start = e - 1;
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && e - start < 4) --start;
    size_t n;
    const uint32_t cp = utf8_decode(s, start, n);
    if (cp == kInvalidCodepoint || start + n != e || !is_python_space(cp)) break;
    e = start;
  }
  return std::string(s.substr(b, e - b));
}

ChatTemplate ChatTemplate::detect(std::string_view jinja, std::string bos_text, std::string eos_text) {
  ChatTemplate t;
  t.bos_ = std::move(bos_text);
  t.eos_ = std::move(eos_text);
  if (jinja.find(kImStart) != std::string_view::npos) {
    t.family_ = Family::ChatML;
    const size_t def = find_default_system(jinja, t.default_system_);
    if (def != std::string_view::npos) {
      t.has_default_system_ = true;
      const size_t loop = jinja.find("for message in messages");
      t.default_system_in_loop_ = loop != std::string_view::npos && loop < def;
    }
    t.tool_responses_ = jinja.find(kToolResponse) != std::string_view::npos;
  } else if (jinja.find(kHeaderStart) != std::string_view::npos) {
    t.family_ = Family::Llama3;
    if (jinja.find(kKnowledgeDate) != std::string_view::npos) {
      t.family_ = Family::Llama31;
      t.knowledge_date_ = literal_after(jinja, kKnowledgeDate);
      if (t.knowledge_date_.empty()) t.knowledge_date_ = kDefaultKnowledgeDate;
      t.date_string_ = literal_after(jinja, kDateStringSet);
      if (t.date_string_.empty()) t.date_string_ = kDefaultDateString;
      // HF's apply_chat_template defines strftime_now, so such templates show today's date.
      if (jinja.find("strftime_now") != std::string_view::npos) t.date_string_ = today_string();
    }
  } else if (jinja.find(kInst) != std::string_view::npos) {
    t.family_ = jinja.find(kSysOpen) != std::string_view::npos ? Family::Llama2 : Family::Mistral;
    t.space_after_eos_ = jinja.find("eos_token + ' '") != std::string_view::npos;
  } else if (jinja.find(kStartOfTurn) != std::string_view::npos) {
    t.family_ = Family::Gemma;
  } else {
    fail("unsupported chat template (supported families: chatml <|im_start|>, llama3 / llama3.1 "
         "<|start_header_id|>, llama2 / mistral [INST], gemma <start_of_turn>); template begins: {}",
         jinja.substr(0, kTemplatePreviewChars));
  }
  return t;
}

std::string ChatTemplate::family_name() const {
  switch (family_) {
    case Family::ChatML: return "chatml";
    case Family::Llama3: return "llama3";
    case Family::Llama31: return "llama3.1";
    case Family::Llama2: return "llama2";
    case Family::Mistral: return "mistral";
    case Family::Gemma: return "gemma";
  }
  return "?";
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  switch (family_) {
    case Family::ChatML: return render_chatml(messages, add_generation_prompt);
    case Family::Llama3: return render_llama3(messages, add_generation_prompt);
    case Family::Llama31: return render_llama31(messages, add_generation_prompt);
    case Family::Llama2: return render_llama2(messages);
    case Family::Mistral: return render_mistral(messages);
    case Family::Gemma: return render_gemma(messages, add_generation_prompt);
  }
  return {};
}

std::string ChatTemplate::render_chatml(std::span<const ChatMessage> m, bool gen) const {
  std::string out;
  if (m.empty() && has_default_system_ && !default_system_in_loop_) {
    // The template reads messages[0] outside its loop, which Jinja rejects for an empty list.
    fail("chat template error: the conversation is empty (the template reads messages[0])");
  }
  const bool first_is_system = !m.empty() && m[0].role == "system";
  if (has_default_system_ && !first_is_system && (!m.empty() || !default_system_in_loop_)) {
    append_chatml_turn(out, "system", default_system_);
  }
  for (size_t i = 0; i < m.size(); ++i) {
    if (tool_responses_ && m[i].role == "tool") {
      if (i == 0 || m[i - 1].role != "tool") out += std::string(kImStart) + "user";
      out += "\n<tool_response>\n" + m[i].content + "\n</tool_response>";
      if (i + 1 == m.size() || m[i + 1].role != "tool") out += std::string(kImEnd) + "\n";
      continue;
    }
    append_chatml_turn(out, m[i].role, m[i].content);
  }
  if (gen) out += std::string(kImStart) + "assistant\n";
  return out;
}

std::string ChatTemplate::render_llama3(std::span<const ChatMessage> m, bool gen) const {
  std::string out;
  for (size_t i = 0; i < m.size(); ++i) {
    if (i == 0) out += bos_;
    out += "<|start_header_id|>" + m[i].role + "<|end_header_id|>\n\n" + python_strip(m[i].content) +
           "<|eot_id|>";
  }
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string ChatTemplate::render_llama31(std::span<const ChatMessage> m, bool gen) const {
  if (m.empty()) fail("chat template error: the conversation is empty (the template reads messages[0])");
  std::string system;
  auto rest = m;
  if (m[0].role == "system") {
    system = python_strip(m[0].content);
    rest = m.subspan(1);
  }
  std::string out = bos_ + "<|start_header_id|>system<|end_header_id|>\n\n" + std::string(kKnowledgeDate) +
                    knowledge_date_ + "\nToday Date: " + date_string_ + "\n\n" + system + "<|eot_id|>";
  for (const ChatMessage& msg : rest) {
    if (msg.role == "tool" || msg.role == "ipython") {
      // The template writes `content | tojson` for tool results (a string is "iterable").
      out += "<|start_header_id|>ipython<|end_header_id|>\n\n" + json_string(msg.content) + "<|eot_id|>";
    } else {
      out += "<|start_header_id|>" + msg.role + "<|end_header_id|>\n\n" + python_strip(msg.content) + "<|eot_id|>";
    }
  }
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

namespace {
[[noreturn]] void fail_alternate() {
  fail("chat template error: Conversation roles must alternate user/assistant/user/assistant/...");
}
}  // namespace

std::string ChatTemplate::render_llama2(std::span<const ChatMessage> m) const {
  // The template tests messages[0]['role'] first, which Jinja rejects for an empty list.
  if (m.empty()) fail("chat template error: the conversation is empty (the template reads messages[0])");
  std::string out;
  const bool has_system = m[0].role == "system";
  const auto loop = has_system ? m.subspan(1) : m;
  for (size_t i = 0; i < loop.size(); ++i) {
    const ChatMessage& msg = loop[i];
    if ((msg.role == "user") != (i % 2 == 0)) fail_alternate();
    std::string content = msg.content;
    if (i == 0 && has_system) content = "<<SYS>>\n" + m[0].content + "\n<</SYS>>\n\n" + msg.content;
    if (msg.role == "user") {
      out += bos_ + "[INST] " + python_strip(content) + " [/INST]";
    } else if (msg.role == "assistant") {
      out += " " + python_strip(content) + " " + eos_;
    }
  }
  return out;
}

std::string ChatTemplate::render_mistral(std::span<const ChatMessage> m) const {
  std::string out = bos_;
  for (size_t i = 0; i < m.size(); ++i) {
    const ChatMessage& msg = m[i];
    if ((msg.role == "user") != (i % 2 == 0)) fail_alternate();
    if (msg.role == "user") {
      out += "[INST] " + msg.content + " [/INST]";
    } else if (msg.role == "assistant") {
      out += msg.content + eos_;
      if (space_after_eos_) out += ' ';
    } else {
      fail("chat template error: Only user and assistant roles are supported!");
    }
  }
  return out;
}

// Gemma 3's template: bos, then the turns; a leading system message is not a turn but a prefix
// (content + "\n\n", untrimmed) of the first remaining turn; the remaining roles must alternate
// user / assistant starting with user (other roles are rendered as they are, at odd turns);
// each turn's content is trimmed. Reading messages[0] of an empty conversation is an error.
std::string ChatTemplate::render_gemma(std::span<const ChatMessage> m, bool gen) const {
  if (m.empty()) fail("chat template error: the conversation is empty (the template reads messages[0])");
  std::string out = bos_, prefix;
  if (m[0].role == "system") {
    prefix = m[0].content + "\n\n";
    m = m.subspan(1);
  }
  for (size_t i = 0; i < m.size(); ++i) {
    if ((m[i].role == "user") != (i % 2 == 0)) fail_alternate();
    const std::string role = m[i].role == "assistant" ? "model" : m[i].role;
    out += std::string(kStartOfTurn) + role + "\n" + (i == 0 ? prefix : "") + python_strip(m[i].content) +
           "<end_of_turn>\n";
  }
  if (gen) out += std::string(kStartOfTurn) + "model\n";
  return out;
}

}  // namespace longctx::tok

// openai_api.cpp: see openai_api.h.
#include "server/openai_api.h"

#include <cmath>
#include <limits>
#include <optional>

#include "util/error.h"

namespace longctx::server {

namespace {

// OpenAI's limits on the fields we take.
constexpr int kMaxStops = 4;
constexpr double kMaxTemperature = 2.0;
constexpr int kMaxLogprobs = 5;  // completions "logprobs"

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError{400, message, "invalid_request_error", param, ""};
}

// A field of the body, or nullptr when absent or null.
const json* field(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<bool> get_bool(const json& body, const char* key) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad(key, fmt::format("'{}' must be a boolean", key));
  return v->get<bool>();
}
std::optional<int64_t> get_int(const json& body, const char* key, int64_t lo, int64_t hi) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer() && !v->is_number_unsigned())
    bad(key, fmt::format("'{}' must be an integer", key));
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    bad(key, fmt::format("'{}' must be between {} and {}", key, lo, hi));
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) bad(key, fmt::format("'{}' must be between {} and {} (got {})", key, lo, hi, x));
  return x;
}
std::optional<double> get_number(const json& body, const char* key, double lo, double hi) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad(key, fmt::format("'{}' must be a number", key));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) bad(key, fmt::format("'{}' must be between {} and {} (got {})", key, lo, hi, x));
  return x;
}
std::optional<std::string> get_string(const json& body, const char* key) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad(key, fmt::format("'{}' must be a string", key));
  return v->get<std::string>();
}

std::vector<std::string> get_stops(const json& body) {
  const json* v = field(body, "stop");
  if (!v) return {};
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > size_t(kMaxStops)) bad("stop", fmt::format("'stop' takes at most {} strings", kMaxStops));
    for (const json& s : *v) {
      if (!s.is_string()) bad("stop", "'stop' must be a string or an array of strings");
      out.push_back(s.get<std::string>());
    }
  } else {
    bad("stop", "'stop' must be a string or an array of strings");
  }
  for (const auto& s : out)
    if (s.empty()) bad("stop", "'stop' strings must not be empty");
  return out;
}

// The prompt of /v1/completions: a string, an array of one string, or an array of token ids.
std::vector<int32_t> completion_prompt(const json& body, const Tokenizer& tok) {
  const json* p = field(body, "prompt");
  if (!p) bad("prompt", "'prompt' is required");
  if (p->is_string()) return tok.encode(p->get<std::string>(), tok.adds_bos(), false);
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string())
    return tok.encode((*p)[0].get<std::string>(), tok.adds_bos(), false);
  if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    std::vector<int32_t> ids;
    for (const json& t : *p) {
      if (!t.is_number_integer() && !t.is_number_unsigned()) bad("prompt", "a token-id prompt must hold only integers");
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id >= tok.vocab_size())
        bad("prompt", fmt::format("token id {} is outside the vocabulary [0, {})", id, tok.vocab_size()));
      ids.push_back(int32_t(id));
    }
    return ids;
  }
  if (p->is_array() && p->size() > 1) bad("prompt", "only one prompt per request is supported (n = 1, no prompt arrays)");
  bad("prompt", "'prompt' must be a string, an array of one string, or an array of token ids");
}

// The messages of /v1/chat/completions, rendered with the model's chat template.
std::vector<int32_t> chat_prompt(const json& body, const Tokenizer& tok) {
  const json* m = field(body, "messages");
  if (!m) bad("messages", "'messages' is required");
  if (!m->is_array() || m->empty()) bad("messages", "'messages' must be a non-empty array");
  std::vector<ChatMessage> msgs;
  for (const json& x : *m) {
    if (!x.is_object()) bad("messages", "each message must be an object with 'role' and 'content'");
    const auto role = get_string(x, "role");
    if (!role) bad("messages", "each message needs a 'role'");
    if (*role != "system" && *role != "user" && *role != "assistant" && *role != "developer")
      bad("messages", fmt::format("unknown role '{}' (expected system, developer, user or assistant)", *role));
    std::string text;
    const json* c = field(x, "content");
    if (!c) bad("messages", "each message needs a 'content'");
    if (c->is_string()) {
      text = c->get<std::string>();
    } else if (c->is_array()) {  // content parts: text only
      for (const json& part : *c) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          bad("messages", "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
        text += part["text"].get<std::string>();
      }
    } else {
      bad("messages", "a message's 'content' must be a string or an array of text parts");
    }
    msgs.push_back({*role == "developer" ? "system" : *role, text});
  }
  return tok.encode(tok.apply_chat_template(msgs, true), false, true);
}

json parse_object(const std::string& body_text) {
  json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) bad("", "the request body is not valid JSON");
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  return body;
}

json usage(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

// The logprobs object of one or more tokens, in the endpoint's shape.
json logprobs_body(const ApiRequest& r, const Tokenizer& tok, std::span<const int32_t> ids, std::span<const float> lps) {
  if (r.endpoint == Endpoint::chat) {
    json content = json::array();
    for (size_t i = 0; i < ids.size(); ++i) {
      const std::string t = tok.token_bytes(ids[i]);
      json bytes = json::array();
      for (unsigned char c : t) bytes.push_back(int(c));
      content.push_back({{"token", t}, {"logprob", lps[i]}, {"bytes", bytes}, {"top_logprobs", json::array()}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_lps = json::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    tokens.push_back(tok.token_bytes(ids[i]));
    token_lps.push_back(lps[i]);
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", nullptr}, {"text_offset", nullptr}};
}

}  // namespace

json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

std::string finish_reason(const std::string& stop_reason) { return stop_reason == "length" ? "length" : "stop"; }

ApiRequest parse_request(Endpoint ep, const std::string& body_text, const ApiContext& ctx) {
  const json body = parse_object(body_text);
  ApiRequest r;
  r.endpoint = ep;
  const auto model = get_string(body, "model");
  if (!model) bad("model", "'model' is required");
  if (*model != ctx.model_id)
    throw ApiError{404, fmt::format("the model '{}' does not exist; this server serves '{}'", *model, ctx.model_id),
                   "invalid_request_error", "model", "model_not_found"};
  if (const auto n = get_int(body, "n", 1, 1 << 20); n && *n != 1) bad("n", "only n = 1 is supported");
  if (const auto bo = get_int(body, "best_of", 1, 1 << 20); bo && *bo != 1) bad("best_of", "only best_of = 1 is supported");
  if (get_bool(body, "echo").value_or(false)) bad("echo", "'echo' is not supported");

  const Tokenizer& tok = ctx.eng.tokenizer();
  r.seq.prompt = ep == Endpoint::chat ? chat_prompt(body, tok) : completion_prompt(body, tok);
  const int64_t n_prompt = int64_t(r.seq.prompt.size());
  const int64_t max_ctx = ctx.eng.max_context();
  if (n_prompt == 0) bad(ep == Endpoint::chat ? "messages" : "prompt", "the prompt is empty (no tokens)");
  if (n_prompt >= max_ctx)
    bad(ep == Endpoint::chat ? "messages" : "prompt",
        fmt::format("the prompt has {} tokens; this model's context is {} tokens (room for at least one new token "
                    "is needed)", n_prompt, max_ctx));

  SamplingParams& sp = r.seq.sp;
  // Completions default to 16 new tokens (as OpenAI); chat to the rest of the context.
  std::optional<int64_t> max_tokens = get_int(body, "max_tokens", 0, std::numeric_limits<int32_t>::max());
  if (ep == Endpoint::chat)
    if (auto m = get_int(body, "max_completion_tokens", 0, std::numeric_limits<int32_t>::max())) max_tokens = m;
  const int64_t room = max_ctx - n_prompt;
  if (max_tokens && *max_tokens > room)
    bad("max_tokens", fmt::format("max_tokens is {} but the prompt ({} tokens) leaves room for {} in the context of {} "
                                  "tokens", *max_tokens, n_prompt, room, max_ctx));
  sp.max_tokens = int(max_tokens.value_or(ep == Endpoint::chat ? room : std::min<int64_t>(16, room)));
  sp.temperature = float(get_number(body, "temperature", 0, kMaxTemperature).value_or(1.0));
  sp.top_p = float(get_number(body, "top_p", 0, 1).value_or(1.0));
  if (sp.top_p <= 0) bad("top_p", "'top_p' must be greater than 0");
  sp.top_k = int(get_int(body, "top_k", -1, std::numeric_limits<int32_t>::max()).value_or(0));
  if (sp.top_k < 0) sp.top_k = 0;  // vLLM's -1 = off
  if (const json* s = field(body, "seed")) {
    if (!s->is_number_integer() && !s->is_number_unsigned()) bad("seed", "'seed' must be an integer");
    sp.seed = s->is_number_unsigned() ? s->get<uint64_t>() : uint64_t(s->get<int64_t>());
  }
  sp.stop = get_stops(body);
  sp.stop_at_eos = !get_bool(body, "ignore_eos").value_or(false);

  r.stream = get_bool(body, "stream").value_or(false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) bad("stream_options", "'stream_options' needs 'stream': true");
    r.include_usage = get_bool(*so, "include_usage").value_or(false);
  }
  if (ep == Endpoint::chat) {
    r.logprobs = get_bool(body, "logprobs").value_or(false);
    if (get_int(body, "top_logprobs", 0, 20).value_or(0) > 0)
      bad("top_logprobs", "top_logprobs > 0 is not supported (the sampled token's logprob is)");
  } else {
    r.logprobs = get_int(body, "logprobs", 0, kMaxLogprobs).has_value();
  }
  r.seq.logprobs = r.logprobs;
  r.seq.attn = get_string(body, "attn").value_or("");
  if (r.seq.attn == ctx.attn) r.seq.attn.clear();
  return r;
}

json response_body(const ApiRequest& r, const Completion& c, const std::string& id, int64_t created,
                   const ApiContext& ctx) {
  json choice = {{"index", 0}, {"finish_reason", c.finish_reason}, {"logprobs", nullptr}};
  if (r.logprobs) choice["logprobs"] = logprobs_body(r, ctx.eng.tokenizer(), c.tokens, c.logprobs);
  if (r.endpoint == Endpoint::chat)
    choice["message"] = {{"role", "assistant"}, {"content", c.text}};
  else
    choice["text"] = c.text;
  return {{"id", id},
          {"object", r.endpoint == Endpoint::chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", ctx.model_id},
          {"choices", json::array({choice})},
          {"usage", usage(c.prompt_tokens, int64_t(c.tokens.size()))}};
}

json chunk_body(const ApiRequest& r, const std::string& text, const std::string& finish, const SequenceEvent* ev,
                const std::string& id, int64_t created, const ApiContext& ctx) {
  json choice = {{"index", 0}, {"finish_reason", finish.empty() ? json(nullptr) : json(finish)}, {"logprobs", nullptr}};
  if (r.logprobs && ev && ev->token >= 0) {
    const int32_t t = ev->token;
    const float lp = ev->logprob;
    choice["logprobs"] = logprobs_body(r, ctx.eng.tokenizer(), std::span(&t, 1), std::span(&lp, 1));
  }
  if (r.endpoint == Endpoint::chat) {
    choice["delta"] = json::object();
    if (!text.empty() || finish.empty()) choice["delta"]["content"] = text;
  } else {
    choice["text"] = text;
  }
  return {{"id", id},
          {"object", r.endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", ctx.model_id},
          {"choices", json::array({choice})}};
}

json usage_chunk(const ApiRequest& r, int64_t prompt_tokens, int64_t completion_tokens, const std::string& id,
                 int64_t created, const ApiContext& ctx) {
  return {{"id", id},
          {"object", r.endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", ctx.model_id},
          {"choices", json::array()},
          {"usage", usage(prompt_tokens, completion_tokens)}};
}

json tokenize_response(const std::string& body_text, const ApiContext& ctx) {
  const json body = parse_object(body_text);
  const Tokenizer& tok = ctx.eng.tokenizer();
  std::vector<int32_t> ids;
  if (field(body, "messages")) {
    ids = chat_prompt(body, tok);
  } else {
    const auto text = get_string(body, "prompt");
    if (!text) bad("prompt", "'prompt' (a string) or 'messages' is required");
    ids = tok.encode(*text, get_bool(body, "add_special_tokens").value_or(true) && tok.adds_bos(), false);
  }
  return {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", ctx.eng.max_context()}};
}

json detokenize_response(const std::string& body_text, const ApiContext& ctx) {
  const json body = parse_object(body_text);
  const json* t = field(body, "tokens");
  if (!t || !t->is_array()) bad("tokens", "'tokens' (an array of token ids) is required");
  const Tokenizer& tok = ctx.eng.tokenizer();
  std::vector<int32_t> ids;
  for (const json& x : *t) {
    if (!x.is_number_integer() && !x.is_number_unsigned()) bad("tokens", "'tokens' must hold only integers");
    const int64_t id = x.get<int64_t>();
    if (id < 0 || id >= tok.vocab_size())
      bad("tokens", fmt::format("token id {} is outside the vocabulary [0, {})", id, tok.vocab_size()));
    ids.push_back(int32_t(id));
  }
  return {{"prompt", tok.decode(ids)}};
}

}  // namespace longctx::server

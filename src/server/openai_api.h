// openai_api.h: the OpenAI-style JSON of `longctx serve`: request bodies into a SequenceRequest
// (with OpenAI-style errors for bad input), and the response and stream-chunk objects.
//   POST /v1/completions       {"model", "prompt": str | [str] | [int], "max_tokens", "temperature",
//                               "top_p", "seed", "stop": str | [str], "n": 1, "stream",
//                               "stream_options": {"include_usage"}, "logprobs": int,
//                               extras: "attn" (attention method), "top_k", "ignore_eos"}
//   POST /v1/chat/completions  the same with "messages": [{"role", "content": str | [{"type":"text","text"}]}]
//                               and "logprobs": bool, "max_completion_tokens"
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "longctx/engine.h"

namespace longctx::server {

using nlohmann::json;

// A request that cannot run: its HTTP status and OpenAI error fields.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, or empty
  std::string code;   // e.g. "model_not_found", or empty
};

// {"error": {...}} of an ApiError.
json error_body(const ApiError& e);

enum class Endpoint { completions, chat };

// What the server knows when it parses a request.
struct ApiContext {
  const Engine& eng;
  std::string model_id;  // the served model's name (GET /v1/models)
  std::string attn;      // the server's default attention method
};

// A parsed request: what the engine runs, and how to answer.
struct ApiRequest {
  Endpoint endpoint = Endpoint::completions;
  SequenceRequest seq;
  bool stream = false, include_usage = false, logprobs = false;
};

// Parses and checks a request body; throws ApiError. Static checks only (types, ranges, the
// model name, n, the context): the KV budget and the attention spec are checked on admission.
ApiRequest parse_request(Endpoint ep, const std::string& body, const ApiContext& ctx);

// The response of a finished non-streaming request.
struct Completion {
  std::string text, finish_reason;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // per token, when asked
  int64_t prompt_tokens = 0;
};
json response_body(const ApiRequest& r, const Completion& c, const std::string& id, int64_t created,
                   const ApiContext& ctx);
// One stream chunk: text piece (and the finish reason on the last one; empty = none yet).
json chunk_body(const ApiRequest& r, const std::string& text, const std::string& finish_reason, const SequenceEvent* ev,
                const std::string& id, int64_t created, const ApiContext& ctx);
// The usage-only chunk of stream_options.include_usage.
json usage_chunk(const ApiRequest& r, int64_t prompt_tokens, int64_t completion_tokens, const std::string& id,
                 int64_t created, const ApiContext& ctx);
// POST /tokenize {"prompt": str, "add_special_tokens": bool} or {"messages": [...]}:
// {"tokens", "count", "max_model_len"}. POST /detokenize {"tokens": [int]}: {"prompt"}. Throw ApiError.
json tokenize_response(const std::string& body, const ApiContext& ctx);
json detokenize_response(const std::string& body, const ApiContext& ctx);
// OpenAI's finish_reason of an engine stop reason ("eos"/"stop" -> "stop", "length").
std::string finish_reason(const std::string& stop_reason);

}  // namespace longctx::server

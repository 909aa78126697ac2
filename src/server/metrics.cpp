// metrics.cpp: see metrics.h.
#include "server/metrics.h"

#include <fmt/format.h>

namespace longctx::server {

namespace {

void metric(std::string& out, const char* name, const char* type, const char* help, double value,
            const std::string& labels) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}{{{}}} {}\n", name, help, name, type, name, labels, value);
}

}  // namespace

std::string prometheus_text(const SchedulerStats& s, const std::map<int, int64_t>& http, const std::string& model_id) {
  const std::string m = fmt::format("model=\"{}\"", model_id);
  const BatchStats& b = s.batch;
  std::string out;
  metric(out, "longctx_requests_total", "counter", "Completion requests received", double(s.requests), m);
  metric(out, "longctx_requests_rejected_total", "counter", "Requests refused (bad request, queue full, draining)",
         double(s.rejected), m);
  metric(out, "longctx_requests_finished_total", "counter", "Requests that ran to their end", double(s.finished), m);
  metric(out, "longctx_requests_cancelled_total", "counter", "Requests whose client went away first",
         double(s.cancelled), m);
  metric(out, "longctx_requests_waiting", "gauge", "Requests queued for admission", double(s.queued), m);
  metric(out, "longctx_requests_running", "gauge", "Open sequences (prefilling or decoding)", double(b.sequences), m);
  metric(out, "longctx_requests_prefilling", "gauge", "Open sequences still in their prompt", double(b.prefilling), m);
  metric(out, "longctx_prompt_tokens_total", "counter", "Prompt tokens of admitted requests", double(s.prompt_tokens), m);
  metric(out, "longctx_generation_tokens_total", "counter", "Tokens generated", double(s.completion_tokens), m);
  metric(out, "longctx_kv_cache_reserved_tokens", "gauge", "KV cache tokens reserved by open sequences",
         double(b.kv_tokens), m);
  metric(out, "longctx_kv_cache_used_tokens", "gauge", "KV cache tokens held by open sequences", double(b.kv_used), m);
  metric(out, "longctx_kv_cache_capacity_tokens", "gauge", "KV cache budget in tokens (--kv-tokens)",
         double(b.kv_capacity), m);
  metric(out, "longctx_kv_cache_usage_ratio", "gauge", "Reserved / capacity",
         b.kv_capacity > 0 ? double(b.kv_tokens) / double(b.kv_capacity) : 0.0, m);
  metric(out, "longctx_prefill_tokens_total", "counter", "Prompt tokens run through prefill", double(b.prefill_tokens), m);
  metric(out, "longctx_decode_tokens_total", "counter", "Tokens run through decode steps", double(b.decode_tokens), m);
  metric(out, "longctx_prefill_seconds_total", "counter", "Time in prefill chunks", b.prefill_s, m);
  metric(out, "longctx_decode_seconds_total", "counter", "Time in batched decode steps", b.decode_s, m);
  metric(out, "longctx_prefill_tokens_per_second", "gauge", "Prefill throughput so far",
         b.prefill_s > 0 ? double(b.prefill_tokens) / b.prefill_s : 0.0, m);
  metric(out, "longctx_decode_tokens_per_second", "gauge", "Decode throughput so far (all sequences)",
         b.decode_s > 0 ? double(b.decode_tokens) / b.decode_s : 0.0, m);
  metric(out, "longctx_engine_steps_total", "counter", "Engine steps", double(b.steps), m);
  metric(out, "longctx_draining", "gauge", "1 while shutting down", s.draining ? 1.0 : 0.0, m);
  out += "# HELP longctx_http_responses_total HTTP responses by status code\n# TYPE longctx_http_responses_total counter\n";
  for (const auto& [code, n] : http) out += fmt::format("longctx_http_responses_total{{code=\"{}\"}} {}\n", code, n);
  return out;
}

}  // namespace longctx::server

// metrics.h: GET /metrics: the server's counters and gauges in the Prometheus text format
// (requests, tokens, the queue, open sequences, KV cache use, prefill/decode throughput).
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "server/scheduler.h"

namespace longctx::server {

// HTTP responses by status code (all endpoints).
class HttpCounters {
 public:
  void count(int status) {
    std::lock_guard lk(mu_);
    ++by_status_[status];
  }
  std::map<int, int64_t> snapshot() const {
    std::lock_guard lk(mu_);
    return by_status_;
  }

 private:
  mutable std::mutex mu_;
  std::map<int, int64_t> by_status_;
};

std::string prometheus_text(const SchedulerStats& s, const std::map<int, int64_t>& http, const std::string& model_id);

}  // namespace longctx::server

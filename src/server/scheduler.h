// scheduler.h: continuous batching for the server. One engine thread owns the Engine and its
// SequenceBatch; HTTP threads only submit requests (into a bounded queue) and read their Channel.
// Each loop: drop cancelled requests, admit queued ones in arrival order while the KV budget has
// room (a request that can never run fails with 400 and its reason), then one batch step
// (every decoding sequence one token in one batched call, plus up to one chunk of prefill tokens).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "longctx/engine.h"
#include "server/channel.h"

namespace longctx::server {

struct SchedulerOptions {
  BatchOptions batch;
  int max_queue = 128;  // requests waiting for admission at most; more get 503
};

// A snapshot for /metrics and /health.
struct SchedulerStats {
  BatchStats batch;
  int64_t queued = 0;
  int64_t requests = 0, rejected = 0, cancelled = 0, finished = 0;
  int64_t prompt_tokens = 0, completion_tokens = 0;  // of admitted requests
  bool draining = false;
};

class Scheduler {
 public:
  Scheduler(Engine& eng, const SchedulerOptions& o);
  ~Scheduler();  // stops the engine thread (open requests are cancelled)
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Returns "" or why not (the queue is full, or the server is draining): 503.
  std::string submit(SequenceRequest r, std::shared_ptr<Channel> ch);
  // Wakes the engine thread (a channel was cancelled).
  void poke();
  // Stops admitting new requests; running and queued ones finish.
  void drain();
  // Whether nothing is queued or running.
  bool idle() const;
  SchedulerStats stats() const;

 private:
  struct Pending {
    SequenceRequest r;
    std::shared_ptr<Channel> ch;
  };
  void loop();
  void admit_queued();
  void drop_cancelled();

  Engine& eng_;
  SchedulerOptions opts_;
  std::unique_ptr<SequenceBatch> batch_;  // engine thread only
  std::map<int64_t, std::shared_ptr<Channel>> open_;  // engine thread only: sequence id -> channel

  mutable std::mutex mu_;  // guards the members below
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  SchedulerStats stats_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace longctx::server

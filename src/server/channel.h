// channel.h: what the engine thread hands one HTTP request: its admission, then its events
// (tokens, the end), or an error. The HTTP thread waits on it; either side may end it (the
// client gone: cancelled, which the engine thread sees at its next step and frees the sequence).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>

#include "longctx/engine.h"

namespace longctx::server {

class Channel {
 public:
  // Engine thread.
  void admit() { set([&] { admitted_ = true; }); }
  void push(SequenceEvent e) {
    set([&] {
      if (e.finished) finished_ = true;
      events_.push_back(std::move(e));
    });
  }
  void fail(int status, std::string message) {
    set([&] {
      status_ = status;
      error_ = std::move(message);
      finished_ = true;
    });
  }
  // HTTP thread: the client is gone (or the response is over); the engine thread frees the sequence.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

  // Waits up to `timeout` until admitted, failed or an event is there. Returns whether it is.
  bool wait_admitted(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return admitted_ || finished_; });
  }
  // Waits up to `timeout` for events; takes them all (empty on a timeout).
  std::deque<SequenceEvent> take(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, timeout, [&] { return !events_.empty() || (finished_ && !error_.empty()); });
    return std::exchange(events_, {});
  }
  // The error (status 0 when none).
  int error_status() const {
    std::lock_guard lk(mu_);
    return status_;
  }
  std::string error() const {
    std::lock_guard lk(mu_);
    return error_;
  }

 private:
  template <class F>
  void set(F f) {
    {
      std::lock_guard lk(mu_);
      f();
    }
    cv_.notify_all();
  }
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SequenceEvent> events_;
  bool admitted_ = false, finished_ = false;
  int status_ = 0;
  std::string error_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace longctx::server

// scheduler.cpp: see scheduler.h.
#include "server/scheduler.h"

#include <cstdio>
#include <exception>

#include "util/error.h"

namespace longctx::server {

namespace {
// HTTP statuses the engine thread gives a channel.
constexpr int kBadRequest = 400;
constexpr int kInternal = 500;
}  // namespace

Scheduler::Scheduler(Engine& eng, const SchedulerOptions& o) : eng_(eng), opts_(o) {
  batch_ = eng_.start_batch(opts_.batch);
  stats_.batch = batch_->stats();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string Scheduler::submit(SequenceRequest r, std::shared_ptr<Channel> ch) {
  {
    std::lock_guard lk(mu_);
    ++stats_.requests;
    if (stats_.draining || stop_) {
      ++stats_.rejected;
      return "the server is shutting down";
    }
    if (int64_t(queue_.size()) >= opts_.max_queue) {
      ++stats_.rejected;
      return fmt::format("the server is busy: {} requests are already waiting (--max-queue); retry later", queue_.size());
    }
    queue_.push_back({std::move(r), std::move(ch)});
    stats_.queued = int64_t(queue_.size());
  }
  cv_.notify_all();
  return {};
}

void Scheduler::poke() { cv_.notify_all(); }

void Scheduler::drain() {
  {
    std::lock_guard lk(mu_);
    stats_.draining = true;
  }
  cv_.notify_all();
}

bool Scheduler::idle() const {
  std::lock_guard lk(mu_);
  return queue_.empty() && stats_.batch.sequences == 0;
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

// Engine thread: frees the sequences whose client is gone, and drops such queued requests.
void Scheduler::drop_cancelled() {
  for (auto it = open_.begin(); it != open_.end();) {
    if (it->second->cancelled()) {
      batch_->close(it->first);
      it = open_.erase(it);
      std::lock_guard lk(mu_);
      ++stats_.cancelled;
    } else {
      ++it;
    }
  }
  std::lock_guard lk(mu_);
  std::erase_if(queue_, [&](const Pending& p) {
    if (!p.ch->cancelled()) return false;
    ++stats_.cancelled;
    return true;
  });
}

// Engine thread: opens queued requests in arrival order while they fit (the first that does not
// fit waits, so a large request is not starved by smaller ones behind it). The checks and the KV
// allocation run outside the lock: only this thread removes from the queue, and a deque keeps
// references to its front while HTTP threads push at the back.
void Scheduler::admit_queued() {
  for (;;) {
    Pending* p = nullptr;
    {
      std::lock_guard lk(mu_);
      if (queue_.empty()) break;
      p = &queue_.front();
    }
    bool admitted = false, rejected = false;
    if (const std::string why = batch_->check(p->r); !why.empty()) {
      p->ch->fail(kBadRequest, why);
      rejected = true;
    } else if (batch_->fits_now(p->r)) {
      try {
        open_[batch_->open(p->r)] = p->ch;
        p->ch->admit();
        admitted = true;
      } catch (const std::exception& e) {  // e.g. no memory for its KV cache
        p->ch->fail(kInternal, e.what());
        rejected = true;
      }
    }
    if (!admitted && !rejected) break;
    std::lock_guard lk(mu_);
    if (admitted) stats_.prompt_tokens += int64_t(p->r.prompt.size());
    if (rejected) ++stats_.rejected;
    queue_.pop_front();
    stats_.queued = int64_t(queue_.size());
  }
  const BatchStats st = batch_->stats();
  std::lock_guard lk(mu_);
  stats_.queued = int64_t(queue_.size());
  stats_.batch = st;
}

void Scheduler::loop() {
  const SequenceEventFn on_event = [&](const SequenceEvent& e) {
    auto it = open_.find(e.id);
    if (it == open_.end()) return false;
    const bool keep = !it->second->cancelled();
    {  // counted before the client can see the event (a test reads /metrics right after)
      std::lock_guard lk(mu_);
      if (e.token >= 0) ++stats_.completion_tokens;
      if (e.finished || !keep) ++(keep ? stats_.finished : stats_.cancelled);
    }
    if (keep) it->second->push(e);
    if (e.finished || !keep) open_.erase(it);
    return keep;
  };
  for (;;) {
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty() || !open_.empty(); });
      if (stop_) break;
    }
    drop_cancelled();
    admit_queued();
    if (open_.empty()) continue;
    try {
      batch_->step(on_event);
    } catch (const std::exception& e) {  // fail every open request; the server goes on
      std::fprintf(stderr, "longctx: serve: engine step failed: %s\n", e.what());
      for (auto& [id, ch] : open_) {
        batch_->close(id);
        ch->fail(kInternal, std::string("the engine failed: ") + e.what());
      }
      open_.clear();
    }
    std::lock_guard lk(mu_);
    stats_.batch = batch_->stats();
  }
  for (auto& [id, ch] : open_) {
    batch_->close(id);
    ch->fail(503, "the server stopped");
  }
  open_.clear();
  std::lock_guard lk(mu_);
  for (Pending& p : queue_) p.ch->fail(503, "the server stopped");
  queue_.clear();
  stats_.batch = batch_->stats();
}

}  // namespace longctx::server

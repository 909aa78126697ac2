// thread_pool.cpp: see thread_pool.h.
#include "util/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <memory>

namespace longctx {

namespace {
using Clock = std::chrono::steady_clock;
// How a thread waits: it spins (cheap to wake: decode issues hundreds of small ops per token)
// for at most spin_time, then sleeps; after yield_after it also yields the core every
// yield_every spins, so that a thread holding work gets the core back when threads outnumber free
// cores. A yield is a system call (~1-3 us) and may hand the core to another process, so it is
// kept for long waits when each thread has a core, and used at once when they do not.
struct WaitPolicy {
  std::chrono::microseconds spin_time, yield_after;
  int yield_every;
};
// Each thread has a core: spin longer than the gaps between the ops of a decode step (a sleeping
// worker costs a futex wake-up, tens of us in a VM), but not for long once the work has stopped.
constexpr WaitPolicy kOwnCore{std::chrono::microseconds(2000), std::chrono::microseconds(100), 1024};
// More threads than cores: spinning takes the core from a thread with work; wait briefly, yielding.
constexpr WaitPolicy kSharedCore{std::chrono::microseconds(50), std::chrono::microseconds(0), 64};
// Spins between two looks at the clock (a clock read costs ~0.1 us in a VM; a spin 10-100 ns).
constexpr int kSpinsPerCheck = 64;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until done() or until `limit` has passed (then returns done()), yielding as `w` says.
template <class Done>
bool spin_until(Done done, const WaitPolicy& w, Clock::duration limit) {
  const auto start = Clock::now();
  for (int i = 1;; ++i) {
    if (done()) return true;
    if (i % kSpinsPerCheck != 0) {
      cpu_relax();
      continue;
    }
    const auto waited = Clock::now() - start;
    if (waited >= limit) return done();
    if (waited >= w.yield_after && i % w.yield_every == 0) std::this_thread::yield();
  }
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  if (n_threads <= 0) n_threads = cores;
  oversubscribed_ = n_threads > cores;
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(uint32_t gen) {
  const Job& job = jobs_[gen & 1];
  while (true) {
    uint64_t t = ticket_.load(std::memory_order_acquire);
    if (uint32_t(t >> 32) != gen) return;  // a later call has started: not ours
    const int64_t c = int64_t(t & 0xffffffffu);
    if (c >= job.n_chunks) return;
    if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel)) continue;
    const int64_t b = c * job.chunk, e = std::min(job.n, b + job.chunk);
    try {
      (*job.fn)(b, e);
    } catch (...) {
      std::lock_guard lk(err_mu_);
      if (!error_) error_ = std::current_exception();
    }
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  while (true) {
    auto woken = [&] {
      return generation_.load(std::memory_order_acquire) != seen || stop_.load(std::memory_order_acquire);
    };
    const WaitPolicy& w = oversubscribed_ ? kSharedCore : kOwnCore;
    if (!spin_until(woken, w, w.spin_time)) {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_.load() || generation_.load() != seen; });
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    run_chunks(seen);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (workers_.empty() || n <= grain) {
    fn(0, n);
    return;
  }
  const int64_t want = std::min<int64_t>((n + grain - 1) / grain, int64_t(size()) * 4);
  const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
  Job& job = jobs_[gen & 1];
  job.fn = &fn;
  job.n = n;
  job.chunk = (n + want - 1) / want;
  job.n_chunks = (n + job.chunk - 1) / job.chunk;
  error_ = nullptr;
  done_.store(0, std::memory_order_relaxed);
  ticket_.store(uint64_t(gen) << 32, std::memory_order_release);
  {
    // Publish under the mutex so a worker about to sleep cannot miss the new generation.
    std::lock_guard lk(mu_);
    generation_.store(gen, std::memory_order_release);
  }
  cv_.notify_all();
  run_chunks(gen);
  // The other chunks are running on workers: wait, yielding now and then so that a worker that
  // lost its core gets it back.
  spin_until([&] { return done_.load(std::memory_order_acquire) >= job.n_chunks; },
             oversubscribed_ ? kSharedCore : kOwnCore, Clock::duration::max());
  if (error_) {
    auto err = error_;
    error_ = nullptr;
    std::rethrow_exception(err);
  }
}

namespace {
int g_threads = 0;
}
void set_num_threads(int n) { g_threads = n; }
ThreadPool& global_pool() {
  static ThreadPool pool(g_threads);
  return pool;
}

}  // namespace longctx

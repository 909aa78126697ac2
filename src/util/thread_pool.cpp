// thread_pool.cpp: see thread_pool.h.
#include "util/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <memory>

namespace longctx {

namespace {
using Clock = std::chrono::steady_clock;
// How long an idle worker spins before it sleeps: longer than the gap between two ops of a
// decode step, short enough not to steal a core for long from other processes.
constexpr auto kSpinTime = std::chrono::microseconds(50);
// How long a spinner spins before it also yields the core now and then: a yield is a system
// call (~1-3 us) and on a busy machine may hand the core to another process, so it is kept for
// waits long enough to suggest that a thread holding work has lost its core.
constexpr auto kYieldAfter = std::chrono::microseconds(20);
// Spins between two looks at the clock (a clock read costs ~0.1 us in a VM; a spin 10-100 ns).
constexpr int kSpinsPerCheck = 64;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until done() or `deadline` (then returns done()): pause only at first; after
// kYieldAfter, also yield the core every kSpinsPerCheck spins, so that when threads outnumber
// free cores (a busy machine, more threads than cores) the thread holding the work can run.
template <class Done>
bool spin_until(Done done, Clock::time_point deadline) {
  const auto yield_from = Clock::now() + kYieldAfter;
  bool yielding = false;
  for (int i = 1;; ++i) {
    if (done()) return true;
    if (i % kSpinsPerCheck != 0) {
      cpu_relax();
      continue;
    }
    const auto now = Clock::now();
    if (now >= deadline) return done();
    yielding = yielding || now >= yield_from;
    if (yielding) std::this_thread::yield();
  }
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
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
    if (!spin_until(woken, Clock::now() + kSpinTime)) {
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
  spin_until([&] { return done_.load(std::memory_order_acquire) >= job.n_chunks; }, Clock::time_point::max());
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

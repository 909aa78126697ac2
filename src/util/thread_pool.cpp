// thread_pool.cpp: see thread_pool.h.
#include "util/thread_pool.h"

#include <algorithm>
#include <memory>

namespace longctx {

namespace {
// Spin iterations before a worker sleeps (~50-100 us): longer than the gap between two ops of
// a decode step, short enough not to steal a core for long from other processes.
constexpr int kSpinIters = 20000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
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
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && !stop_.load(std::memory_order_acquire)) {
      if (++spins < kSpinIters) {
        cpu_relax();
        continue;
      }
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
  while (done_.load(std::memory_order_acquire) < job.n_chunks) cpu_relax();
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

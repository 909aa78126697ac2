// thread_pool.h: a fixed pool of worker threads and a blocking parallel_for.
//
// The CPU backend splits rows/heads across threads with parallel_for(n, fn(begin, end)).
// Work is split into contiguous chunks (at least `grain` items each), the caller's thread takes
// part, and the call returns when every chunk is done. Exceptions thrown by a chunk are
// re-thrown on the calling thread.
// Decode issues hundreds of small parallel_for calls per token, so idle workers spin (up to
// ~2 ms) before sleeping on a condition variable: a wake-up then costs ~1 us, not ~50. Spinning
// is bounded by time, not iterations (a `pause` costs 10 ns on one CPU and 100+ ns in a VM); a
// long wait also yields the core now and then, and a pool with more threads than cores spins only
// briefly and yields at once, so the threads holding work run instead of the spinners.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace longctx {

class ThreadPool {
 public:
  // n_threads <= 0: use std::thread::hardware_concurrency().
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, n) split into chunks of at least `grain` items.
  // Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

 private:
  struct Job {
    const std::function<void(int64_t, int64_t)>* fn = nullptr;
    int64_t n = 0, chunk = 1, n_chunks = 0;
  };
  void worker_loop();
  void run_chunks(uint32_t gen);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint32_t> generation_{0};  // bumped once per parallel_for; sleeping workers wait on it
  std::atomic<bool> stop_{false};
  // Chunks are claimed by CAS on ticket_ = (generation << 32) | next chunk index, so a worker
  // late from an earlier call can never take a chunk of the current one by mistake.
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int64_t> done_{0};  // chunks of the current call finished
  Job jobs_[2];                   // indexed by generation & 1
  std::mutex err_mu_;
  std::exception_ptr error_;
  bool oversubscribed_ = false;  // more threads than cores: wait briefly, yielding (thread_pool.cpp)
};

// The process-wide pool used by the CPU ops (created on first use, sized by set_num_threads).
ThreadPool& global_pool();
void set_num_threads(int n);  // call before the first global_pool() use to take effect

}  // namespace longctx

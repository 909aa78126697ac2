// thread_pool.h: a fixed pool of worker threads and a blocking parallel_for.
//
// The CPU backend splits rows/heads across threads with parallel_for(n, fn(begin, end)).
// Work is split into contiguous ranges (one per thread, or finer with `grain`), the caller's
// thread takes part, and the call returns when every range is done. Exceptions thrown by a
// range are re-thrown on the calling thread.
#pragma once
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
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

 private:
  void worker_loop();
  bool run_one_chunk();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t n_ = 0, chunk_ = 1, next_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

// The process-wide pool used by the CPU ops (created on first use, sized by set_num_threads).
ThreadPool& global_pool();
void set_num_threads(int n);  // call before the first global_pool() use to take effect

}  // namespace longctx

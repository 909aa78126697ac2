// thread_pool.cpp: see thread_pool.h.
#include "util/thread_pool.h"

#include <algorithm>
#include <memory>

namespace longctx {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

bool ThreadPool::run_one_chunk() {
  // Called with mu_ held; releases it while running the chunk.
  if (!job_ || next_ >= n_) return false;
  int64_t b = next_, e = std::min(n_, b + chunk_);
  next_ = e;
  auto* job = job_;
  mu_.unlock();
  std::exception_ptr err;
  try {
    (*job)(b, e);
  } catch (...) {
    err = std::current_exception();
  }
  mu_.lock();
  if (err && !error_) error_ = err;
  if (--pending_ == 0) cv_done_.notify_all();
  return true;
}

void ThreadPool::worker_loop() {
  std::unique_lock lk(mu_);
  uint64_t seen = 0;
  while (true) {
    cv_work_.wait(lk, [&] { return stop_ || (job_ && generation_ != seen && next_ < n_); });
    if (stop_) return;
    while (run_one_chunk()) {
    }
    seen = generation_;
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (workers_.empty() || n <= grain) {
    fn(0, n);
    return;
  }
  std::unique_lock lk(mu_);
  const int64_t n_chunks = std::min<int64_t>((n + grain - 1) / grain, int64_t(size()) * 4);
  job_ = &fn;
  n_ = n;
  chunk_ = (n + n_chunks - 1) / n_chunks;
  next_ = 0;
  pending_ = (n + chunk_ - 1) / chunk_;
  error_ = nullptr;
  ++generation_;
  cv_work_.notify_all();
  while (run_one_chunk()) {
  }
  cv_done_.wait(lk, [&] { return pending_ == 0; });
  job_ = nullptr;
  auto err = error_;
  error_ = nullptr;
  lk.unlock();
  if (err) std::rethrow_exception(err);
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

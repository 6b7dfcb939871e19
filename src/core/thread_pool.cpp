#include "core/thread_pool.h"

#include <algorithm>

namespace qwenrt {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run_chunks() {
  while (true) {
    int64_t begin;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      begin = next_chunk_;
      if (begin >= count_) return;
      next_chunk_ = begin + chunk_;
    }
    (*body_)(begin, std::min(count_, begin + chunk_));
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen_generation = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen_generation; });
      if (stopping_) return;
      seen_generation = generation_;
    }
    run_chunks();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--active_ == 0) work_done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t count, int64_t min_chunk,
                              const std::function<void(int64_t, int64_t)>& body) {
  if (count <= 0) return;
  int64_t threads = size();
  int64_t chunk = std::max<int64_t>(min_chunk, (count + threads * 4 - 1) / (threads * 4));
  if (workers_.empty() || chunk >= count) {
    body(0, count);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    body_ = &body;
    count_ = count;
    chunk_ = chunk;
    next_chunk_ = 0;
    active_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  work_ready_.notify_all();
  run_chunks();
  std::unique_lock<std::mutex> lock(mutex_);
  work_done_.wait(lock, [&] { return active_ == 0; });
  body_ = nullptr;
}

}  // namespace qwenrt

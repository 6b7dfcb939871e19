// A fixed pool of worker threads for the CPU backend's data-parallel loops.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace qwenrt {

class ThreadPool {
 public:
  // n_threads <= 0 picks the hardware concurrency.
  explicit ThreadPool(int n_threads);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls body(begin, end) over disjoint chunks covering [0, count), on all threads
  // (the caller included), and returns when every chunk is done. Chunks are at least
  // `min_chunk` long so tiny loops stay on one thread.
  void parallel_for(int64_t count, int64_t min_chunk,
                    const std::function<void(int64_t, int64_t)>& body);

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t count_ = 0;
  int64_t chunk_ = 0;
  int64_t next_chunk_ = 0;  // guarded by mutex_
  int active_ = 0;          // workers still inside the current job
  uint64_t generation_ = 0;
  bool stopping_ = false;
};

}  // namespace qwenrt

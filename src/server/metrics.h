// Prometheus counters and histograms of the server (text exposition format 0.0.4).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/scheduler.h"

namespace qwenrt::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  void write(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bound, plus +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  void count_request(const std::string& route, int status);
  void observe_time_to_first_token(double seconds);
  void observe_inter_token(double seconds);
  // A forward pass that sampled: its wall time, its work on the device, and (gap ≥ 0) the
  // engine thread's time since the pass before, when the two were consecutive and busy.
  void observe_step(double seconds, double device_seconds, double gap_seconds);
  // The text of /metrics, with the scheduler's gauges as they are now.
  std::string render(const SchedulerStats& scheduler, int active_requests) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  Histogram ttft_, itl_, step_, step_device_, step_gap_;
};

// The server's periodic line on stderr (serve's --log-stats-interval): what the engine did
// between two readings `seconds` apart, ending in a newline; "" where it did nothing and
// holds nothing (no tokens, no sequence running or waiting). Prefill counts the prompt
// tokens computed, not those the prefix cache gave.
//   stats running 12, waiting 0; prefill 1234.5 tok/s, generated 5678.9 tok/s; KV blocks 310 of 41000 held (0.8%), 1200 cached; prefix hits 50.0% of 40 blocks; preemptions 0
std::string stats_log_line(const SchedulerStats& now, const SchedulerStats& before, double seconds);

}  // namespace qwenrt::server

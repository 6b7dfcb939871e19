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

}  // namespace qwenrt::server

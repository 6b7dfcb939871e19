#include "server/metrics.h"

#include <cstdio>

namespace qwenrt::server {
namespace {

// Seconds: a step's wall time and its time on the device share one set of buckets.
const std::vector<double> kStepBuckets{0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.0125,
                                       0.015, 0.02,  0.03,  0.05,  0.1,  0.25};

std::string number(double value) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.9g", value);
  return text;
}

void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
         number(value) + "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::write(std::string& out, const std::string& name, const std::string& help) const {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += counts_.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  out += name + "_sum " + number(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0}),
      step_(kStepBuckets),
      step_device_(kStepBuckets),
      step_gap_({0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032}) {}

void Metrics::count_request(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{route, status}];
}

void Metrics::observe_time_to_first_token(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ttft_.observe(seconds);
}

void Metrics::observe_inter_token(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  itl_.observe(seconds);
}

void Metrics::observe_step(double seconds, double device_seconds, double gap_seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  step_.observe(seconds);
  step_device_.observe(device_seconds);
  if (gap_seconds >= 0) step_gap_.observe(gap_seconds);
}

std::string Metrics::render(const SchedulerStats& s, int active_requests) const {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out += "# HELP qwenrt_requests_total HTTP requests answered, by route and status\n";
    out += "# TYPE qwenrt_requests_total counter\n";
    for (const auto& [key, count] : requests_) {
      out += "qwenrt_requests_total{route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
             std::to_string(count) + "\n";
    }
    ttft_.write(out, "qwenrt_time_to_first_token_seconds", "time from request to its first generated token");
    itl_.write(out, "qwenrt_inter_token_seconds", "time between successive tokens of a choice");
    step_.write(out, "qwenrt_engine_step_seconds", "a forward pass that sampled, from its launch to its sampled ids (the last pass's events are delivered meanwhile)");
    step_device_.write(out, "qwenrt_engine_step_device_seconds",
                       "its work on the device, from the first op to the sampled ids");
    step_gap_.write(out, "qwenrt_engine_step_gap_seconds",
                    "the engine's thread between two consecutive forward passes: scheduling and staging");
  }
  metric(out, "qwenrt_prompt_tokens_total", "counter", "prompt tokens of started sequences",
         static_cast<double>(s.prompt_tokens));
  metric(out, "qwenrt_prompt_tokens_computed_total", "counter",
         "prompt tokens prefilled, again after a preemption (fewer than the prompt tokens where the prefix cache held some)",
         static_cast<double>(s.computed_prompt_tokens));
  metric(out, "qwenrt_generation_tokens_total", "counter", "generated tokens (as usage counts them)", static_cast<double>(s.generated_tokens));
  metric(out, "qwenrt_sequences_running", "gauge", "sequences in the running batch", s.running);
  metric(out, "qwenrt_sequences_waiting", "gauge", "sequences waiting to be admitted", s.waiting);
  metric(out, "qwenrt_requests_active", "gauge", "requests started and not finished", active_requests);
  metric(out, "qwenrt_kv_blocks_capacity", "gauge", "KV cache blocks in the pool", s.kv_blocks_total);
  metric(out, "qwenrt_kv_blocks_used", "gauge", "KV blocks held by sequences", s.kv_blocks_held);
  metric(out, "qwenrt_kv_blocks_cached", "gauge", "KV blocks kept only by the prefix cache (reclaimable)",
         s.kv_blocks_cached);
  metric(out, "qwenrt_kv_blocks_free", "gauge", "KV blocks free or reclaimable",
         s.kv_blocks_total - s.kv_blocks_held);
  metric(out, "qwenrt_prefix_cache_queries_total", "counter", "KV blocks looked up in the prefix cache",
         static_cast<double>(s.prefix_lookups));
  metric(out, "qwenrt_prefix_cache_hits_total", "counter", "KV blocks found in the prefix cache",
         static_cast<double>(s.prefix_hits));
  metric(out, "qwenrt_preemptions_total", "counter", "sequences preempted for lack of KV blocks",
         static_cast<double>(s.preemptions));
  metric(out, "qwenrt_engine_steps_total", "counter", "forward passes run", static_cast<double>(s.steps));
  return out;
}

std::string stats_log_line(const SchedulerStats& now, const SchedulerStats& before, double seconds) {
  const int64_t prompt = now.computed_prompt_tokens - before.computed_prompt_tokens;
  const int64_t generated = now.generated_tokens - before.generated_tokens;
  if (prompt == 0 && generated == 0 && now.running == 0 && now.waiting == 0) return "";
  const double span = seconds > 0 ? seconds : 1;
  const int64_t lookups = now.prefix_lookups - before.prefix_lookups;
  const int64_t hits = now.prefix_hits - before.prefix_hits;
  char line[512];
  std::snprintf(line, sizeof(line),
                "stats running %d, waiting %d; prefill %.1f tok/s, generated %.1f tok/s; KV blocks %d of %d held (%.1f%%), "
                "%d cached; prefix hits %.1f%% of %lld blocks; preemptions %lld\n",
                now.running, now.waiting, static_cast<double>(prompt) / span, static_cast<double>(generated) / span,
                now.kv_blocks_held, now.kv_blocks_total,
                now.kv_blocks_total > 0 ? 100.0 * now.kv_blocks_held / now.kv_blocks_total : 0.0, now.kv_blocks_cached,
                lookups > 0 ? 100.0 * static_cast<double>(hits) / static_cast<double>(lookups) : 0.0,
                static_cast<long long>(lookups), static_cast<long long>(now.preemptions - before.preemptions));
  return line;
}

}  // namespace qwenrt::server

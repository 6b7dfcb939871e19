#include "engine/stop_strings.h"

#include <algorithm>

namespace qwenrt {

StopMatcher::StopMatcher(std::vector<std::string> stops, bool include_stop)
    : stops_(std::move(stops)), include_stop_(include_stop) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

std::string StopMatcher::push(const std::string& text, bool armed) {
  if (stopped_) return {};
  const size_t old_size = pending_.size();
  pending_ += text;
  // Earliest complete match that ends in the new text wins (the held text before it was
  // searched when it came, or came unarmed).
  size_t best = std::string::npos;
  if (armed) {  // unarmed: none looked for
    for (const auto& stop : stops_) {
      const size_t from = old_size >= stop.size() ? old_size - stop.size() + 1 : 0;
      const size_t at = pending_.find(stop, from);
      if (at != std::string::npos && at < best) {
        best = at;
        matched_ = stop;
      }
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, best + (include_stop_ ? matched_.size() : 0));
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix of pending_ that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& stop : stops_) {
    size_t max_len = std::min(stop.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, stop, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(pending_);
  return stopped_ ? std::string() : out;
}

}  // namespace qwenrt

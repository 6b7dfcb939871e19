// Stop strings for streamed text: finds a stop string even when it spans tokens, and holds
// back text that could still turn out to begin one, so nothing past a stop is ever shown.
#pragma once

#include <string>
#include <vector>

namespace qwenrt {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Feeds newly decoded text; returns the part that is now safe to emit. After a stop
  // string is found, stopped() is true and the returned text ends right before it.
  std::string push(const std::string& text);
  // The held-back tail at the end of generation (empty once stopped).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that matched (empty if none).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // text not yet emitted
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace qwenrt

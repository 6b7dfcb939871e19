// Stop strings for streamed text: finds a stop string even when it spans tokens, and holds
// back text that could still turn out to begin one, so nothing past a stop is ever shown.
#pragma once

#include <string>
#include <vector>

namespace qwenrt {

class StopMatcher {
 public:
  // With include_stop, the text returned at a stop ends after it, not before (vLLM's
  // include_stop_str_in_output).
  explicit StopMatcher(std::vector<std::string> stops, bool include_stop = false);

  // Feeds newly decoded text; returns the part that is now safe to emit. After a stop
  // string is found, stopped() is true and the returned text ends right before it. A match
  // must end in `text`. Unarmed (the tokens before a request's min_tokens, as vLLM's), no
  // match is looked for, but a stop's possible start is still held back: a stop that begins
  // there and ends in armed text is found.
  std::string push(const std::string& text, bool armed = true);
  // The held-back tail at the end of generation (empty once stopped).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that matched (empty if none).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  bool include_stop_ = false;
  std::string pending_;  // text not yet emitted
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace qwenrt

// A rule over what a sequence may generate, applied draw by draw (structured output: a JSON
// grammar). The scheduler asks it for a mask before each draw of its sequence and tells it
// every id drawn; the engine gives every id the mask leaves out a logit no draw picks.
// Used on the stepping thread only.
#pragma once

#include <cstdint>
#include <span>

namespace qwenrt {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Writes the ids the next draw may pick into `mask` (token_mask_words(vocab) words, bit
  // id % 32 of word id / 32 set: allowed). False when this draw is free (mask untouched).
  virtual bool next_mask(std::span<uint32_t> mask) = 0;
  // The id drawn, for every sampled token in order.
  virtual void accept(int32_t id) = 0;
  // True once the text is complete and the id that ends it was drawn: the sequence stops.
  virtual bool ended() const = 0;
  // With ended(): the text ended unfinished, where its rule left no way on (a limit of the
  // grammar); the sequence is reported cut (as by max_tokens), not stopped.
  virtual bool cut() const { return false; }
  // With ended(): the id drawn last is no part of the text. The text was complete and its
  // rule let nothing follow, not even an end id (a model without one): the draw had no id to
  // pick, and the sequence stops where the text ended.
  virtual bool dropped_last() const { return false; }
};

}  // namespace qwenrt

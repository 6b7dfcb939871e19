// A JSON Schema `pattern` as an automaton over the UTF-8 bytes of a string's value.
//
// The pattern is an ECMA-262 regular expression (as JSON Schema specifies), read as with
// the `u` flag: it matches code points, and `\u{...}` and surrogate pairs spell code points
// beyond the BMP. JSON Schema does not anchor it: "abc" allows any string that contains
// "abc"; `^` and `$` anchor at the string's start and end. What it understands: literals,
// `.` (any code point but a line terminator), classes `[...]` and `[^...]` with ranges,
// `\d \D \w \W \s \S`, the character escapes (`\t \n \v \f \r \0 \cX \xHH \uHHHH \u{H...}`,
// an escaped syntax character), groups `(...)`, `(?:...)`, `(?<name>...)`, alternation, and
// the quantifiers `* + ? {n} {n,} {n,m}` (greedy or lazy: the same set of strings). What it
// refuses, by name: backreferences, lookaround, `\b`/`\B`, `\p{...}`, flags.
//
// The string's `minLength`/`maxLength` (in code points) are enforced with it: a step is taken
// only where some string that fits the pattern and the bounds still goes on from there, so a
// generation held to it never reaches a point where no string can be completed.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace qwenrt::structured {

inline constexpr int32_t kMaxPatternStates = 50000;  // automaton states of one pattern
inline constexpr int32_t kMaxPatternRepeat = 1000;   // the largest bound of {n,m}
// Automaton states listed by all the subsets built for one pattern: a bound on the time its
// compilation takes (~0.15 s on one core).
inline constexpr size_t kMaxPatternWork = size_t{1} << 22;
inline constexpr int32_t kMaxPatternLength = 1000000;  // the largest minLength/maxLength beside a pattern

// Thrown for a pattern that cannot be read or compiled; the message says why.
class PatternError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Where a string stands in its pattern: the automaton's state and the characters read so far
// (counted up to the length bound that matters).
class BytePattern {
 public:
  // The state and count after `byte` from `state`/`count` (0/0 at the start); false, both
  // unchanged, when no string that fits can follow.
  bool step(int32_t& state, int32_t& count, uint8_t byte) const {
    const int32_t to = transition(state, byte);
    if (to < 0) return false;
    int32_t after = count + ((byte & 0xC0) != 0x80 ? 1 : 0);
    if (max_length_ >= 0) {
      if (after > max_length_) return false;
    } else {
      after = std::min(after, min_length_);
    }
    if (!live(to, after)) return false;
    state = to;
    count = after;
    return true;
  }
  // True when reading more characters leaves `count` as it is (no maximum, the minimum met).
  bool count_saturated(int32_t count) const { return max_length_ < 0 && count >= min_length_; }
  // With a maximum and the minimum met, a step is taken exactly when the automaton has the
  // transition and the count after it plus the fewest characters from there to an accepting
  // state is within the maximum: `transition` (-1: none) and `fewest` give those parts, and
  // `room` what the maximum leaves (-1 where this does not hold).
  int32_t transition(int32_t state, uint8_t byte) const {
    return next_[static_cast<size_t>(state) * classes_ + byte_class_[byte]];
  }
  int32_t fewest(int32_t state) const { return fewest_[static_cast<size_t>(state)]; }
  int32_t room(int32_t count) const { return max_length_ >= 0 && count >= min_length_ ? max_length_ - count : -1; }
  int32_t max_length() const { return max_length_; }
  int32_t min_length() const { return min_length_; }
  // Without a maximum, under the minimum: a step is taken exactly when the automaton has the
  // transition and the count after it plus the most characters from there (INT32_MAX: no
  // bound) reaches the minimum.
  int32_t longest(int32_t state) const { return longest_[static_cast<size_t>(state)]; }
  bool accepting(int32_t state, int32_t count) const {
    return accepting_[static_cast<size_t>(state)] != 0 && count >= min_length_;
  }
  // Bit c: the control character U+00c (c < 32, which a JSON string escapes) may come next.
  uint32_t controls(int32_t state, int32_t count) const;
  int32_t states() const { return static_cast<int32_t>(accepting_.size()); }
  // True when the whole of `text` (UTF-8) fits.
  bool matches(std::string_view text) const;
  // The work its compilation took, in the units of kMaxPatternWork.
  size_t work() const { return work_; }
  // Unique to one compilation (copies share it): what caches of its results are keyed by.
  uint64_t id() const { return id_; }

 private:
  friend BytePattern compile_pattern(std::string_view pattern, int32_t min_length, int32_t max_length, size_t max_work);
  // Some string that fits goes on from `state` with `count` characters read.
  bool live(int32_t state, int32_t count) const {
    const auto r = static_cast<size_t>(state);
    if (count >= min_length_) return max_length_ < 0 || count + fewest_[r] <= max_length_;
    if (max_length_ < 0) return longest_[r] >= min_length_ - count;
    return (live_[r * words_ + static_cast<size_t>(count) / 64] >> (count % 64) & 1) != 0;
  }
  std::array<uint8_t, 256> byte_class_{};
  size_t classes_ = 1;
  std::vector<int32_t> next_;      // [state * classes_ + class]: -1 where no string can follow
  std::vector<uint8_t> accepting_;
  int32_t min_length_ = 0, max_length_ = -1;
  std::vector<int32_t> fewest_;    // [state]: the fewest characters from there to an accepting state
  std::vector<int32_t> longest_;   // [state]: the most (INT32_MAX: no bound)
  // With both bounds, for counts under the minimum: bit count of state (words_ a state).
  size_t words_ = 0;
  std::vector<uint64_t> live_;
  size_t work_ = 0;
  uint64_t id_ = 0;
};

// `pattern` (UTF-8) with the string's length bounds (max_length < 0: none). Throws
// PatternError when the pattern is not understood, too large, would take over `max_work` to
// compile, or no string fits it and the bounds together.
BytePattern compile_pattern(std::string_view pattern, int32_t min_length, int32_t max_length,
                            size_t max_work = kMaxPatternWork);

}  // namespace qwenrt::structured

// The values the sampler takes, one range a parameter, written once. The command line,
// generation_config.json's check and the scheduler use these; the server takes the same
// ranges but for the penalties, which it narrows to what OpenAI's API (and vLLM) accept.
#pragma once

#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>

#include "backend/backend.h"

namespace qwenrt {

struct ValueRange {
  double low;
  double high;    // infinity: no upper end (the value must still be finite)
  bool low_open;  // `low` itself is outside

  bool contains(double value) const {
    return std::isfinite(value) && (low_open ? value > low : value >= low) && value <= high;
  }
  bool bounded_below() const { return std::isfinite(low); }
  bool bounded_above() const { return std::isfinite(high); }

  // As a message finishes "must be ...": "in (0, 1]", "at least 0", "more than 0", "a finite number".
  std::string text() const {
    if (!bounded_below() && !bounded_above()) return "a finite number";
    if (!bounded_above()) return (low_open ? "more than " : "at least ") + number(low);
    return std::string("in ") + (low_open ? "(" : "[") + number(low) + ", " + number(high) + "]";
  }

  static std::string number(double value) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", value);
    return text;
  }
};

namespace sampling_range {

inline constexpr double kNoEnd = std::numeric_limits<double>::infinity();

// The ends keep the arithmetic finite and a banned token's probability 0: a banned logit
// (kBannedLogit, -1e30) over a temperature of 1e27 or more would be drawable again, and
// a logit divided by a repetition penalty of 1e-37 (or a penalty of 1e35 times a count)
// overflows. Past a temperature of 1,000 every allowed token is about as likely already.
inline constexpr ValueRange kTemperature{0, 1000, false};           // 0: greedy
inline constexpr ValueRange kTopK{0, kNoEnd, false};                // 0: off
inline constexpr ValueRange kTopP{0, 1, true};                      // 1: off
// generation_config.json's top_p, as transformers takes it: 0 keeps the most likely token alone.
inline constexpr ValueRange kFileTopP{0, 1, false};
inline constexpr ValueRange kMinP{0, 1, false};                     // 0: off
inline constexpr ValueRange kRepetitionPenalty{1e-4, 1e4, false};   // 1: off
inline constexpr ValueRange kPresencePenalty{-1e4, 1e4, false};     // 0: off
inline constexpr ValueRange kFrequencyPenalty{-1e4, 1e4, false};    // 0: off

// The server's narrower penalties: OpenAI documents [-2, 2] for presence and frequency;
// vLLM takes repetition in (0, 2].
inline constexpr ValueRange kApiPresencePenalty{-2, 2, false};
inline constexpr ValueRange kApiFrequencyPenalty{-2, 2, false};
inline constexpr ValueRange kApiRepetitionPenalty{0, 2, true};

}  // namespace sampling_range

// The first of `params`' values outside its range, as "'top_p' must be in (0, 1] (got 1.5)";
// nullopt when every one is inside.
inline std::optional<std::string> sampling_out_of_range(const SamplingParams& params) {
  namespace range = sampling_range;
  const struct {
    const char* name;
    const ValueRange& range;
    double value;
  } checks[] = {
      {"temperature", range::kTemperature, params.temperature},
      {"top_k", range::kTopK, static_cast<double>(params.top_k)},
      {"top_p", range::kTopP, params.top_p},
      {"min_p", range::kMinP, params.min_p},
      {"repetition_penalty", range::kRepetitionPenalty, params.repetition_penalty},
      {"presence_penalty", range::kPresencePenalty, params.presence_penalty},
      {"frequency_penalty", range::kFrequencyPenalty, params.frequency_penalty},
  };
  for (const auto& check : checks) {
    if (!check.range.contains(check.value)) {
      return std::string("'") + check.name + "' must be " + check.range.text() + " (got " +
             ValueRange::number(check.value) + ")";
    }
  }
  return std::nullopt;
}

}  // namespace qwenrt

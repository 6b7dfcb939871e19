// Helpers for the structured-output tests: a grammar from schema text, whether a text is a
// complete value of it, the bytes of an alphabet that a state takes, and where a token mask
// differs from stepping each token.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "structured/json_grammar.h"

namespace qwenrt::structured::testing {

inline std::shared_ptr<const Grammar> schema(const std::string& text) {
  return std::make_shared<const Grammar>(compile_json_schema(nlohmann::ordered_json::parse(text)));
}

// True when the whole text is a complete value of the grammar.
inline bool matches(const std::shared_ptr<const Grammar>& grammar, const std::string& text) {
  JsonMatcher matcher(grammar);
  MatchState state = matcher.start();
  return matcher.advance_all(state, text) && matcher.accepting(state);
}

// Each byte of `alphabet` that `state` takes, with the state after it.
inline std::vector<std::pair<char, MatchState>> ways_on(const JsonMatcher& matcher, const MatchState& state,
                                                        std::string_view alphabet) {
  std::vector<std::pair<char, MatchState>> ways;
  for (const char c : alphabet) {
    MatchState next;
    matcher.advance(state, static_cast<uint8_t>(c), next);
    if (!next.dead()) ways.emplace_back(c, std::move(next));
  }
  return ways;
}

// The first token whose bit in `mask` differs from stepping its bytes from `state` through
// the matcher (an empty token is never allowed); -1 where none does.
inline int32_t first_mask_difference(const std::vector<std::string>& tokens, const JsonMatcher& matcher,
                                     const MatchState& state, const std::vector<uint32_t>& mask) {
  for (size_t id = 0; id < tokens.size(); ++id) {
    MatchState probe = state;
    const bool expected = !tokens[id].empty() && matcher.advance_all(probe, tokens[id]);
    if ((((mask[id / 32] >> (id % 32)) & 1) != 0) != expected) return static_cast<int32_t>(id);
  }
  return -1;
}

}  // namespace qwenrt::structured::testing

// The tokens a grammar allows next, as a bitmask over the vocabulary.
//
// The vocabulary's byte strings are laid out once as a trie. A mask walks it depth first
// from the matcher's state, dropping a whole subtree at the first byte the matcher refuses,
// so a state that allows little (after a value: a comma, a bracket) costs a few hundred
// steps. Inside a free string almost every token is allowed. A token that is plain text
// (no quote, backslash or control byte; valid UTF-8 from the string's UTF-8 state) is
// allowed there exactly when its characters fit the string's room, so those tokens come
// from lists made once (per UTF-8 state: the plain tokens by their number of characters),
// and the walk for the stacks in such strings visits only the trie nodes with some token
// below that is not plain text: each node knows, for each UTF-8 state, whether every token
// below it is. Where a token closes one string and opens another, a plain subtree below
// that point is taken whole when its longest token fits the new string's room.
//
// Inside a string with a pattern, a token with no quote, backslash or control byte is
// allowed exactly when the pattern's automaton takes its bytes: those come from a walk of the
// trie that steps the automaton alone (a table lookup a byte, not a matcher step), kept per
// automaton state and count for the next draws, and the matcher walks only the nodes with
// some token below that has such a byte.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "structured/json_grammar.h"

namespace qwenrt {
class Tokenizer;
}

namespace qwenrt::structured {

// Token `id`'s bit in a mask (32 ids a word), set or cleared; ids outside it are ignored.
inline void allow_token(std::span<uint32_t> mask, int32_t id) {
  const auto word = static_cast<size_t>(id) / 32;
  if (id >= 0 && word < mask.size()) mask[word] |= 1u << (static_cast<uint32_t>(id) % 32);
}
inline void refuse_token(std::span<uint32_t> mask, int32_t id) {
  const auto word = static_cast<size_t>(id) / 32;
  if (id >= 0 && word < mask.size()) mask[word] &= ~(1u << (static_cast<uint32_t>(id) % 32));
}

class Vocabulary {
 public:
  // The tokenizer's ordinary tokens (added tokens such as <think> or <|im_end|> are never
  // text a grammar matches; end tokens are given to the mask separately).
  explicit Vocabulary(const Tokenizer& tokenizer);
  // For tests: token i is tokens[i] (empty: not text).
  explicit Vocabulary(const std::vector<std::string>& tokens);

  // Sets in `mask` (cleared first; 32 ids a word) every token whose bytes `matcher` takes
  // from `state`. Returns how many trie nodes were stepped (for measurements).
  size_t fill(const JsonMatcher& matcher, const MatchState& state, std::span<uint32_t> mask) const;
  // Token ids made only of whitespace bytes, shortest first.
  const std::vector<int32_t>& whitespace_tokens() const { return whitespace_; }
  std::string_view bytes(int32_t id) const;

 private:
  struct Node {
    int32_t first_child = -1, next_sibling = -1;
    int32_t token = -1;            // the token these bytes spell, if any
    int32_t begin = 0, end = 0;    // this subtree's tokens: order_[begin, end)
    uint8_t byte = 0;
    uint8_t plain = 0;             // bit s: every token below is plain text from UTF-8 state s
    uint16_t chars = 0;            // most characters a token below adds (saturating)
    uint8_t text = 0;              // 1: no token below has a quote, backslash or control byte past here
  };
  void build(const std::vector<std::string>& tokens);
  // `utf8`: with the stacks of one free string group, the UTF-8 state after the path so far
  // while it is plain text from the group's state (-1: not, or not such a group).
  struct WalkCount {
    size_t steps = 0;  // trie nodes stepped
    size_t most = 0;   // the most stacks a state of the walk held
  };
  // `text_only`: with the stacks of one pattern string's group, the path so far has no
  // quote, backslash or control byte (the subtrees of such text are the pattern walk's).
  void walk(const JsonMatcher& matcher, int32_t node, const MatchState& state, int depth, int utf8, bool text_only,
            std::span<uint32_t> mask, WalkCount& count) const;
  // Sets the tokens with no quote, backslash or control byte whose bytes `pattern` takes
  // from `state` with `count` characters read.
  void allow_pattern(const BytePattern& pattern, int32_t state, int32_t count, std::span<uint32_t> mask) const;
  void pattern_walk(const BytePattern& pattern, int32_t node, int32_t state, int32_t count, int depth,
                    std::span<uint32_t> mask) const;
  // The same for every count at once: each token the automaton takes, with the room it needs
  // (`by_room`: a maximum, the minimum met) or the least count (no maximum, under the
  // minimum), after `chars` characters.
  void need_walk(const BytePattern& pattern, int32_t node, int32_t state, int depth, int32_t chars, int32_t need,
                 bool by_room, std::vector<std::pair<int32_t, int32_t>>& out) const;
  // The end of the tokens spelled by exactly the bytes down to `node` (at `depth`), which
  // come first in its run of order_.
  int32_t spelled_end(const Node& node, int depth) const;
  // Sets the tokens that are plain text from UTF-8 state `utf8` with at most `room` characters.
  void allow_plain(int utf8, int32_t room, std::span<uint32_t> mask) const;

  uint64_t id_ = 0;  // unique to this vocabulary (keys its cached pattern masks)
  std::vector<Node> nodes_;
  std::vector<int32_t> order_;  // token ids, depth-first
  std::vector<std::string> tokens_;
  std::vector<int32_t> whitespace_;
  size_t max_length_ = 0;  // bytes of the longest token
  // For each UTF-8 state: the tokens that are plain text from it, fewest characters first;
  // plain_fit_[s][c] is how many of them have at most c characters (c up to the most any has),
  // and plain_all_[s] all of them as a mask.
  std::array<std::vector<int32_t>, kUtf8States> plain_;
  std::array<std::vector<int32_t>, kUtf8States> plain_fit_;
  std::array<std::vector<uint32_t>, kUtf8States> plain_all_;
};

}  // namespace qwenrt::structured

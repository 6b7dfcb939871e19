// The tokens a grammar allows next, as a bitmask over the vocabulary.
//
// The vocabulary's byte strings are laid out once as a trie. A mask walks it depth first
// from the matcher's state, dropping a whole subtree at the first byte the matcher refuses,
// so a state that allows little (after a value: a comma, a bracket) costs a few hundred
// steps. Inside a free string almost every token is allowed: there each trie node knows,
// for each UTF-8 state, whether every token below it is plain text (no quote, backslash or
// control byte; valid UTF-8 from that state), and such a subtree is taken whole from a
// list of its token ids, without stepping the matcher through it.
#pragma once

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
  };
  void build(const std::vector<std::string>& tokens);
  void walk(const JsonMatcher& matcher, int32_t node, const MatchState& state, int depth,
            std::span<uint32_t> mask, size_t& steps) const;

  std::vector<Node> nodes_;
  std::vector<int32_t> order_;  // token ids, depth-first
  std::vector<std::string> tokens_;
  std::vector<int32_t> whitespace_;
  size_t max_length_ = 0;  // bytes of the longest token
};

}  // namespace qwenrt::structured

#include "structured/token_mask.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <numeric>
#include <unordered_map>

#include "tokenizer/tokenizer.h"

namespace qwenrt::structured {

namespace {

std::vector<std::string> ordinary_tokens(const Tokenizer& tokenizer) {
  std::vector<std::string> tokens(static_cast<size_t>(tokenizer.vocab_size()));
  std::vector<uint8_t> added(tokens.size(), 0);
  for (const AddedToken& token : tokenizer.added_tokens()) {
    if (token.id >= 0 && static_cast<size_t>(token.id) < added.size()) added[static_cast<size_t>(token.id)] = 1;
  }
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (added[id] == 0) tokens[id] = std::string(tokenizer.token_bytes(static_cast<int32_t>(id)));
  }
  return tokens;
}

thread_local std::vector<MatchState> scratch;

// A byte a string's content never holds as itself (JSON's syntax inside a string).
bool syntax_byte(uint8_t byte) { return byte == '"' || byte == '\\' || byte < 0x20; }

// The text tokens a pattern takes from a (state, count), kept for every thread and every
// sequence: a string's next draws mostly return to states met before, and sequences of one
// grammar (a request's choices; requests with the same schema, which share its compiled
// grammar) meet the same ones. Where the count decides only through the fewest or the most
// characters still to come, one list serves every count: the tokens the automaton takes
// from the state, each with the room (count -1) or the least count (count -2) it needs, in
// that order; else a mask for the one count. Immutable once kept.
struct PatternMask {
  std::vector<uint32_t> bits;
  std::vector<std::pair<int32_t, int32_t>> needs;  // (room or count needed, token)
  size_t bytes() const { return bits.size() * sizeof(uint32_t) + needs.size() * sizeof(needs[0]) + 64; }
};

struct PatternMaskKey {
  uint64_t vocabulary = 0, pattern = 0;  // ids no other vocabulary or automaton ever has
  int32_t state = 0, count = 0;
  bool operator==(const PatternMaskKey&) const = default;
};

struct PatternMaskKeyHash {
  size_t operator()(const PatternMaskKey& key) const {
    uint64_t h = key.vocabulary * 0x9e3779b97f4a7c15ull ^ key.pattern;
    h = h * 0xbf58476d1ce4e5b9ull ^ (static_cast<uint64_t>(static_cast<uint32_t>(key.state)) << 32 |
                                     static_cast<uint32_t>(key.count));
    return static_cast<size_t>(h ^ (h >> 31));
  }
};

// Up to kPatternMaskBytesKept of them, the oldest dropped first. Looked up and added under a
// lock; built outside it.
constexpr size_t kPatternMaskBytesKept = size_t{64} << 20;
struct PatternMasks {
  std::mutex mutex;
  std::unordered_map<PatternMaskKey, std::shared_ptr<const PatternMask>, PatternMaskKeyHash> kept;
  std::deque<PatternMaskKey> order;  // oldest first
  size_t bytes = 0;

  std::shared_ptr<const PatternMask> find(const PatternMaskKey& key) {
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = kept.find(key);
    return it != kept.end() ? it->second : nullptr;
  }
  // The mask kept for `key`: `mask` unless another thread kept one first.
  std::shared_ptr<const PatternMask> keep(const PatternMaskKey& key, std::shared_ptr<const PatternMask> mask) {
    std::lock_guard<std::mutex> lock(mutex);
    const auto [it, added] = kept.emplace(key, mask);
    if (!added) return it->second;
    order.push_back(key);
    bytes += mask->bytes();
    while (bytes > kPatternMaskBytesKept && order.size() > 1) {
      const auto old = kept.find(order.front());
      bytes -= old->second->bytes();
      kept.erase(old);
      order.pop_front();
    }
    return mask;
  }
};

PatternMasks& pattern_masks() {
  static PatternMasks masks;
  return masks;
}

constexpr size_t kMostPairsChecked = 1024;

// True when `pattern` from `state` at a character's start takes every text (no quote,
// backslash or control byte; valid UTF-8) without its count changing what may follow: no
// maxLength and minLength already met, and every byte of any such text leads to a live
// state (an unanchored pattern before its match, `.*`, a match already made). Then every
// plain token is allowed. Looked for over at most kMostPairsChecked (state, UTF-8 state)
// pairs; false past them.
bool takes_all_text(const BytePattern& pattern, int32_t state, int32_t count) {
  if (!pattern.count_saturated(count)) return false;
  std::vector<std::pair<int32_t, int>> work = {{state, 0}};
  std::vector<std::pair<int32_t, int>> seen = work;
  while (!work.empty()) {
    const auto [at, utf8] = work.back();
    work.pop_back();
    for (int b = 0x20; b < 0x100; ++b) {
      const int next_utf8 = plain_string_byte(utf8, static_cast<uint8_t>(b));
      if (next_utf8 < 0) continue;
      int32_t next = at, read = count;
      if (!pattern.step(next, read, static_cast<uint8_t>(b))) return false;
      const std::pair<int32_t, int> pair{next, next_utf8};
      if (std::find(seen.begin(), seen.end(), pair) != seen.end()) continue;
      if (seen.size() >= kMostPairsChecked) return false;
      seen.push_back(pair);
      work.push_back(pair);
    }
  }
  return true;
}

}  // namespace

Vocabulary::Vocabulary(const Tokenizer& tokenizer) { build(ordinary_tokens(tokenizer)); }
Vocabulary::Vocabulary(const std::vector<std::string>& tokens) { build(tokens); }

std::string_view Vocabulary::bytes(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < tokens_.size() ? std::string_view(tokens_[static_cast<size_t>(id)])
                                                               : std::string_view();
}

void Vocabulary::build(const std::vector<std::string>& tokens) {
  static std::atomic<uint64_t> built{0};
  id_ = ++built;
  tokens_ = tokens;
  std::vector<int32_t> sorted;
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!tokens[id].empty()) sorted.push_back(static_cast<int32_t>(id));
  }
  std::sort(sorted.begin(), sorted.end(), [&](int32_t x, int32_t y) {
    return tokens[static_cast<size_t>(x)] < tokens[static_cast<size_t>(y)] ||
           (tokens[static_cast<size_t>(x)] == tokens[static_cast<size_t>(y)] && x < y);
  });
  order_ = sorted;
  // Sorted, the tokens below a trie node are one run of `order_`: the trie is built in one
  // pass, each token adding the nodes past its common prefix with the one before.
  nodes_.assign(1, Node{});
  nodes_[0].begin = 0;
  std::vector<int32_t> path = {0};  // path[d]: the node at depth d of the last token
  std::vector<int32_t> last_child = {-1};
  const std::string* previous = nullptr;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const std::string& text = tokens[static_cast<size_t>(sorted[i])];
    size_t common = 0;
    if (previous != nullptr) {
      while (common < previous->size() && common < text.size() && (*previous)[common] == text[common]) ++common;
    }
    while (path.size() > common + 1) {
      nodes_[static_cast<size_t>(path.back())].end = static_cast<int32_t>(i);
      path.pop_back();
      last_child.pop_back();
    }
    for (size_t d = common; d < text.size(); ++d) {
      const auto id = static_cast<int32_t>(nodes_.size());
      Node node;
      node.byte = static_cast<uint8_t>(text[d]);
      node.begin = static_cast<int32_t>(i);
      nodes_.push_back(node);
      const int32_t parent = path.back();
      if (last_child.back() < 0) nodes_[static_cast<size_t>(parent)].first_child = id;
      else nodes_[static_cast<size_t>(last_child.back())].next_sibling = id;
      last_child.back() = id;
      path.push_back(id);
      last_child.push_back(-1);
    }
    max_length_ = std::max(max_length_, text.size());
    Node& at = nodes_[static_cast<size_t>(path.back())];
    if (at.token < 0) at.token = sorted[i];
    previous = &text;
  }
  while (!path.empty()) {
    nodes_[static_cast<size_t>(path.back())].end = static_cast<int32_t>(sorted.size());
    path.pop_back();
  }
  // Children have larger indices than their parents: one backward pass settles `plain`.
  for (size_t n = nodes_.size(); n-- > 0;) {
    Node& node = nodes_[n];
    uint8_t plain = 0xFF;
    uint8_t text = 1;
    int chars = 0;
    for (int32_t c = node.first_child; c >= 0; c = nodes_[static_cast<size_t>(c)].next_sibling) {
      const Node& child = nodes_[static_cast<size_t>(c)];
      if (syntax_byte(child.byte) || child.text == 0) text = 0;
      // A character starts at every byte but a continuation byte.
      chars = std::max(chars, child.chars + ((child.byte & 0xC0) != 0x80 ? 1 : 0));
      for (int s = 0; s < kUtf8States; ++s) {
        const int next = plain_string_byte(s, child.byte);
        if (next < 0 || ((child.plain >> next) & 1) == 0) plain = static_cast<uint8_t>(plain & ~(1u << s));
      }
    }
    node.plain = plain;
    node.text = text;
    node.chars = static_cast<uint16_t>(std::min(chars, 0xFFFF));
  }
  // The plain tokens of each UTF-8 state, by their characters (a character starts at every
  // byte but a continuation byte, as a string frame counts them).
  const size_t words = (tokens.size() + 31) / 32;
  for (int s = 0; s < kUtf8States; ++s) {
    std::vector<std::pair<int32_t, int32_t>> plain;  // (characters, id)
    for (size_t id = 0; id < tokens.size(); ++id) {
      const std::string& text = tokens[id];
      if (text.empty()) continue;
      int state = s, chars = 0;
      for (const char c : text) {
        const auto byte = static_cast<uint8_t>(c);
        chars += (byte & 0xC0) != 0x80 ? 1 : 0;
        if ((state = plain_string_byte(state, byte)) < 0) break;
      }
      if (state >= 0) plain.emplace_back(chars, static_cast<int32_t>(id));
    }
    std::sort(plain.begin(), plain.end());
    const int32_t most = plain.empty() ? 0 : plain.back().first;
    plain_fit_[s].assign(static_cast<size_t>(most) + 1, 0);
    plain_all_[s].assign(words, 0u);
    for (const auto& [chars, id] : plain) {
      plain_[s].push_back(id);
      ++plain_fit_[s][static_cast<size_t>(chars)];
      allow_token(plain_all_[s], id);
    }
    for (size_t c = 1; c < plain_fit_[s].size(); ++c) plain_fit_[s][c] += plain_fit_[s][c - 1];
  }
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string& text = tokens[id];
    if (!text.empty() && text.size() <= 8 &&
        std::all_of(text.begin(), text.end(), [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; })) {
      whitespace_.push_back(static_cast<int32_t>(id));
    }
  }
  std::stable_sort(whitespace_.begin(), whitespace_.end(), [&](int32_t x, int32_t y) {
    return tokens[static_cast<size_t>(x)].size() < tokens[static_cast<size_t>(y)].size();
  });
}

int32_t Vocabulary::spelled_end(const Node& node, int depth) const {
  int32_t i = node.begin;
  while (i < node.end && tokens_[static_cast<size_t>(order_[static_cast<size_t>(i)])].size() == static_cast<size_t>(depth) + 1) ++i;
  return i;
}

void Vocabulary::allow_plain(int utf8, int32_t room, std::span<uint32_t> mask) const {
  const std::vector<int32_t>& fit = plain_fit_[static_cast<size_t>(utf8)];
  if (room < 0) return;
  if (static_cast<size_t>(room) + 1 >= fit.size()) {
    const std::vector<uint32_t>& all = plain_all_[static_cast<size_t>(utf8)];
    for (size_t w = 0; w < mask.size() && w < all.size(); ++w) mask[w] |= all[w];
    return;
  }
  const std::vector<int32_t>& ids = plain_[static_cast<size_t>(utf8)];
  for (int32_t i = 0; i < fit[static_cast<size_t>(room)]; ++i) allow_token(mask, ids[static_cast<size_t>(i)]);
}

size_t Vocabulary::fill(const JsonMatcher& matcher, const MatchState& state, std::span<uint32_t> mask) const {
  std::fill(mask.begin(), mask.end(), 0u);
  if (state.dead()) return 0;
  // One state a depth, sized before the walk: its frames hold references into it.
  if (scratch.size() < max_length_ + 2) scratch.resize(max_length_ + 2);
  // The stacks inside free strings, grouped by their UTF-8 state: the plain tokens that fit
  // the group's largest room come from the lists, and the group's walk skips every subtree
  // of plain text. The other stacks are walked together.
  thread_local std::array<MatchState, kUtf8States> groups;
  thread_local MatchState rest;
  // The stacks inside strings with patterns, grouped by their automaton's state and count.
  struct PatternGroup {
    const BytePattern* pattern = nullptr;
    int32_t state = 0, count = 0;
    MatchState stacks;
  };
  thread_local std::vector<PatternGroup> patterned;
  size_t pattern_groups = 0;
  std::array<int32_t, kUtf8States> room{};
  for (MatchState& group : groups) group.clear();
  rest.clear();
  for (const Stack& stack : state.stacks()) {
    int32_t fits = 0, automaton = 0, read = 0;
    if (const BytePattern* pattern = matcher.pattern_string(stack, automaton, read); pattern != nullptr) {
      size_t g = 0;
      while (g < pattern_groups && !(patterned[g].pattern->id() == pattern->id() && patterned[g].state == automaton &&
                                     patterned[g].count == read)) {
        ++g;
      }
      if (g == pattern_groups) {
        if (patterned.size() == g) patterned.emplace_back();
        patterned[g].pattern = pattern;
        patterned[g].state = automaton;
        patterned[g].count = read;
        patterned[g].stacks.clear();
        ++pattern_groups;
      }
      add_stack(patterned[g].stacks, stack);
      continue;
    }
    const int utf8 = matcher.free_string(stack, fits);
    if (utf8 < 0) {
      add_stack(rest, stack);
    } else {
      const auto s = static_cast<size_t>(utf8);
      room[s] = groups[s].dead() ? fits : std::max(room[s], fits);
      add_stack(groups[s], stack);
    }
  }
  // Walked apart, the parts' states are together what one walk of the whole state would
  // hold, as long as no state would have held more than kMaxAlternatives stacks (a state
  // drops the stacks past that: which ones depends on what else it holds). Where the parts'
  // largest states add up to more, the mask is made again by one walk of the whole state.
  size_t parts = 0, most = 0;
  WalkCount count;
  const auto walk_part = [&](const MatchState& part_state, int utf8, bool text_only) {
    WalkCount part{0, part_state.count};
    walk(matcher, 0, part_state, 0, utf8, text_only, mask, part);
    count.steps += part.steps;
    most += part.most;
    ++parts;
  };
  for (int s = 0; s < kUtf8States; ++s) {
    if (groups[static_cast<size_t>(s)].dead()) continue;
    allow_plain(s, room[static_cast<size_t>(s)], mask);
    walk_part(groups[static_cast<size_t>(s)], s, false);
  }
  for (size_t g = 0; g < pattern_groups; ++g) {
    allow_pattern(*patterned[g].pattern, patterned[g].state, patterned[g].count, mask);
    walk_part(patterned[g].stacks, -1, true);
  }
  if (!rest.dead()) walk_part(rest, -1, false);
  if (parts > 1 && most > static_cast<size_t>(kMaxAlternatives)) {
    std::fill(mask.begin(), mask.end(), 0u);
    walk(matcher, 0, state, 0, -1, false, mask, count);
  }
  return count.steps;
}

void Vocabulary::allow_pattern(const BytePattern& pattern, int32_t state, int32_t count, std::span<uint32_t> mask) const {
  // A list for every count (each token with the least count, or the most room, it needs)
  // where the count decides by `fewest` (a maximum, the minimum met) or by `longest` (no
  // maximum, the minimum not met); else one mask for this count.
  const int32_t room = pattern.room(count);
  const bool floors = pattern.max_length() < 0 && !pattern.count_saturated(count);
  const PatternMaskKey key{id_, pattern.id(), state, room >= 0 ? -1 : floors ? -2 : count};
  std::shared_ptr<const PatternMask> found = pattern_masks().find(key);
  if (found == nullptr) {
    auto built = std::make_shared<PatternMask>();
    if (room >= 0 || floors) {
      need_walk(pattern, 0, state, 0, 0, INT32_MIN, room >= 0, built->needs);
      std::sort(built->needs.begin(), built->needs.end());
    } else {
      // Sized by the vocabulary, whatever the mask: the bits are kept for later masks.
      built->bits.assign((tokens_.size() + 31) / 32, 0u);
      if (takes_all_text(pattern, state, count)) {
        allow_plain(0, INT32_MAX, built->bits);
      } else {
        pattern_walk(pattern, 0, state, count, 0, built->bits);
      }
    }
    found = pattern_masks().keep(key, std::move(built));
  }
  if (room >= 0 || floors) {
    const int32_t limit = room >= 0 ? room : count;
    for (const auto& [need, id] : found->needs) {
      if (need > limit) break;
      allow_token(mask, id);
    }
    return;
  }
  for (size_t w = 0; w < mask.size() && w < found->bits.size(); ++w) mask[w] |= found->bits[w];
}

void Vocabulary::need_walk(const BytePattern& pattern, int32_t at, int32_t state, int depth, int32_t chars, int32_t need,
                           bool by_room, std::vector<std::pair<int32_t, int32_t>>& out) const {
  for (int32_t c = nodes_[static_cast<size_t>(at)].first_child; c >= 0; c = nodes_[static_cast<size_t>(c)].next_sibling) {
    const Node& child = nodes_[static_cast<size_t>(c)];
    if (syntax_byte(child.byte)) continue;
    const int32_t next = pattern.transition(state, child.byte);
    if (next < 0) continue;
    const int32_t read = chars + ((child.byte & 0xC0) != 0x80 ? 1 : 0);
    int32_t needed = 0;
    if (by_room) {
      // The room: the characters read plus the fewest still to come, at the most.
      needed = std::max(need, read + pattern.fewest(next));
      if (needed > pattern.max_length()) continue;  // no count leaves that much room
    } else {
      // The count: at least the minimum less the characters read and the most still to come.
      const int64_t longest = pattern.longest(next);
      needed = std::max<int32_t>(need, static_cast<int32_t>(std::max<int64_t>(
                                           int64_t{pattern.min_length()} - read - longest, INT32_MIN + 1)));
      if (needed >= pattern.min_length()) continue;  // no count under the minimum is that large
    }
    const int32_t spelled = spelled_end(child, depth);
    for (int32_t i = child.begin; i < spelled; ++i) out.emplace_back(needed, order_[static_cast<size_t>(i)]);
    if (child.first_child >= 0) need_walk(pattern, c, next, depth + 1, read, needed, by_room, out);
  }
}

void Vocabulary::pattern_walk(const BytePattern& pattern, int32_t at, int32_t state, int32_t count, int depth,
                              std::span<uint32_t> mask) const {
  for (int32_t c = nodes_[static_cast<size_t>(at)].first_child; c >= 0; c = nodes_[static_cast<size_t>(c)].next_sibling) {
    const Node& child = nodes_[static_cast<size_t>(c)];
    if (syntax_byte(child.byte)) continue;
    int32_t next = state, read = count;
    if (!pattern.step(next, read, child.byte)) continue;
    const int32_t spelled = spelled_end(child, depth);
    for (int32_t i = child.begin; i < spelled; ++i) allow_token(mask, order_[static_cast<size_t>(i)]);
    if (child.first_child >= 0) pattern_walk(pattern, c, next, read, depth + 1, mask);
  }
}

void Vocabulary::walk(const JsonMatcher& matcher, int32_t at, const MatchState& state, int depth, int utf8,
                      bool text_only, std::span<uint32_t> mask, WalkCount& count) const {
  for (int32_t c = nodes_[static_cast<size_t>(at)].first_child; c >= 0; c = nodes_[static_cast<size_t>(c)].next_sibling) {
    const Node& child = nodes_[static_cast<size_t>(c)];
    const int after = utf8 >= 0 ? plain_string_byte(utf8, child.byte) : -1;
    // Every token below is plain text from the group's string: the lists gave those that fit.
    if (after >= 0 && ((child.plain >> after) & 1) != 0) continue;
    // Every token below is text for the group's pattern: its walk gave those it takes.
    const bool text = text_only && !syntax_byte(child.byte);
    if (text && child.text != 0) continue;
    MatchState& next = scratch[static_cast<size_t>(depth) + 1];
    matcher.advance(state, child.byte, next);
    ++count.steps;
    count.most = std::max(count.most, next.count);
    if (next.dead()) continue;
    // Tokens spelled by exactly these bytes come first in the subtree's run.
    const int32_t spelled = spelled_end(child, depth);
    for (int32_t i = child.begin; i < spelled; ++i) allow_token(mask, order_[static_cast<size_t>(i)]);
    if (child.first_child < 0) continue;
    // A stack in a free string with room for the subtree's longest token takes it whole.
    bool whole = false;
    for (const Stack& stack : next.stacks()) {
      int32_t room = 0;
      const int string_state = matcher.free_string(stack, room);
      if (string_state >= 0 && ((child.plain >> string_state) & 1) != 0 && child.chars <= room) {
        whole = true;
        break;
      }
    }
    if (whole) {
      for (int32_t i = spelled; i < child.end; ++i) allow_token(mask, order_[static_cast<size_t>(i)]);
      continue;
    }
    walk(matcher, c, next, depth + 1, after, text, mask, count);
    // `next` (scratch[depth + 1]) is reused by the next sibling: the call above used deeper slots only.
  }
}

}  // namespace qwenrt::structured

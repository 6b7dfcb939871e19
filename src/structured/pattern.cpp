#include "structured/pattern.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <deque>
#include <map>
#include <string>
#include <utility>

namespace qwenrt::structured {

namespace {

constexpr uint32_t kMaxCode = 0x10FFFF;
constexpr size_t kMaxNfaStates = 100000;
constexpr int kMaxGroupDepth = 100;

// ---- sets of code points ----

// Sorted, disjoint, non-adjacent ranges of code points; surrogates (U+D800-U+DFFF, which no
// UTF-8 text holds) left out.
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges normalized(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges merged;
  for (const auto& [lo, hi] : r) {
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.emplace_back(lo, hi);
    }
  }
  Ranges out;
  for (const auto& [lo, hi] : merged) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      out.emplace_back(lo, hi);
      continue;
    }
    if (lo < 0xD800) out.emplace_back(lo, 0xD7FF);
    if (hi > 0xDFFF) out.emplace_back(0xE000, hi);
  }
  return out;
}

Ranges complement(const Ranges& set) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : normalized(set)) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCode) out.emplace_back(next, kMaxCode);
  return normalized(out);
}

Ranges single(uint32_t c) { return normalized({{c, c}}); }
Ranges digits() { return {{'0', '9'}}; }
Ranges word() { return normalized({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); }
// ECMA-262's WhiteSpace and LineTerminator.
Ranges space() {
  return normalized({{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
                     {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}});
}
Ranges any_but_line_terminators() { return complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}); }

// ---- the pattern as a tree ----

enum class Kind { kEmpty, kSet, kConcat, kAlternation, kRepeat, kStart, kEnd };

struct Node {
  Kind kind = Kind::kEmpty;
  Ranges set;                  // kSet
  std::vector<int32_t> parts;  // kConcat, kAlternation; kRepeat: its one part
  int32_t min = 0, max = -1;   // kRepeat (max -1: no bound)
};

bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }
int hex_value(uint32_t c) {
  if (is_digit(c)) return static_cast<int>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<int>(c - 'a' + 10);
  if (c >= 'A' && c <= 'F') return static_cast<int>(c - 'A' + 10);
  return -1;
}

std::vector<uint32_t> decode_utf8(std::string_view text) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<uint8_t>(text[i]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + static_cast<size_t>(n) > text.size()) throw PatternError("the pattern is not valid UTF-8");
    uint32_t c = n == 1 ? b : b & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      const auto t = static_cast<uint8_t>(text[i + static_cast<size_t>(k)]);
      if ((t & 0xC0) != 0x80) throw PatternError("the pattern is not valid UTF-8");
      c = c << 6 | (t & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8 either.
    constexpr uint32_t kLeast[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < kLeast[n] || c > kMaxCode || (c >= 0xD800 && c <= 0xDFFF)) throw PatternError("the pattern is not valid UTF-8");
    out.push_back(c);
    i += static_cast<size_t>(n);
  }
  return out;
}

std::string describe(uint32_t c) {
  if (c >= 0x20 && c < 0x7F) return std::string("'") + static_cast<char>(c) + "'";
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", c);
  return buf;
}

class Parser {
 public:
  explicit Parser(std::string_view pattern) : cp_(decode_utf8(pattern)) {}

  std::vector<Node> nodes;

  int32_t parse() {
    const int32_t root = disjunction();
    if (more()) throw PatternError("unmatched ')' at character " + std::to_string(pos_ + 1));
    return root;
  }

 private:
  bool more() const { return pos_ < cp_.size(); }
  uint32_t peek(size_t ahead = 0) const { return pos_ + ahead < cp_.size() ? cp_[pos_ + ahead] : 0xFFFFFFFF; }
  bool eat(uint32_t c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  uint32_t take() {
    if (!more()) throw PatternError("the pattern ends too early");
    return cp_[pos_++];
  }
  int32_t add(Node n) {
    nodes.push_back(std::move(n));
    return static_cast<int32_t>(nodes.size() - 1);
  }
  int32_t add_set(Ranges set) {
    Node n;
    n.kind = Kind::kSet;
    n.set = std::move(set);
    return add(std::move(n));
  }

  int32_t disjunction() {
    std::vector<int32_t> parts = {alternative()};
    while (eat('|')) parts.push_back(alternative());
    if (parts.size() == 1) return parts[0];
    Node n;
    n.kind = Kind::kAlternation;
    n.parts = std::move(parts);
    return add(std::move(n));
  }

  int32_t alternative() {
    std::vector<int32_t> parts;
    while (more() && peek() != '|' && peek() != ')') parts.push_back(term());
    if (parts.empty()) return add(Node{});
    if (parts.size() == 1) return parts[0];
    Node n;
    n.kind = Kind::kConcat;
    n.parts = std::move(parts);
    return add(std::move(n));
  }

  // A quantifier at the cursor: {min, max}, with the cursor moved past it (and its lazy
  // "?"); false, cursor unmoved, when there is none ("{" not followed by digits and "}"
  // is then a literal, as browsers read it).
  bool quantifier(int32_t& min, int32_t& max) {
    const uint32_t c = peek();
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      min = c == '+' ? 1 : 0;
      max = c == '?' ? 1 : -1;
    } else if (c == '{') {
      size_t at = pos_ + 1;
      auto number = [&](int64_t& value) {
        const size_t start = at;
        value = 0;
        while (at < cp_.size() && is_digit(cp_[at])) {
          value = std::min<int64_t>(value * 10 + (cp_[at] - '0'), int64_t{1} << 40);
          ++at;
        }
        return at > start;
      };
      int64_t lo = 0, hi = -1;
      if (!number(lo)) return false;
      if (at < cp_.size() && cp_[at] == ',') {
        ++at;
        if (!number(hi)) hi = -1;
      } else {
        hi = lo;
      }
      if (at >= cp_.size() || cp_[at] != '}') return false;
      pos_ = at + 1;
      if (hi >= 0 && lo > hi) throw PatternError("numbers out of order in a {n,m} quantifier");
      if (lo > kMaxPatternRepeat || hi > kMaxPatternRepeat) {
        throw PatternError("a {n,m} quantifier over " + std::to_string(kMaxPatternRepeat) + " is not supported");
      }
      min = static_cast<int32_t>(lo);
      max = static_cast<int32_t>(hi);
    } else {
      return false;
    }
    eat('?');  // lazy: the same strings match
    return true;
  }

  int32_t term() {
    if (eat('^')) return add(Node{Kind::kStart, {}, {}, 0, -1});
    if (eat('$')) return add(Node{Kind::kEnd, {}, {}, 0, -1});
    const int32_t a = atom();
    int32_t min = 0, max = 0;
    if (!quantifier(min, max)) return a;
    const size_t at = pos_;
    int32_t ignored_min = 0, ignored_max = 0;
    if (quantifier(ignored_min, ignored_max)) throw PatternError("nothing to repeat at character " + std::to_string(at + 1));
    Node n;
    n.kind = Kind::kRepeat;
    n.parts = {a};
    n.min = min;
    n.max = max;
    return add(std::move(n));
  }

  int32_t atom() {
    const size_t at = pos_;
    const uint32_t c = take();
    switch (c) {
      case '.':
        return add_set(any_but_line_terminators());
      case '[':
        return add_set(character_class());
      case '\\': {
        bool one = false;
        return add_set(escape(false, one));
      }
      case '(':
        return group();
      case '*':
      case '+':
      case '?':
        throw PatternError("nothing to repeat at character " + std::to_string(at + 1));
      case '{': {
        pos_ = at;
        int32_t min = 0, max = 0;
        if (quantifier(min, max)) throw PatternError("nothing to repeat at character " + std::to_string(at + 1));
        pos_ = at + 1;
        return add_set(single(c));
      }
      default:
        return add_set(single(c));
    }
  }

  int32_t group() {
    if (++depth_ > kMaxGroupDepth) throw PatternError("groups nested over " + std::to_string(kMaxGroupDepth) + " deep");
    if (eat('?')) {
      if (eat(':')) {
        // non-capturing
      } else if (peek() == '=' || peek() == '!' || (peek() == '<' && (peek(1) == '=' || peek(1) == '!'))) {
        throw PatternError("lookahead and lookbehind ((?=...), (?!...), (?<=...), (?<!...)) are not supported");
      } else if (eat('<')) {
        while (more() && peek() != '>') ++pos_;
        if (!eat('>')) throw PatternError("a group name without its '>'");
      } else {
        throw PatternError("unknown group syntax after '(?'");
      }
    }
    const int32_t inner = disjunction();
    if (!eat(')')) throw PatternError("missing ')'");
    --depth_;
    return inner;
  }

  Ranges character_class() {
    const bool negated = eat('^');
    Ranges set;
    for (;;) {
      if (!more()) throw PatternError("missing ']'");
      if (eat(']')) break;
      bool one = false;
      const Ranges first = class_atom(one);
      if (peek() == '-' && peek(1) != ']' && peek(1) != 0xFFFFFFFF) {
        ++pos_;
        bool other_one = false;
        const Ranges last = class_atom(other_one);
        if (!one || !other_one) throw PatternError("a class escape (\\d, \\w, \\s, ...) cannot bound a range in [...]");
        const uint32_t lo = first.empty() ? 0xD800 : first[0].first;
        const uint32_t hi = last.empty() ? 0xD800 : last[0].first;
        if (lo > hi) throw PatternError("a range out of order in [...]: " + describe(lo) + "-" + describe(hi));
        set.emplace_back(lo, hi);
        continue;
      }
      set.insert(set.end(), first.begin(), first.end());
    }
    set = normalized(set);
    return negated ? complement(set) : set;
  }

  Ranges class_atom(bool& one) {
    const uint32_t c = take();
    if (c == '\\') return escape(true, one);
    one = true;
    return single(c);
  }

  uint32_t hex_digits(int count) {
    uint32_t value = 0;
    for (int i = 0; i < count; ++i) {
      const int h = hex_value(peek());
      if (h < 0) throw PatternError("an escape wants " + std::to_string(count) + " hex digits");
      ++pos_;
      value = value * 16 + static_cast<uint32_t>(h);
    }
    return value;
  }

  // After a backslash. `one`: the escape names one code point (it may bound a range).
  Ranges escape(bool in_class, bool& one) {
    if (!more()) throw PatternError("'\\' at the end of the pattern");
    const uint32_t c = take();
    one = false;
    switch (c) {
      case 'd': return digits();
      case 'D': return complement(digits());
      case 'w': return word();
      case 'W': return complement(word());
      case 's': return space();
      case 'S': return complement(space());
      case 'p':
      case 'P':
        throw PatternError("Unicode property escapes (\\p{...}) are not supported");
      case 'k':
        throw PatternError("backreferences (\\k<name>) are not supported");
      case 'B':
        throw PatternError("word boundaries (\\b, \\B) are not supported");
      default:
        break;
    }
    one = true;
    switch (c) {
      case 't': return single('\t');
      case 'n': return single('\n');
      case 'v': return single('\v');
      case 'f': return single('\f');
      case 'r': return single('\r');
      case 'b':
        if (in_class) return single('\b');
        throw PatternError("word boundaries (\\b, \\B) are not supported");
      case '0':
        if (is_digit(peek())) throw PatternError("octal escapes are not supported");
        return single(0);
      case 'c': {
        const uint32_t letter = peek();
        if (!((letter >= 'a' && letter <= 'z') || (letter >= 'A' && letter <= 'Z'))) {
          throw PatternError("'\\c' wants a letter");
        }
        ++pos_;
        return single(letter % 32);
      }
      case 'x':
        return single(hex_digits(2));
      case 'u': {
        if (eat('{')) {
          uint32_t value = 0;
          int count = 0;
          while (hex_value(peek()) >= 0) {
            value = std::min<uint32_t>(value * 16 + static_cast<uint32_t>(hex_value(take())), kMaxCode + 1);
            ++count;
          }
          if (count == 0 || !eat('}') || value > kMaxCode) throw PatternError("an invalid \\u{...} escape");
          return single(value);  // a surrogate: no character (a JSON text holds none alone)
        }
        uint32_t value = hex_digits(4);
        if (value >= 0xD800 && value <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
          const size_t at = pos_;
          pos_ += 2;
          const uint32_t low = hex_digits(4);
          if (low >= 0xDC00 && low <= 0xDFFF) return single(0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00));
          pos_ = at;
        }
        return single(value);  // a lone surrogate: no character
      }
      default:
        break;
    }
    if (is_digit(c)) throw PatternError("backreferences (\\1, \\2, ...) are not supported");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      throw PatternError("unknown escape '\\" + std::string(1, static_cast<char>(c)) + "'");
    }
    return single(c);  // an escaped syntax character, '-', '/', or another non-letter
  }

  std::vector<uint32_t> cp_;
  size_t pos_ = 0;
  int depth_ = 0;
};

// ---- a byte automaton with choices (Thompson's construction) ----

struct ByteEdge {
  uint8_t lo, hi;
  int32_t to;
};

struct NfaState {
  std::vector<int32_t> free, at_start, at_end;  // edges that read nothing (the last two: anchors)
  std::vector<ByteEdge> edges;
};

// The UTF-8 byte ranges that spell the code points [lo, hi], as sequences of ranges (each
// sequence's bytes range independently).
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  for (const uint32_t limit : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= limit && hi > limit) {
      utf8_sequences(lo, limit, out);
      utf8_sequences(limit + 1, hi, out);
      return;
    }
  }
  const int n = hi < 0x80 ? 1 : hi < 0x800 ? 2 : hi < 0x10000 ? 3 : 4;
  for (int i = 1; i < n; ++i) {
    const uint32_t low_bits = (1u << (6 * i)) - 1;
    if ((lo & ~low_bits) != (hi & ~low_bits)) {
      if ((lo & low_bits) != 0) {
        utf8_sequences(lo, lo | low_bits, out);
        utf8_sequences((lo | low_bits) + 1, hi, out);
        return;
      }
      if ((hi & low_bits) != low_bits) {
        utf8_sequences(lo, (hi & ~low_bits) - 1, out);
        utf8_sequences(hi & ~low_bits, hi, out);
        return;
      }
    }
  }
  auto encode = [n](uint32_t c) {
    std::array<uint8_t, 4> b{};
    if (n == 1) {
      b[0] = static_cast<uint8_t>(c);
    } else {
      for (int k = n - 1; k > 0; --k) {
        b[static_cast<size_t>(k)] = static_cast<uint8_t>(0x80 | (c & 0x3F));
        c >>= 6;
      }
      b[0] = static_cast<uint8_t>((0xF00u >> n) | c);
    }
    return b;
  };
  const auto a = encode(lo), z = encode(hi);
  std::vector<std::pair<uint8_t, uint8_t>> sequence;
  for (int k = 0; k < n; ++k) sequence.emplace_back(a[static_cast<size_t>(k)], z[static_cast<size_t>(k)]);
  out.push_back(std::move(sequence));
}

class Nfa {
 public:
  std::vector<NfaState> states;

  int32_t add() {
    if (states.size() >= kMaxNfaStates) throw PatternError("the pattern is too large");
    states.emplace_back();
    return static_cast<int32_t>(states.size() - 1);
  }

  // Connects `from` to `to` through the strings of node `n`. (Only edges out of `from` and
  // into `to` are added: no edge leads back into `from`, so siblings may share it.)
  void build(const std::vector<Node>& ast, int32_t n, int32_t from, int32_t to) {
    const Node& node = ast[static_cast<size_t>(n)];
    switch (node.kind) {
      case Kind::kEmpty:
        states[static_cast<size_t>(from)].free.push_back(to);
        return;
      case Kind::kStart:
        states[static_cast<size_t>(from)].at_start.push_back(to);
        return;
      case Kind::kEnd:
        states[static_cast<size_t>(from)].at_end.push_back(to);
        return;
      case Kind::kSet: {
        std::vector<std::vector<std::pair<uint8_t, uint8_t>>> sequences;
        for (const auto& [lo, hi] : node.set) utf8_sequences(lo, hi, sequences);
        // The state that reads a run of byte ranges and then reaches `to`, shared between
        // the sequences that end alike (most share their continuation bytes).
        std::map<std::vector<std::pair<uint8_t, uint8_t>>, int32_t> tails;
        for (const auto& sequence : sequences) {
          int32_t after = to;
          for (size_t k = sequence.size(); k-- > 1;) {
            const std::vector<std::pair<uint8_t, uint8_t>> tail(sequence.begin() + static_cast<std::ptrdiff_t>(k), sequence.end());
            auto it = tails.find(tail);
            if (it == tails.end()) {
              const int32_t state = add();
              states[static_cast<size_t>(state)].edges.push_back(ByteEdge{sequence[k].first, sequence[k].second, after});
              it = tails.emplace(tail, state).first;
            }
            after = it->second;
          }
          states[static_cast<size_t>(from)].edges.push_back(ByteEdge{sequence[0].first, sequence[0].second, after});
        }
        return;
      }
      case Kind::kConcat: {
        int32_t at = from;
        for (size_t k = 0; k < node.parts.size(); ++k) {
          const int32_t next = k + 1 == node.parts.size() ? to : add();
          build(ast, node.parts[k], at, next);
          at = next;
        }
        return;
      }
      case Kind::kAlternation:
        for (const int32_t part : node.parts) build(ast, part, from, to);
        return;
      case Kind::kRepeat: {
        const int32_t part = node.parts[0];
        int32_t at = from;
        for (int32_t i = 0; i < node.min; ++i) {
          const int32_t next = add();
          build(ast, part, at, next);
          at = next;
        }
        if (node.max < 0) {
          const int32_t loop = add(), back = add();
          states[static_cast<size_t>(at)].free.push_back(loop);
          build(ast, part, loop, back);
          states[static_cast<size_t>(back)].free.push_back(loop);
          states[static_cast<size_t>(loop)].free.push_back(to);
          return;
        }
        for (int32_t i = node.min; i < node.max; ++i) {
          states[static_cast<size_t>(at)].free.push_back(to);
          const int32_t next = add();
          build(ast, part, at, next);
          at = next;
        }
        states[static_cast<size_t>(at)].free.push_back(to);
        return;
      }
    }
  }

  // `set` with every state reached from it by edges that read nothing (anchors where they
  // hold), sorted.
  std::vector<int32_t> closure(std::vector<int32_t> set, bool at_start, bool at_end) {
    // Marks stamped per call: no clearing of a table the size of the automaton each time.
    if (mark_.size() != states.size()) mark_.assign(states.size(), 0);
    if (++stamp_ == 0) {
      std::fill(mark_.begin(), mark_.end(), 0);
      stamp_ = 1;
    }
    std::vector<int32_t> work = set;
    for (const int32_t s : set) mark_[static_cast<size_t>(s)] = stamp_;
    while (!work.empty()) {
      const int32_t s = work.back();
      work.pop_back();
      const NfaState& state = states[static_cast<size_t>(s)];
      auto follow = [&](const std::vector<int32_t>& targets) {
        for (const int32_t t : targets) {
          if (mark_[static_cast<size_t>(t)] != stamp_) {
            mark_[static_cast<size_t>(t)] = stamp_;
            set.push_back(t);
            work.push_back(t);
          }
        }
      };
      follow(state.free);
      if (at_start) follow(state.at_start);
      if (at_end) follow(state.at_end);
    }
    work_ += set.size();
    if (work_ > max_work) throw PatternError("it takes too long to compile; simplify it");
    std::sort(set.begin(), set.end());
    return set;
  }

 private:
  size_t work_ = 0;

 public:
  size_t max_work = kMaxPatternWork;
  size_t work() const { return work_; }
  // Other work, counted at an eighth of a state listed (scanning an edge costs less).
  void charge(size_t edges) {
    work_ += edges / 8;
    if (work_ > max_work) throw PatternError("it takes too long to compile; simplify it");
  }
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
};

// True when every top-level alternative of `n` starts with `kind` (kStart) or ends with it
// (kEnd): the pattern is anchored there and needs no free text on that side.
bool anchored(const std::vector<Node>& ast, int32_t n, Kind kind) {
  const Node& node = ast[static_cast<size_t>(n)];
  if (node.kind == kind) return true;
  if (node.kind == Kind::kAlternation) {
    return std::all_of(node.parts.begin(), node.parts.end(), [&](int32_t p) { return anchored(ast, p, kind); });
  }
  if (node.kind == Kind::kConcat && !node.parts.empty()) {
    return anchored(ast, kind == Kind::kStart ? node.parts.front() : node.parts.back(), kind);
  }
  return false;
}

}  // namespace

bool BytePattern::matches(std::string_view text) const {
  int32_t state = 0, count = 0;
  for (const char c : text) {
    if (!step(state, count, static_cast<uint8_t>(c))) return false;
  }
  return accepting(state, count);
}

uint32_t BytePattern::controls(int32_t state, int32_t count) const {
  uint32_t bits = 0;
  for (uint8_t c = 0; c < 32; ++c) {
    int32_t s = state, n = count;
    if (step(s, n, c)) bits |= 1u << c;
  }
  return bits;
}

BytePattern compile_pattern(std::string_view pattern, int32_t min_length, int32_t max_length, size_t max_work) {
  if (min_length < 0 || min_length > kMaxPatternLength || max_length < -1 || max_length > kMaxPatternLength) {
    throw PatternError("length bounds beyond " + std::to_string(kMaxPatternLength) + " are not supported");
  }
  Parser parser(pattern);
  int32_t root = parser.parse();
  std::vector<Node>& ast = parser.nodes;
  // Not anchored: any text before and after, line terminators too. The text after is one
  // loop state (`tail`): a subset that holds it takes every string, and is made that state
  // alone (a pattern found, nothing else needs following: "a.{12}" stays small).
  const bool open_start = !anchored(ast, root, Kind::kStart), open_end = !anchored(ast, root, Kind::kEnd);
  ast.push_back(Node{Kind::kSet, complement({}), {}, 0, -1});
  const auto any_character = static_cast<int32_t>(ast.size() - 1);
  if (open_start) {
    ast.push_back(Node{Kind::kRepeat, {}, {any_character}, 0, -1});
    ast.push_back(Node{Kind::kConcat, {}, {static_cast<int32_t>(ast.size() - 1), root}, 0, -1});
    root = static_cast<int32_t>(ast.size() - 1);
  }
  Nfa nfa;
  nfa.max_work = max_work;
  const int32_t start = nfa.add(), final = nfa.add();
  int32_t tail = -1;
  if (open_end) {
    tail = nfa.add();
    nfa.build(ast, any_character, tail, tail);
    nfa.states[static_cast<size_t>(tail)].free.push_back(final);
  }
  nfa.build(ast, root, start, open_end ? tail : final);

  // Bytes that every edge treats alike share a class (UTF-8 continuation bytes apart from
  // the rest: they do not start a character).
  std::array<uint8_t, 257> cut{};
  cut[0] = cut[0x80] = cut[0xC0] = 1;
  for (const NfaState& s : nfa.states) {
    for (const ByteEdge& e : s.edges) cut[e.lo] = cut[static_cast<size_t>(e.hi) + 1] = 1;
  }
  BytePattern out;
  std::vector<uint8_t> representative;
  int classes = -1;
  for (int b = 0; b < 256; ++b) {
    if (cut[static_cast<size_t>(b)] != 0) {
      ++classes;
      representative.push_back(static_cast<uint8_t>(b));
    }
    out.byte_class_[static_cast<size_t>(b)] = static_cast<uint8_t>(classes);
  }
  const size_t c = representative.size();
  out.classes_ = c;

  // Subsets of NFA states (the start's apart: only there does `^` hold).
  using Key = std::pair<std::vector<int32_t>, bool>;
  std::map<Key, int32_t> index;
  std::vector<Key> keys;
  std::vector<int32_t> next;
  std::vector<uint8_t> accepting;
  const std::vector<int32_t> everything = tail >= 0 ? nfa.closure({tail}, false, false) : std::vector<int32_t>();
  auto intern = [&](std::vector<int32_t> set, bool initial) {
    if (tail >= 0 && std::binary_search(set.begin(), set.end(), tail)) {
      set = everything;
      initial = false;
    }
    Key key{std::move(set), initial};
    const auto [it, added] = index.emplace(key, static_cast<int32_t>(keys.size()));
    if (added) {
      if (keys.size() >= static_cast<size_t>(kMaxPatternStates)) {
        throw PatternError("it needs over " + std::to_string(kMaxPatternStates) + " automaton states; simplify it");
      }
      keys.push_back(std::move(key));
    }
    return it->second;
  };
  intern(nfa.closure({start}, true, false), true);
  std::vector<std::vector<int32_t>> targets(c);
  for (size_t k = 0; k < keys.size(); ++k) {
    const std::vector<int32_t> set = keys[k].first;
    const std::vector<int32_t> ends = nfa.closure(set, keys[k].second, true);
    accepting.push_back(std::binary_search(ends.begin(), ends.end(), final) ? 1 : 0);
    // Each edge gives its target to the classes it covers (a run of classes: they are cut at
    // every edge's ends).
    for (std::vector<int32_t>& t : targets) t.clear();
    size_t scanned = 0;
    for (const int32_t s : set) {
      for (const ByteEdge& e : nfa.states[static_cast<size_t>(s)].edges) {
        for (int cls = out.byte_class_[e.lo]; cls <= out.byte_class_[e.hi]; ++cls) targets[static_cast<size_t>(cls)].push_back(e.to);
        scanned += static_cast<size_t>(out.byte_class_[e.hi] - out.byte_class_[e.lo]) + 1;
      }
    }
    nfa.charge(scanned);
    for (size_t cls = 0; cls < c; ++cls) {
      std::vector<int32_t>& t = targets[cls];
      int32_t to = -1;
      if (!t.empty()) {
        std::sort(t.begin(), t.end());
        t.erase(std::unique(t.begin(), t.end()), t.end());
        to = intern(nfa.closure(t, false, false), false);
      }
      next.push_back(to);
    }
  }
  const size_t n = keys.size();

  // Keep the states from which an accepting one can be reached; the start stays state 0.
  std::vector<std::vector<int32_t>> into(n);
  for (size_t s = 0; s < n; ++s) {
    for (size_t k = 0; k < c; ++k) {
      if (const int32_t t = next[s * c + k]; t >= 0) into[static_cast<size_t>(t)].push_back(static_cast<int32_t>(s));
    }
  }
  std::vector<uint8_t> reaches(n, 0);
  std::vector<int32_t> work;
  for (size_t s = 0; s < n; ++s) {
    if (accepting[s] != 0) {
      reaches[s] = 1;
      work.push_back(static_cast<int32_t>(s));
    }
  }
  while (!work.empty()) {
    const auto t = static_cast<size_t>(work.back());
    work.pop_back();
    for (const int32_t s : into[t]) {
      if (reaches[static_cast<size_t>(s)] == 0) {
        reaches[static_cast<size_t>(s)] = 1;
        work.push_back(s);
      }
    }
  }
  if (reaches[0] == 0) throw PatternError("no string matches it");
  std::vector<int32_t> renumber(n, -1);
  int32_t kept = 0;
  for (size_t s = 0; s < n; ++s) {
    if (reaches[s] != 0) renumber[s] = kept++;
  }
  const auto m = static_cast<size_t>(kept);
  out.next_.assign(m * c, -1);
  out.accepting_.assign(m, 0);
  std::vector<std::vector<std::pair<int32_t, bool>>> back(m);
  for (size_t s = 0; s < n; ++s) {
    if (renumber[s] < 0) continue;
    const auto r = static_cast<size_t>(renumber[s]);
    out.accepting_[r] = accepting[s];
    for (size_t k = 0; k < c; ++k) {
      const int32_t t = next[s * c + k];
      if (t < 0 || renumber[static_cast<size_t>(t)] < 0) continue;
      out.next_[r * c + k] = renumber[static_cast<size_t>(t)];
      back[static_cast<size_t>(renumber[static_cast<size_t>(t)])].emplace_back(static_cast<int32_t>(r),
                                                                                (representative[k] & 0xC0) != 0x80);
    }
  }

  // The fewest characters to an accepting state (a breadth-first search backwards, where a
  // continuation byte adds no character).
  out.fewest_.assign(m, INT32_MAX);
  std::deque<int32_t> queue;
  for (size_t r = 0; r < m; ++r) {
    if (out.accepting_[r] != 0) {
      out.fewest_[r] = 0;
      queue.push_back(static_cast<int32_t>(r));
    }
  }
  while (!queue.empty()) {
    const int32_t t = queue.front();
    queue.pop_front();
    const int32_t d = out.fewest_[static_cast<size_t>(t)];
    for (const auto& [from_state, lead] : back[static_cast<size_t>(t)]) {
      const int32_t via = d + (lead ? 1 : 0);
      if (via < out.fewest_[static_cast<size_t>(from_state)]) {
        out.fewest_[static_cast<size_t>(from_state)] = via;
        if (lead) queue.push_back(from_state);
        else queue.push_front(from_state);
      }
    }
  }
  // The most characters to an accepting state (INT32_MAX: no bound, a cycle on the way; every
  // cycle reads a character): states are settled sinks first, a state once all it leads to
  // is; those never settled reach a cycle.
  out.longest_.assign(m, INT32_MAX);
  {
    std::vector<int32_t> pending(m, 0);
    for (size_t r = 0; r < m; ++r) {
      for (size_t k = 0; k < c; ++k) pending[r] += out.next_[r * c + k] >= 0 ? 1 : 0;
    }
    std::vector<int32_t> ready;
    for (size_t r = 0; r < m; ++r) {
      if (pending[r] == 0) ready.push_back(static_cast<int32_t>(r));
    }
    while (!ready.empty()) {
      const auto r = static_cast<size_t>(ready.back());
      ready.pop_back();
      int64_t most = out.accepting_[r] != 0 ? 0 : -1;
      for (size_t k = 0; k < c; ++k) {
        const int32_t t = out.next_[r * c + k];
        if (t >= 0) most = std::max<int64_t>(most, out.longest_[static_cast<size_t>(t)] + ((representative[k] & 0xC0) != 0x80 ? 1 : 0));
      }
      out.longest_[r] = static_cast<int32_t>(std::min<int64_t>(most, INT32_MAX - 1));
      for (const auto& [from_state, lead] : back[r]) {
        if (--pending[static_cast<size_t>(from_state)] == 0) ready.push_back(from_state);
      }
    }
  }
  out.min_length_ = min_length;
  out.max_length_ = max_length;

  // With both bounds, the counts under the minimum: bit k of state s is set when, with k
  // characters read, some string goes on from s to an accepting state with its characters
  // between the bounds. Counts from the minimum on are decided by `fewest`; with no maximum,
  // counts under the minimum by `longest`.
  if (max_length >= 0 && min_length > 0) {
    const auto words = static_cast<size_t>(min_length + 63) / 64;
    if (static_cast<double>(words) * static_cast<double>(m) * static_cast<double>(c) * static_cast<double>(min_length) >
        static_cast<double>(kMaxPatternWork) * 16) {
      throw PatternError("its 'minLength' beside 'maxLength' takes too long to compile; lower the minimum");
    }
    out.words_ = words;
    out.live_.assign(m * words, 0);
    // Count k depends on k + 1 (a character read) and on k itself through continuation
    // bytes, which come at most three in a row: counts downwards, each settled in four passes.
    for (int32_t k = min_length - 1; k >= 0; --k) {
      for (int pass = 0; pass < 4; ++pass) {
        for (size_t r = 0; r < m; ++r) {
          if (out.live(static_cast<int32_t>(r), k)) continue;
          for (size_t cls = 0; cls < c; ++cls) {
            const int32_t t = out.next_[r * c + cls];
            if (t < 0) continue;
            const int32_t after = k + ((representative[cls] & 0xC0) != 0x80 ? 1 : 0);
            if (after > max_length || !out.live(t, after)) continue;
            out.live_[r * words + static_cast<size_t>(k) / 64] |= uint64_t{1} << (k % 64);
            break;
          }
        }
      }
    }
  }
  if (!out.live(0, 0)) throw PatternError("no string within the length bounds matches it");
  out.work_ = nfa.work();
  static std::atomic<uint64_t> compiled{0};
  out.id_ = ++compiled;
  return out;
}

}  // namespace qwenrt::structured

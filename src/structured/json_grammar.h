// Structured output: the JSON texts a request allows, as a grammar compiled from a JSON
// Schema (or "any JSON object"), and a byte-level matcher that says after every byte whether
// the text so far can still become such a JSON text.
//
// The matcher is a pushdown automaton whose stack frames are small fixed records (no
// allocation while it runs: the token mask walks the whole vocabulary through it every
// draw). Alternatives (anyOf, a list of types) are followed side by side as a set of stacks,
// as an Earley parser would keep its items. What it enforces:
// - the value's type, an object's declared properties in their declared order (a required
//   one may not be skipped; an optional one may), other keys only where the schema allows
//   them (`additionalProperties` left out counts as false: the strict mode of the OpenAI
//   API), array items, `minItems`/`maxItems`, `enum`/`const` (written as the canonical
//   JSON text of the value), `anyOf`/`oneOf` (both as anyOf), `$ref` into `$defs` or
//   `definitions` (recursion allowed);
//   `minLength`/`maxLength` of strings (in characters); `pattern` (pattern.h: an automaton
//   over the value's bytes, which a string's escapes are decoded into first; in such a
//   string `\u` escapes are taken only for control characters, other characters come as
//   themselves);
// - JSON's own rules: escapes, valid UTF-8 in strings, no control characters, numbers
//   without leading zeros (integers without fraction or exponent);
// - whitespace as JSON writers lay it out: between the tokens inside the value nothing, one
//   space, or one line break and an indent (at most kMaxIndent spaces and tabs), so that a
//   model cannot pad its answer with runs of blanks; around the value up to kMaxWhitespace
//   bytes of any (Grammar::free_whitespace allows that in every gap);
// - bounds that keep a runaway generation finite: numbers of at most kMaxNumberBytes bytes
//   with exponents of at most two digits (so each is a finite double), nesting at most
//   kMaxDepth deep.
// - numbers' `minimum`, `maximum`, `exclusiveMinimum` and `exclusiveMaximum` (such numbers
//   are written in plain decimals of at most kMaxBoundedDigits significant digits, so that
//   the text's value is exact, and no text that can no longer reach the range is taken).
// - `multipleOf` of integers (a positive integer; numbers beside it are then written as
//   integers; not beside bounds), a digit taken only where a multiple can still be written
//   within the number's bytes.
// Keywords that would change what is valid but are not enforced (uniqueItems, ...) are
// refused by name when the schema is compiled, never silently dropped;
// `format` is an annotation (as JSON Schema has it since draft 2019-09) and is not enforced.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "structured/pattern.h"

namespace qwenrt::structured {

inline constexpr int kMaxDepth = 32;         // nested frames (objects, arrays, keys, values)
inline constexpr int kMaxWhitespace = 20;    // whitespace bytes around the root value
inline constexpr int kMaxIndent = 32;        // spaces and tabs after a line break inside it
inline constexpr int kMaxNumberBytes = 32;   // bytes of one number
inline constexpr int kMaxExponentDigits = 2; // digits of its exponent (every number a finite double)
inline constexpr int kMaxAlternatives = 64;  // stacks followed at once (anyOf)
inline constexpr int kMaxBoundedDigits = 15;    // significant digits of a number with bounds
inline constexpr int kMaxBoundedFraction = 22;  // its digits after the point

// A byte trie over a set of literal strings (enum and const texts, property names). Node 0 is
// the root; a node where a literal ends carries its tag.
struct LiteralTrie {
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;
    int32_t tag = -1;
    int32_t min_tag = INT32_MAX, max_tag = -1;  // tags in this subtree
    std::vector<int32_t> tags;                  // every tag in this subtree, sorted
  };
  std::vector<Node> nodes = std::vector<Node>(1);
  void add(std::string_view text, int32_t tag);
  int32_t child(int32_t node, uint8_t byte) const;
  // True when a literal in node's subtree has a tag in [lo, hi].
  bool has_tag_in(int32_t node, int32_t lo, int32_t hi) const;
};

enum class NodeKind : uint8_t { kAny, kObject, kArray, kString, kNumber, kInteger, kLiterals, kAnyOf };

struct SchemaNode {
  NodeKind kind = NodeKind::kAny;
  // kObject: declared properties in order (names in `key_trie`, tagged by index), and the
  // schema of any other key's value (-1: none allowed).
  std::vector<int32_t> property_nodes;
  std::vector<uint8_t> required;
  std::vector<int32_t> next_required;  // [i]: the first required property at or after i (the count: none)
  int32_t key_trie = -1;
  int32_t additional = -1;
  // kArray
  int32_t items = -1;
  int32_t min_items = 0, max_items = -1;
  // kLiterals: the trie of the allowed JSON texts
  int32_t literals = -1;
  // kAnyOf (never another kAnyOf among them: nested ones are flattened)
  std::vector<int32_t> alternatives;
  // Frames a value of this node needs at least: 1, or 1 + what its required parts need.
  int32_t min_frames = 1;
  // kNumber / kInteger with `minimum`, `maximum`, `exclusiveMinimum` or `exclusiveMaximum`:
  // the value lies in [minimum, maximum], the ends left out where exclusive. Such a number is
  // written in plain decimals (no exponent), with at most kMaxBoundedDigits significant digits
  // and kMaxBoundedFraction after the point, so that its value is exact as a double.
  bool bounded = false;
  bool exclusive_minimum = false, exclusive_maximum = false;
  double minimum = 0, maximum = 0;  // with `bounded`; ±infinity where unbounded
  // kInteger with `multipleOf` (a positive integer, no bounds beside it): the value is a
  // multiple of it; 0: none. The frame keeps the value so far modulo it.
  int64_t multiple_of = 0;
  // kString with a `pattern`: its automaton in Grammar::patterns (the length bounds folded
  // in), -1: none.
  int32_t pattern = -1;
};

struct Grammar {
  std::vector<SchemaNode> nodes;
  std::vector<LiteralTrie> tries;
  std::vector<BytePattern> patterns;
  int32_t root = 0;
  bool free_whitespace = false;  // any whitespace (up to kMaxWhitespace bytes a gap) everywhere
};

// Node indices every grammar has, for "any value" and its parts.
inline constexpr int32_t kAnyNode = 0, kAnyObjectNode = 1, kAnyArrayNode = 2, kStringNode = 3, kNumberNode = 4,
                         kBooleanNode = 5, kNullNode = 6;

// A JSON Schema as a grammar. Throws Error(kInvalidArgument) naming the place in the schema
// ("#/properties/zip") and the keyword for what it cannot enforce or does not understand.
Grammar compile_json_schema(const nlohmann::ordered_json& schema);
// Any JSON object (the OpenAI API's {"type": "json_object"}).
Grammar any_json_object_grammar();
// A tool call as Qwen writes one: {"name": NAME, "arguments": ARGUMENTS} where NAME is one of
// the tools' names and ARGUMENTS fits that tool's parameters schema (null, or a schema this
// compiler refuses: any object). Each schema is its own root for its references.
Grammar compile_tool_calls(const std::vector<std::pair<std::string, nlohmann::ordered_json>>& tools);

// One frame of the matcher's stack (a fixed 16-byte record).
// (No default values: a stack's frames above its depth are never read, and the matcher
// copies only the frames in use.)
struct Frame {
  uint8_t type;   // FrameType (json_grammar.cpp)
  uint8_t state;
  uint16_t ws;    // whitespace bytes in a row
  int32_t node;   // the schema node
  int32_t a, b;
};

struct Stack {
  int depth = 0;
  std::array<Frame, kMaxDepth> frames;
  Stack() = default;
  // Copies the frames in use only.
  Stack(const Stack& other) : depth(other.depth) {
    std::memcpy(frames.data(), other.frames.data(), static_cast<size_t>(depth) * sizeof(Frame));
  }
  Stack& operator=(const Stack& other) {
    depth = other.depth;
    std::memmove(frames.data(), other.frames.data(), static_cast<size_t>(depth) * sizeof(Frame));
    return *this;
  }
  bool operator==(const Stack& other) const;
};

// The matcher's state: every stack still alive, each once. Empty: the text cannot be completed.
struct MatchState {
  std::span<const Stack> stacks() const { return {storage.data(), count}; }
  bool dead() const { return count == 0; }
  void clear() {
    count = 0;
    slots.fill(0);
  }
  // storage[0, count) are the stacks (storage is kept from state to state: the vocabulary
  // mask reuses one state a trie depth). For the check that keeps each stack once: hashes[i]
  // is stack i's hash; `slots`, an open addressing table over them (1 + the index; 0: empty).
  std::vector<Stack> storage;
  size_t count = 0;
  std::array<uint64_t, kMaxAlternatives> hashes{};
  std::array<uint8_t, 2 * kMaxAlternatives> slots{};
};

// Adds `stack` to `state` unless it is there already.
void add_stack(MatchState& state, const Stack& stack);

class JsonMatcher {
 public:
  explicit JsonMatcher(std::shared_ptr<const Grammar> grammar);
  // The state before any byte: a root value to come (whitespace first allowed).
  MatchState start() const;
  // `out` = `in` after `byte` (out may not alias in). Reuses out's storage.
  void advance(const MatchState& in, uint8_t byte, MatchState& out) const;
  // Advances `state` over `bytes` in place; false (and a dead state) when one is refused.
  bool advance_all(MatchState& state, std::string_view bytes) const;
  // True when the text so far is a complete value (only trailing whitespace may follow).
  bool accepting(const MatchState& state) const;
  // For the vocabulary mask's shortcuts: a token is allowed when any stack takes it, and a
  // stack inside a string whose content is free takes all plain text (up to a length). For
  // such a stack, its UTF-8 state (0-7), with how many more characters its string takes in
  // `room` (INT32_MAX: no bound); -1 when the stack is not inside such a string.
  int free_string(const Stack& stack, int32_t& room) const;
  // For the vocabulary mask: a stack inside a string with a pattern, between escapes, takes a
  // token with no quote, backslash or control byte exactly when the pattern's automaton takes
  // its bytes. Its pattern, with the automaton's state and count; null for any other stack.
  const BytePattern* pattern_string(const Stack& stack, int32_t& state, int32_t& count) const;
  const Grammar& grammar() const { return *grammar_; }

 private:
  void step(const Stack& stack, uint8_t byte, MatchState& out) const;
  std::shared_ptr<const Grammar> grammar_;
};

// The UTF-8 decoder states a string's content moves through (0: between characters).
// next_utf8_state returns -1 for a byte not allowed in that state.
int next_utf8_state(int state, uint8_t byte);
// A byte a free string takes as plain text in UTF-8 state `state` (not a quote, backslash or
// control byte), and the state after it; -1 when it is not plain there.
int plain_string_byte(int state, uint8_t byte);
inline constexpr int kUtf8States = 8;

}  // namespace qwenrt::structured

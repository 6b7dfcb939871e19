// Values of the chat-template interpreter. They model the Python objects a Jinja2 template
// sees when transformers renders it (str, int, float, bool, None, list, tuple, dict, jinja2's
// Undefined and Namespace), because byte-identical output depends on Python's semantics:
// str()/repr() formatting, truthiness, == between int/float/bool, ordered dicts.
// Lists and dicts are shared and never mutated after construction (transformers renders in
// an ImmutableSandboxedEnvironment); namespaces are the one mutable, shared object.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace qwenrt::chat_template {

struct Value;
class Interpreter;

// Python dict: insertion-ordered (key, value) pairs. Small dicts are searched linearly; a
// wide one (a JSON object with thousands of keys) gets a hash index on first lookup, so
// lookups stay O(1) as in Python. `entries` may be appended to directly with keys not yet
// present; the index catches up with them.
struct Dict {
  std::vector<std::pair<Value, Value>> entries;

  // A copy starts without an index (it is rebuilt when needed); small dicts never have one.
  // Defined in value.cpp, where Value is complete.
  Dict();
  Dict(const Dict& other);
  Dict& operator=(const Dict& other);
  Dict(Dict&&) noexcept;
  Dict& operator=(Dict&&) noexcept;
  ~Dict();

  const Value* find(const Value& key) const;
  Value* find(const Value& key);
  void set(const Value& key, Value value);

 private:
  struct Index {
    std::unordered_multimap<uint64_t, size_t> slots;  // hash(key) -> entry
    size_t covered = 0;                               // entries indexed so far
  };
  size_t find_index(const Value& key) const;  // entries.size() when absent
  mutable std::unique_ptr<Index> index_;      // wide dicts only
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index` or named `name`; null when neither was passed.
  const Value* find(size_t index, const char* name) const;
};

// A callable: a builtin global, a bound method, a macro or `caller`. `line` is the call site.
struct Function {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&, int line)> call;
};

enum class Kind : uint8_t {
  kUndefined,  // jinja2.Undefined: prints as "", falsy, iterates as empty, errors on most use
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,  // UTF-8; Python indexes by code point, see text.h
  kList,
  kTuple,
  kDict,
  kObject,  // attribute-only object: jinja2 Namespace (mutable) or the loop variable
  kFunction,
  // An int no 64-bit integer holds (a JSON input's 2^64, say), kept as its decimal `text`:
  // it prints, compares equal, hashes and goes through tojson as Python's int would; any
  // arithmetic or ordering with it is an error (no template computes with such numbers).
  kBigInt,
};

// What refusing to compute with a kBigInt says (messages add what was refused).
inline constexpr const char* kBigIntPrintOnly = "integers past 64 bits are kept for printing only";

// The small fields share one word: a Value is copied often, and its size is felt.
struct Value {
  Kind kind = Kind::kUndefined;
  bool boolean = false;
  // kUndefined produced by the sandbox (e.g. list.append): misuse is a security error.
  bool unsafe = false;
  // Container nesting depth (0 for scalars), bounded so that printing, comparing and
  // destroying a value cannot exhaust the stack.
  int nesting = 0;
  int64_t integer = 0;
  double number = 0.0;
  // kString: the text. kUndefined: why it is undefined, used when it is misused
  // ("'dict object' has no attribute 'x'"). kObject: the Python type name.
  std::string text;
  std::shared_ptr<std::vector<Value>> items;  // kList, kTuple
  std::shared_ptr<Dict> dict;                 // kDict, kObject
  std::shared_ptr<Function> function;         // kFunction
  // Size in bytes counted for the resource budget: a string's length; for a list, tuple or
  // dict, its items' sizes plus sizeof(Value) per item (saturating). Shared items count
  // once per reference, as printing would. 0 for scalars, namespaces and functions.
  uint64_t bytes = 0;

  static Value undefined(std::string reason, bool unsafe = false);
  static Value none();
  static Value from_bool(bool b);
  static Value from_int(int64_t i);
  static Value from_float(double f);
  static Value big_int(std::string digits);  // decimal digits with an optional '-'; see kBigInt
  static Value from_string(std::string s);
  static Value list(std::vector<Value> values);
  static Value tuple(std::vector<Value> values);
  static Value dictionary(Dict d = {});
  static Value object(std::string type_name, Dict attributes = {});
  static Value callable(std::string name, std::function<Value(Interpreter&, CallArgs&, int)> fn);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  bool is_sequence() const { return kind == Kind::kList || kind == Kind::kTuple; }
};

// Python's numeric tower for bool, int and float values.
inline bool is_int_like(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kBool; }
inline int64_t int_of(const Value& v) { return v.kind == Kind::kBool ? (v.boolean ? 1 : 0) : v.integer; }
inline double float_of(const Value& v) { return v.kind == Kind::kFloat ? v.number : static_cast<double>(int_of(v)); }

inline const Value* CallArgs::find(size_t index, const char* name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [key, value] : keyword) {
    if (key == name) return &value;
  }
  return nullptr;
}

// Python's type(x).__name__, for error messages.
std::string type_name(const Value& v);
bool truthy(const Value& v);
// Python str(v) as Jinja prints it ({{ v }}): Undefined prints as "".
std::string to_str(const Value& v);
// Python repr(v).
std::string repr(const Value& v);
// Python ==, including 1 == 1.0 == True and element-wise list/dict equality.
bool equals(const Value& a, const Value& b);
// Python <, for sorting and comparisons; throws std::invalid_argument on unorderable types.
bool less_than(const Value& a, const Value& b);
// Whether Python could use `v` as a dict key or set member (None, bool, int, float, str,
// tuples of those); hash_value is consistent with equals (hash(1) == hash(1.0) == hash(True)).
bool is_hashable(const Value& v);
uint64_t hash_value(const Value& v);
// Calls of equals() and less_than() made on this thread so far: tests count them to check
// that filters and lookups stay within their complexity (RenderStats::comparisons).
uint64_t comparison_count();
// Python repr of a float: shortest round-trip digits, exponent outside [1e-4, 1e16).
std::string float_repr(double f);

// JSON (ordered, so dict key order survives as in Python's json.load) to Value and back.
Value from_json(const nlohmann::ordered_json& j);

struct JsonOptions {
  std::string indent;  // empty with has_indent=false: single line
  bool has_indent = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
  uint64_t max_bytes = UINT64_MAX;  // longer output throws std::length_error
};
// Python json.dumps(v, ...). Throws std::invalid_argument for values JSON cannot represent.
std::string to_json(const Value& v, const JsonOptions& options);

}  // namespace qwenrt::chat_template

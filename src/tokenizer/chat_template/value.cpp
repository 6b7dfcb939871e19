#include "tokenizer/chat_template/gcc_workarounds.h"  // first: see there

#include "tokenizer/chat_template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "core/json.h"
#include "tokenizer/chat_template/text.h"

namespace qwenrt::chat_template {

namespace {

// Bounds on value nesting and on recursion through values (namespaces can form cycles).
constexpr int kMaxValueNesting = 1000;
constexpr int kMaxRecursion = 1100;

int nesting_of(const std::vector<Value>& items) {
  int deepest = 0;
  for (const Value& v : items) deepest = std::max(deepest, v.nesting);
  if (deepest + 1 > kMaxValueNesting) throw std::invalid_argument("value nested too deeply");
  return deepest + 1;
}

void check_recursion(int depth) {
  if (depth > kMaxRecursion) throw std::invalid_argument("maximum recursion depth exceeded");
}

uint64_t add_bytes(uint64_t a, uint64_t b) {
  uint64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? UINT64_MAX : sum;
}

// Dicts up to this size are searched linearly: cheaper than hashing for the usual few keys
// (and the loop object, 13 attributes, is made anew every iteration).
constexpr size_t kLinearDictSize = 32;

// Instrumentation for complexity tests; one counter per thread, so renders on other
// threads do not disturb a test's count.
thread_local uint64_t comparisons = 0;

}  // namespace

uint64_t comparison_count() { return comparisons; }

Dict::Dict() = default;
Dict::Dict(const Dict& other) : entries(other.entries) {}
Dict& Dict::operator=(const Dict& other) {
  entries = other.entries;
  index_.reset();
  return *this;
}
Dict::Dict(Dict&&) noexcept = default;
Dict& Dict::operator=(Dict&&) noexcept = default;
Dict::~Dict() = default;

namespace {

// The index of `key` in `entries` by a linear search, entries.size() when absent. A string
// key (attribute names, JSON keys: the usual case) is compared by text, as equals() does.
size_t find_linear(const std::vector<std::pair<Value, Value>>& entries, const Value& key) {
  const size_t n = entries.size();
  if (key.kind == Kind::kString) {
    for (size_t i = 0; i < n; ++i) {
      const Value& k = entries[i].first;
      if (k.kind == Kind::kString && k.text == key.text) {
        comparisons += i + 1;
        return i;
      }
    }
    comparisons += n;
    return n;
  }
  for (size_t i = 0; i < n; ++i) {
    if (equals(entries[i].first, key)) return i;
  }
  return n;
}

}  // namespace

size_t Dict::find_index(const Value& key) const {
  if (entries.size() <= kLinearDictSize || !is_hashable(key)) return find_linear(entries, key);
  if (!index_ || index_->covered > entries.size()) index_ = std::make_unique<Index>();  // new, or entries cleared
  for (size_t& i = index_->covered; i < entries.size(); ++i) {
    // Unhashable keys cannot be in a Python dict; template code never makes them.
    if (is_hashable(entries[i].first)) index_->slots.emplace(hash_value(entries[i].first), i);
  }
  const auto [begin, end] = index_->slots.equal_range(hash_value(key));
  for (auto it = begin; it != end; ++it) {
    if (equals(entries[it->second].first, key)) return it->second;
  }
  return entries.size();
}

const Value* Dict::find(const Value& key) const {
  const size_t i = entries.size() <= kLinearDictSize ? find_linear(entries, key) : find_index(key);
  return i < entries.size() ? &entries[i].second : nullptr;
}

Value* Dict::find(const Value& key) {
  const size_t i = entries.size() <= kLinearDictSize ? find_linear(entries, key) : find_index(key);
  return i < entries.size() ? &entries[i].second : nullptr;
}

void Dict::set(const Value& key, Value value) {
  if (Value* existing = find(key)) {
    *existing = std::move(value);
  } else {
    entries.emplace_back(key, std::move(value));
  }
}

Value Value::undefined(std::string reason, bool is_unsafe) {
  Value v;
  v.kind = Kind::kUndefined;
  v.text = std::move(reason);
  v.unsafe = is_unsafe;
  return v;
}

Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}

Value Value::from_bool(bool b) {
  Value v;
  v.kind = Kind::kBool;
  v.boolean = b;
  return v;
}

Value Value::from_int(int64_t i) {
  Value v;
  v.kind = Kind::kInt;
  v.integer = i;
  return v;
}

Value Value::big_int(std::string digits) {
  Value v;
  v.kind = Kind::kBigInt;
  v.text = std::move(digits);
  return v;
}

Value Value::from_float(double f) {
  Value v;
  v.kind = Kind::kFloat;
  v.number = f;
  return v;
}

Value Value::from_string(std::string s) {
  Value v;
  v.kind = Kind::kString;
  v.bytes = s.size();
  v.text = std::move(s);
  return v;
}

Value Value::list(std::vector<Value> values) {
  Value v;
  v.kind = Kind::kList;
  v.nesting = nesting_of(values);
  for (const Value& item : values) v.bytes = add_bytes(v.bytes, add_bytes(item.bytes, sizeof(Value)));
  v.items = std::make_shared<std::vector<Value>>(std::move(values));
  return v;
}

Value Value::tuple(std::vector<Value> values) {
  Value v = list(std::move(values));
  v.kind = Kind::kTuple;
  return v;
}

Value Value::dictionary(Dict d) {
  Value v;
  v.kind = Kind::kDict;
  int deepest = 0;
  for (const auto& [key, item] : d.entries) {
    deepest = std::max({deepest, key.nesting, item.nesting});
    v.bytes = add_bytes(v.bytes, add_bytes(add_bytes(key.bytes, item.bytes), 2 * sizeof(Value)));
  }
  if (deepest + 1 > kMaxValueNesting) throw std::invalid_argument("value nested too deeply");
  v.nesting = deepest + 1;
  v.dict = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::object(std::string type, Dict attributes) {
  Value v;
  v.kind = Kind::kObject;
  v.text = std::move(type);
  v.dict = std::make_shared<Dict>(std::move(attributes));
  return v;
}

Value Value::callable(std::string name, std::function<Value(Interpreter&, CallArgs&, int)> fn) {
  Value v;
  v.kind = Kind::kFunction;
  v.function = std::make_shared<Function>(Function{std::move(name), std::move(fn)});
  return v;
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt:
    case Kind::kBigInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kObject: return v.text;
    case Kind::kFunction: return "function";
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return false;
    case Kind::kNone: return false;
    case Kind::kBool: return v.boolean;
    case Kind::kInt: return v.integer != 0;
    case Kind::kFloat: return v.number != 0.0;
    case Kind::kString: return !v.text.empty();
    case Kind::kList:
    case Kind::kTuple: return !v.items->empty();
    case Kind::kDict: return !v.dict->entries.empty();
    case Kind::kObject:
    case Kind::kFunction:
    case Kind::kBigInt: return true;  // never 0
  }
  return false;
}

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0.0) return std::signbit(f) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form, then laid out as Python's repr does.
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), f, std::chars_format::scientific);
  const std::string sci(buffer, result.ptr);
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  const int decimal_point = exponent + 1;  // value = 0.DIGITS * 10^decimal_point
  std::string out = negative ? "-" : "";
  if (decimal_point > -4 && decimal_point <= 16) {
    if (decimal_point <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decimal_point), '0') + digits;
    } else if (static_cast<size_t>(decimal_point) >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(decimal_point) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decimal_point)) + "." +
             digits.substr(static_cast<size_t>(decimal_point));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  const int shown_exponent = decimal_point - 1;
  out += shown_exponent < 0 ? "e-" : "e+";
  const std::string exp_digits = std::to_string(std::abs(shown_exponent));
  if (exp_digits.size() < 2) out += "0";
  out += exp_digits;
  return out;
}

namespace {

std::string repr_at(const Value& v, int depth);

std::string entries_repr(const Dict& d, int depth) {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, item] : d.entries) {
    if (!first) out += ", ";
    first = false;
    out += repr_at(k, depth + 1) + ": " + repr_at(item, depth + 1);
  }
  return out + "}";
}

std::string object_repr(const Value& v, int depth) {
  if (v.text == "Namespace") return "<Namespace " + entries_repr(*v.dict, depth) + ">";
  if (v.text == "LoopContext") {
    const Value* index = v.dict->find(Value::from_string("index"));
    const Value* length = v.dict->find(Value::from_string("length"));
    return "<LoopContext " + (index ? to_str(*index) : "?") + "/" + (length ? to_str(*length) : "?") + ">";
  }
  return "<" + v.text + " object>";
}

std::string sequence_repr(const Value& v, int depth) {
  std::string out = v.kind == Kind::kTuple ? "(" : "[";
  for (size_t i = 0; i < v.items->size(); ++i) {
    if (i > 0) out += ", ";
    out += repr_at((*v.items)[i], depth + 1);
  }
  if (v.kind == Kind::kTuple && v.items->size() == 1) out += ",";
  out += v.kind == Kind::kTuple ? ")" : "]";
  return out;
}

std::string repr_at(const Value& v, int depth) {
  check_recursion(depth);
  switch (v.kind) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "None";
    case Kind::kBool: return v.boolean ? "True" : "False";
    case Kind::kInt: return std::to_string(v.integer);
    case Kind::kBigInt: return v.text;
    case Kind::kFloat: return float_repr(v.number);
    case Kind::kString: return text::repr(v.text);
    case Kind::kList:
    case Kind::kTuple: return sequence_repr(v, depth);
    case Kind::kDict: return entries_repr(*v.dict, depth);
    case Kind::kObject: return object_repr(v, depth);
    case Kind::kFunction: return "<function " + v.function->name + ">";
  }
  return "";
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "";
    case Kind::kString: return v.text;
    default: return repr(v);
  }
}

std::string repr(const Value& v) { return repr_at(v, 0); }

bool equals(const Value& a, const Value& b) {
  ++comparisons;
  if (a.is_number() && b.is_number()) {
    if (is_int_like(a) && is_int_like(b)) return int_of(a) == int_of(b);
    return float_of(a) == float_of(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString:
    case Kind::kBigInt: return a.text == b.text;
    case Kind::kList:
    case Kind::kTuple: {
      if (a.items->size() != b.items->size()) return false;
      for (size_t i = 0; i < a.items->size(); ++i) {
        if (!equals((*a.items)[i], (*b.items)[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (a.dict->entries.size() != b.dict->entries.size()) return false;
      for (const auto& [k, v] : a.dict->entries) {
        const Value* other = b.dict->find(k);
        if (other == nullptr || !equals(v, *other)) return false;
      }
      return true;
    }
    case Kind::kObject: return a.dict == b.dict;
    case Kind::kFunction: return a.function == b.function;
    default: return false;
  }
}

bool less_than(const Value& a, const Value& b) {
  ++comparisons;
  if (a.is_number() && b.is_number()) {
    if (is_int_like(a) && is_int_like(b)) return int_of(a) < int_of(b);
    return float_of(a) < float_of(b);
  }
  if (a.kind == Kind::kString && b.kind == Kind::kString) return a.text < b.text;  // UTF-8 keeps code point order
  if (a.kind == b.kind && a.is_sequence()) {
    const auto& x = *a.items;
    const auto& y = *b.items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  if (a.kind == Kind::kBigInt || b.kind == Kind::kBigInt) {
    throw std::invalid_argument(std::string(kBigIntPrintOnly) + ": they cannot be ordered here");
  }
  throw std::invalid_argument("'<' not supported between instances of '" + type_name(a) + "' and '" +
                              type_name(b) + "'");
}

bool is_hashable(const Value& v) {
  switch (v.kind) {
    case Kind::kNone:
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kString:
    case Kind::kFunction:
    case Kind::kObject:
    case Kind::kBigInt: return true;
    case Kind::kTuple:
      for (const Value& item : *v.items) {
        if (!is_hashable(item)) return false;
      }
      return true;
    default: return false;
  }
}

uint64_t hash_value(const Value& v) {
  auto mix = [](uint64_t h, uint64_t x) { return (h ^ x) * 0x100000001b3ull + (h >> 29); };
  switch (v.kind) {
    case Kind::kBool:
    case Kind::kInt: return std::hash<int64_t>()(int_of(v));
    case Kind::kFloat: {
      // Equal numbers hash alike: a float with an integral value hashes as that integer.
      const double f = v.number;
      if (f >= -9.2e18 && f <= 9.2e18 && f == std::floor(f)) return std::hash<int64_t>()(static_cast<int64_t>(f));
      return f == f ? std::hash<double>()(f) : 0x7ff8;  // any NaN
    }
    case Kind::kString:
    case Kind::kBigInt: return std::hash<std::string>()(v.text);
    case Kind::kTuple: {
      uint64_t h = 0xcbf29ce484222325ull;
      for (const Value& item : *v.items) h = mix(h, hash_value(item));
      return h;
    }
    case Kind::kObject: return std::hash<const void*>()(v.dict.get());
    case Kind::kFunction: return std::hash<const void*>()(v.function.get());
    default: return 0;  // None, and unhashable kinds (never looked up by hash)
  }
}

namespace {

// Deeper JSON than this is refused rather than risk the stack (json.loads stops near 1000).
constexpr int kMaxJsonDepth = 512;

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxJsonDepth) throw std::invalid_argument("JSON nested too deeply");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::from_bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::from_int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Value::big_int(std::to_string(u));
      return Value::from_int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::from_float(j.get<double>());
    case nlohmann::ordered_json::value_t::binary: {
      // An integer the JSON reader kept exactly (JsonParseOptions::exact_big_integers).
      const auto& binary = j.get_binary();
      if (binary.has_subtype() && binary.subtype() == kJsonBigIntegerSubtype) {
        return Value::big_int(std::string(binary.begin(), binary.end()));
      }
      throw std::invalid_argument("unsupported JSON value");
    }
    case nlohmann::ordered_json::value_t::string: return Value::from_string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json_at(item, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      d.entries.reserve(j.size());
      for (const auto& [key, item] : j.items()) d.entries.emplace_back(Value::from_string(key), from_json_at(item, depth + 1));
      return Value::dictionary(std::move(d));
    }
    default: throw std::invalid_argument("unsupported JSON value");
  }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

namespace {

std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return float_repr(f);
}

std::string json_key(const Value& k) {
  switch (k.kind) {
    case Kind::kString: return k.text;
    case Kind::kInt: return std::to_string(k.integer);
    case Kind::kBigInt: return k.text;
    case Kind::kFloat: return json_float(k.number);
    case Kind::kBool: return k.boolean ? "true" : "false";
    case Kind::kNone: return "null";
    default:
      throw std::invalid_argument("keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

void dump(const Value& v, const JsonOptions& options, int depth, std::string& out) {
  if (depth > 512) throw std::invalid_argument("value nested too deeply for tojson");
  auto check_size = [&](uint64_t more) {
    if (out.size() + more > options.max_bytes) {
      throw std::length_error("tojson: the result is larger than max_value_bytes (" +
                              std::to_string(options.max_bytes) + " bytes)");
    }
  };
  check_size(v.bytes);
  auto newline = [&](int level) {
    check_size(1 + static_cast<uint64_t>(level) * options.indent.size());
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += options.indent;
  };
  switch (v.kind) {
    case Kind::kNone: out += "null"; return;
    case Kind::kBool: out += v.boolean ? "true" : "false"; return;
    case Kind::kInt: out += std::to_string(v.integer); return;
    case Kind::kBigInt: out += v.text; return;
    case Kind::kFloat: out += json_float(v.number); return;
    case Kind::kString: text::append_json_string(out, v.text, options.ensure_ascii); return;
    case Kind::kList:
    case Kind::kTuple: {
      if (v.items->empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < v.items->size(); ++i) {
        if (i > 0) out += options.item_separator;
        if (options.has_indent) newline(depth + 1);
        dump((*v.items)[i], options, depth + 1, out);
      }
      if (options.has_indent) newline(depth);
      out.push_back(']');
      return;
    }
    case Kind::kDict: {
      if (v.dict->entries.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& entry : v.dict->entries) entries.push_back(&entry);
      if (options.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return less_than(a->first, b->first); });
      }
      out.push_back('{');
      bool first = true;
      for (const auto* entry : entries) {
        if (!first) out += options.item_separator;
        first = false;
        if (options.has_indent) newline(depth + 1);
        text::append_json_string(out, json_key(entry->first), options.ensure_ascii);
        out += options.key_separator;
        dump(entry->second, options, depth + 1, out);
      }
      if (options.has_indent) newline(depth);
      out.push_back('}');
      return;
    }
    default:
      throw std::invalid_argument("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  dump(v, options, 0, out);
  return out;
}

}  // namespace qwenrt::chat_template

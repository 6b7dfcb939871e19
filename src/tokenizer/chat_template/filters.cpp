// jinja2's builtin filters (jinja2/filters.py) for a non-autoescaping environment, plus
// transformers' own `tojson` (json.dumps with ensure_ascii=False, no key sorting, no HTML
// escaping; positional order ensure_ascii, indent, separators, sort_keys).
#include "tokenizer/chat_template/gcc_workarounds.h"  // first: see there

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <unordered_map>

#include "tokenizer/chat_template/interpreter.h"
#include "tokenizer/chat_template/text.h"

namespace qwenrt::chat_template {

namespace {

const char* const kFilters[] = {"abs", "attr", "batch", "capitalize", "center", "count", "d", "default",
                                "dictsort", "e", "escape", "first", "float", "forceescape", "indent", "int",
                                "items", "join", "last", "length", "list", "lower", "map", "max", "min",
                                "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
                                "selectattr", "sort", "string", "sum", "title", "tojson", "trim", "unique",
                                "upper", "wordcount"};

Value param_or(CallArgs& args, size_t index, const char* name, Value fallback) {
  const Value* v = args.find(index, name);
  return v ? *v : std::move(fallback);
}

int64_t length_of(Interpreter& in, const Value& v, int line) {
  switch (v.kind) {
    case Kind::kUndefined: return 0;
    case Kind::kString: return static_cast<int64_t>(text::length(v.text));
    case Kind::kList:
    case Kind::kTuple: return static_cast<int64_t>(v.items->size());
    case Kind::kDict: return static_cast<int64_t>(v.dict->entries.size());
    default: in.fail(line, "object of type '" + type_name(v) + "' has no len()");
  }
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

// jinja2's `attribute` argument: "a.b" or "a.0" paths, looked up like subscripts.
Value follow_attribute(Interpreter& in, const Value& item, const Value& attribute, int line) {
  if (attribute.kind != Kind::kString) return in.get_item(item, attribute, line);
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = attribute.text.find('.', start);
    const std::string part = attribute.text.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = in.get_item(v, numeric ? Value::from_int(std::stoll(part)) : Value::from_string(part), line);
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// Sort key: lower-cased strings unless case_sensitive (jinja2's ignore_case).
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.kind == Kind::kString) return Value::from_string(text::lower(v.text));
  return v;
}

bool compare_keys(Interpreter& in, const Value& a, const Value& b, int line) {
  in.check_defined(a, line);
  in.check_defined(b, line);
  return less_than(a, b);
}

Value tojson(Interpreter& in, const Value& v, CallArgs& args, int line) {
  JsonOptions options;
  options.ensure_ascii = truthy(param_or(args, 0, "ensure_ascii", Value::from_bool(false)));
  const Value indent = param_or(args, 1, "indent", Value::none());
  const Value separators = param_or(args, 2, "separators", Value::none());
  options.sort_keys = truthy(param_or(args, 3, "sort_keys", Value::from_bool(false)));
  options.max_bytes = in.limits().max_value_bytes;
  if (indent.kind == Kind::kInt) {
    in.check_width(indent.integer, "tojson indent", line);
    options.has_indent = true;
    options.indent = std::string(static_cast<size_t>(std::max<int64_t>(indent.integer, 0)), ' ');
  } else if (indent.kind == Kind::kString) {
    in.check_width(static_cast<int64_t>(indent.text.size()), "tojson indent", line);
    options.has_indent = true;
    options.indent = indent.text;
  } else if (!indent.is_none()) {
    in.fail(line, "tojson indent must be an int or a string");
  }
  if (options.has_indent) options.item_separator = ",";
  if (!separators.is_none()) {
    if (!separators.is_sequence() || separators.items->size() != 2 || (*separators.items)[0].kind != Kind::kString ||
        (*separators.items)[1].kind != Kind::kString) {
      in.fail(line, "tojson separators must be a pair of strings");
    }
    options.item_separator = (*separators.items)[0].text;
    options.key_separator = (*separators.items)[1].text;
  }
  return Value::from_string(to_json(v, options));
}

std::vector<Value> select_items(Interpreter& in, const Value& seq, CallArgs& args, bool by_attribute, bool keep_if,
                                int line) {
  size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (args.positional.empty()) in.fail(line, "missing attribute argument");
    attribute = args.positional[next++];
  }
  std::string test_name;
  if (next < args.positional.size()) {
    const Value& t = args.positional[next++];
    if (t.kind != Kind::kString) in.fail(line, "test name must be a string");
    test_name = t.text;
    if (!has_test(test_name)) in.fail(line, "test '" + test_name + "' is not supported", ErrorCategory::kUnsupported);
  }
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
  std::vector<Value> out;
  for (const Value& item : in.iterate(seq, line)) {
    const Value subject = by_attribute ? follow_attribute(in, item, attribute, line) : item;
    const bool passed = test_name.empty() ? truthy(subject) : apply_test(in, test_name, subject, test_args, line);
    if (passed == keep_if) out.push_back(item);
  }
  return out;
}

Value map_items(Interpreter& in, const Value& seq, CallArgs& args, int line) {
  std::vector<Value> out;
  // attribute= and default= are keyword-only in jinja2's map.
  constexpr size_t kKeywordOnly = static_cast<size_t>(-1);
  const Value* attribute = args.find(kKeywordOnly, "attribute");
  if (attribute != nullptr) {
    const Value* fallback = args.find(kKeywordOnly, "default");
    for (const Value& item : in.iterate(seq, line)) {
      Value v = follow_attribute(in, item, *attribute, line);
      out.push_back(v.is_undefined() && fallback ? *fallback : v);
    }
    return Value::list(std::move(out));
  }
  if (args.positional.empty() || args.positional[0].kind != Kind::kString) in.fail(line, "map() needs a filter name or attribute=");
  const std::string filter = args.positional[0].text;
  if (!has_filter(filter)) in.fail(line, "filter '" + filter + "' is not supported", ErrorCategory::kUnsupported);
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : in.iterate(seq, line)) out.push_back(apply_filter(in, filter, item, rest, line));
  return Value::list(std::move(out));
}

std::string indent_text(Interpreter& in, std::string s, const Value& width, bool first, bool blank, int line) {
  if (width.kind != Kind::kString) in.check_width(width.integer, "indent width", line);
  const std::string indention = width.kind == Kind::kString ? width.text : std::string(static_cast<size_t>(std::max<int64_t>(width.integer, 0)), ' ');
  s += "\n";  // jinja2 appends a newline so splitlines() keeps a trailing empty line
  // Python's splitlines: \r\n, \r, U+2028 and the other boundaries become "\n".
  const std::vector<std::string> lines = text::splitlines(s, false);
  in.check_size(s.size() + (lines.size() + 1) * indention.size(), line);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
  } else {
    rv = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : indention + lines[i]);
  }
  return first ? indention + rv : rv;
}

// Python's float(s) for the strings it accepts that strtod reads the same way; overflow is
// inf as in Python. nullopt when `s` is not a number.
std::optional<double> parse_float(const std::string& s) {
  if (s.empty() || s.find_first_of("xXpP") != std::string::npos) return std::nullopt;  // no hex floats
  char* end = nullptr;
  const double parsed = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return parsed;
}

// Python's round(int, ndigits): an int again; negative ndigits round half to even at that
// power of ten.
Value round_int(Interpreter& in, int64_t x, int64_t precision, int line) {
  if (precision >= 0) return Value::from_int(x);
  if (precision < -18) return Value::from_int(0);  // 10**19 exceeds every int64 in magnitude
  int64_t unit = 1;
  for (int64_t i = 0; i < -precision; ++i) unit *= 10;
  int64_t quotient = x / unit;  // unit >= 10: no overflow here
  int64_t remainder = x % unit;
  if (remainder < 0) {  // floor division
    remainder += unit;
    quotient -= 1;
  }
  const int64_t twice = 2 * remainder;  // < 2 * 10**18
  if (twice > unit || (twice == unit && (quotient & 1) != 0)) quotient += 1;
  int64_t result = 0;
  if (__builtin_mul_overflow(quotient, unit, &result)) {
    in.fail(line, "round result does not fit in 64 bits", ErrorCategory::kUnsupported);
  }
  return Value::from_int(result);
}

}  // namespace

bool has_filter(const std::string& name) {
  for (const char* f : kFilters) {
    if (name == f) return true;
  }
  return false;
}

Value apply_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& args, int line) {
  // An integer past 64 bits as a filter's argument (a width, a precision, a size) is refused,
  // not read as the 0 it holds in `integer`.
  const auto big = [](const Value& a) { return a.kind == Kind::kBigInt; };
  if (std::any_of(args.positional.begin(), args.positional.end(), big) ||
      std::any_of(args.keyword.begin(), args.keyword.end(), [&](const auto& kv) { return big(kv.second); })) {
    if (name != "default" && name != "d") {
      in.fail(line, "filter '" + name + "': " + kBigIntPrintOnly, ErrorCategory::kUnsupported);
    }
  }
  if (name == "tojson") return tojson(in, v, args, line);
  if (name == "length" || name == "count") return Value::from_int(length_of(in, v, line));
  if (name == "default" || name == "d") {
    const bool boolean = truthy(param_or(args, 1, "boolean", Value::from_bool(false)));
    if (v.is_undefined() || (boolean && !truthy(v))) return param_or(args, 0, "default_value", Value::from_string(""));
    return v;
  }
  if (name == "string") return Value::from_string(to_str(v));
  if (name == "safe") return Value::from_string(to_str(v));
  if (name == "trim") {
    const Value chars = param_or(args, 0, "chars", Value::none());
    return Value::from_string(text::strip(to_str(v), chars.is_none() ? nullptr : &chars.text, true, true));
  }
  if (name == "upper") return Value::from_string(text::upper(to_str(v)));
  if (name == "lower") return Value::from_string(text::lower(to_str(v)));
  if (name == "capitalize") return Value::from_string(text::capitalize(to_str(v)));
  if (name == "title") {
    // jinja2 splits before runs of "-", whitespace and opening brackets, then capitalises each piece.
    const std::u32string cps = text::decode(to_str(v));
    std::u32string out;
    bool at_word_start = true;
    for (char32_t c : cps) {
      const bool separator = c == U'-' || c == U'(' || c == U'{' || c == U'[' || c == U'<' || text::is_space(c);
      const std::string one = text::encode(std::u32string(1, c));
      out += text::decode(separator ? one : (at_word_start ? text::upper(one) : text::lower(one)));
      at_word_start = separator;
    }
    return Value::from_string(text::encode(out));
  }
  if (name == "replace") {
    const Value count = param_or(args, 2, "count", Value::none());
    return Value::from_string(text::replace(to_str(v), to_str(param_or(args, 0, "old", Value())),
                                            to_str(param_or(args, 1, "new", Value())),
                                            count.is_none() ? -1 : count.integer, in.limits().max_value_bytes));
  }
  if (name == "escape" || name == "e" || name == "forceescape") return Value::from_string(html_escape(to_str(v)));
  if (name == "first" || name == "last") {
    const std::vector<Value> items = in.iterate(v, line);
    if (items.empty()) return Value::undefined(std::string("No ") + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    const std::string separator = to_str(param_or(args, 0, "d", Value::from_string("")));
    const Value* attribute = args.find(1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : in.iterate(v, line)) {
      const Value part = attribute ? follow_attribute(in, item, *attribute, line) : item;
      in.check_size(out.size() + separator.size() + part.bytes, line);
      if (!first) out += separator;
      first = false;
      out += to_str(part);
      in.check_size(out.size(), line);
    }
    return Value::from_string(std::move(out));
  }
  if (name == "list") return Value::list(in.iterate(v, line));
  if (name == "items") {
    if (v.is_undefined()) return Value::list({});
    if (v.kind != Kind::kDict) in.fail(line, "Can only get item pairs from a mapping.");
    std::vector<Value> pairs;
    for (const auto& [k, item] : v.dict->entries) pairs.push_back(Value::tuple({k, item}));
    return Value::list(std::move(pairs));
  }
  if (name == "int") {
    in.check_defined(v, line);
    if (v.kind == Kind::kBigInt) return v;
    const Value fallback = param_or(args, 0, "default", Value::from_int(0));
    const Value base = param_or(args, 1, "base", Value::from_int(10));
    // jinja2: int(value), else int(float(value)), else the default. Python's ints are
    // unbounded; one that does not fit in 64 bits is an error here, not a wrong number.
    auto float_to_int = [&](double f) {
      if (!std::isfinite(f)) return fallback;  // int(inf) raises OverflowError: the default
      if (!(f > -9223372036854775809.0 && f < 9223372036854775808.0)) {
        in.fail(line, "int of " + float_repr(f) + " does not fit in 64 bits", ErrorCategory::kUnsupported);
      }
      return Value::from_int(static_cast<int64_t>(f));
    };
    if (is_int_like(v)) return Value::from_int(int_of(v));
    if (v.kind == Kind::kFloat) return float_to_int(v.number);
    if (v.kind == Kind::kString) {
      std::string s = text::strip(v.text, nullptr, true, true);
      s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
      try {
        size_t used = 0;
        const int64_t parsed = std::stoll(s, &used, static_cast<int>(base.integer));
        if (used == s.size() && !s.empty()) return Value::from_int(parsed);
      } catch (const std::exception&) {
      }
      if (const std::optional<double> parsed = parse_float(s)) return float_to_int(*parsed);
    }
    return fallback;
  }
  if (name == "float") {
    in.check_defined(v, line);
    const Value fallback = param_or(args, 0, "default", Value::from_float(0.0));
    if (v.is_number()) return Value::from_float(float_of(v));
    if (v.kind == Kind::kBigInt) return Value::from_float(std::strtod(v.text.c_str(), nullptr));  // Python's float(int)
    if (v.kind == Kind::kString) {
      if (const std::optional<double> parsed = parse_float(text::strip(v.text, nullptr, true, true))) {
        return Value::from_float(*parsed);
      }
    }
    return fallback;
  }
  if (name == "abs") {
    in.check_defined(v, line);
    if (v.kind == Kind::kFloat) return Value::from_float(std::fabs(v.number));
    if (is_int_like(v)) {
      const int64_t x = int_of(v);
      if (x == INT64_MIN) in.fail(line, "abs of " + std::to_string(x) + " does not fit in 64 bits", ErrorCategory::kUnsupported);
      return Value::from_int(x < 0 ? -x : x);
    }
    in.fail(line, "bad operand type for abs(): '" + type_name(v) + "'");
  }
  if (name == "round") {
    in.check_defined(v, line);
    if (v.kind == Kind::kBigInt) in.fail(line, std::string(kBigIntPrintOnly) + ": no round() of them", ErrorCategory::kUnsupported);
    const int64_t precision = param_or(args, 0, "precision", Value::from_int(0)).integer;
    const std::string method = to_str(param_or(args, 1, "method", Value::from_string("common")));
    if (v.kind != Kind::kFloat && method == "common") return round_int(in, int_of(v), precision, line);
    const double x = float_of(v);
    const double scale = std::pow(10.0, static_cast<double>(precision));
    double r = 0.0;
    if (method == "common" && precision >= 0 && std::isfinite(x)) {
      // Python's round(x, n) rounds the exact binary value to n decimals, half to even; printf
      // does the same (round(2.675, 2) == 2.67 because 2.675 is stored as 2.67499...).
      char buffer[512];
      std::snprintf(buffer, sizeof(buffer), "%.*f", static_cast<int>(std::min<int64_t>(precision, 300)), x);
      r = std::strtod(buffer, nullptr);
    } else if (method == "common") {
      std::fesetround(FE_TONEAREST);
      r = std::nearbyint(x * scale) / scale;
    } else if (method == "ceil") {
      r = std::ceil(x * scale) / scale;
    } else if (method == "floor") {
      r = std::floor(x * scale) / scale;
    } else {
      in.fail(line, "method must be common, ceil or floor");
    }
    return Value::from_float(r);
  }
  if (name == "reverse") {
    if (v.kind == Kind::kString) {
      std::u32string cps = text::decode(v.text);
      std::reverse(cps.begin(), cps.end());
      return Value::from_string(text::encode(cps));
    }
    std::vector<Value> items = in.iterate(v, line);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "sort" || name == "unique" || name == "min" || name == "max") {
    const size_t case_index = name == "sort" ? 1 : 0;
    const bool case_sensitive = truthy(param_or(args, case_index, "case_sensitive", Value::from_bool(false)));
    const Value* attribute = args.find(case_index + 1, "attribute");
    auto key = [&](const Value& item) {
      return sort_key(attribute ? follow_attribute(in, item, *attribute, line) : item, case_sensitive);
    };
    std::vector<Value> items = in.iterate(v, line);
    if (name == "unique") {
      // jinja2 keeps a set of seen keys: linear time, and unhashable keys are a TypeError.
      std::vector<Value> out;
      std::unordered_multimap<uint64_t, Value> seen;
      for (const Value& item : items) {
        Value k = key(item);
        if (!is_hashable(k)) in.fail(line, "unhashable type: '" + type_name(k) + "'");
        const uint64_t h = hash_value(k);
        const auto [begin, end] = seen.equal_range(h);
        if (std::none_of(begin, end, [&](const auto& s) { return equals(s.second, k); })) {
          seen.emplace(h, std::move(k));
          out.push_back(item);
        }
      }
      return Value::list(std::move(out));
    }
    if (name == "min" || name == "max") {
      if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
      size_t best = 0;
      for (size_t i = 1; i < items.size(); ++i) {
        const bool better = name == "min" ? compare_keys(in, key(items[i]), key(items[best]), line)
                                          : compare_keys(in, key(items[best]), key(items[i]), line);
        if (better) best = i;
      }
      return items[best];
    }
    const bool reverse = truthy(param_or(args, 0, "reverse", Value::from_bool(false)));
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      return reverse ? compare_keys(in, key(b), key(a), line) : compare_keys(in, key(a), key(b), line);
    });
    return Value::list(std::move(items));
  }
  if (name == "dictsort") {
    if (v.kind != Kind::kDict) in.fail(line, "dictsort needs a mapping");
    const bool case_sensitive = truthy(param_or(args, 0, "case_sensitive", Value::from_bool(false)));
    const std::string by = to_str(param_or(args, 1, "by", Value::from_string("key")));
    const bool reverse = truthy(param_or(args, 2, "reverse", Value::from_bool(false)));
    std::vector<Value> pairs;
    for (const auto& [k, item] : v.dict->entries) pairs.push_back(Value::tuple({k, item}));
    const size_t pos = by == "value" ? 1 : 0;
    std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
      const Value ka = sort_key((*a.items)[pos], case_sensitive);
      const Value kb = sort_key((*b.items)[pos], case_sensitive);
      return reverse ? compare_keys(in, kb, ka, line) : compare_keys(in, ka, kb, line);
    });
    return Value::list(std::move(pairs));
  }
  if (name == "sum") {
    const Value* attribute = args.find(0, "attribute");
    Value total = param_or(args, 1, "start", Value::from_int(0));
    for (const Value& item : in.iterate(v, line)) {
      const Value x = attribute ? follow_attribute(in, item, *attribute, line) : item;
      in.check_defined(x, line);
      if (!x.is_number() || !total.is_number()) in.fail(line, "sum() needs numbers");
      if (total.kind == Kind::kFloat || x.kind == Kind::kFloat) {
        total = Value::from_float(float_of(total) + float_of(x));
      } else {
        int64_t sum = 0;
        if (__builtin_add_overflow(int_of(total), int_of(x), &sum)) {
          in.fail(line, "integer overflow in sum: the result does not fit in 64 bits", ErrorCategory::kUnsupported);
        }
        total = Value::from_int(sum);
      }
    }
    return total;
  }
  if (name == "map") return map_items(in, v, args, line);
  if (name == "select" || name == "reject") return Value::list(select_items(in, v, args, false, name == "select", line));
  if (name == "selectattr" || name == "rejectattr") {
    return Value::list(select_items(in, v, args, true, name == "selectattr", line));
  }
  if (name == "attr") {
    // Python getattr only: unlike `obj.name`, no fallback to obj["name"].
    const std::string attribute = to_str(param_or(args, 0, "name", Value()));
    if (v.kind == Kind::kObject || v.is_undefined()) return in.get_attr(v, attribute, line);
    const Value method = find_method(v, attribute);
    if (!method.is_undefined() || method.unsafe) return method;
    return Value::undefined("'" + type_name(v) + " object' has no attribute '" + attribute + "'");
  }
  if (name == "batch") {
    const int64_t size = param_or(args, 0, "linecount", Value::from_int(1)).integer;
    if (size <= 0) in.fail(line, "batch size must be positive");
    const Value* fill = args.find(1, "fill_with");
    if (fill && !fill->is_none()) in.check_width(size, "batch size with fill_with", line);
    std::vector<Value> batches;
    std::vector<Value> current;
    for (const Value& item : in.iterate(v, line)) {
      current.push_back(item);
      if (static_cast<int64_t>(current.size()) == size) {
        batches.push_back(Value::list(std::move(current)));
        current.clear();
      }
    }
    if (!current.empty()) {
      while (fill && !fill->is_none() && static_cast<int64_t>(current.size()) < size) current.push_back(*fill);
      batches.push_back(Value::list(std::move(current)));
    }
    return Value::list(std::move(batches));
  }
  if (name == "indent") {
    return Value::from_string(indent_text(in, to_str(v), param_or(args, 0, "width", Value::from_int(4)),
                                          truthy(param_or(args, 1, "first", Value::from_bool(false))),
                                          truthy(param_or(args, 2, "blank", Value::from_bool(false))), line));
  }
  if (name == "center") {
    const int64_t width = param_or(args, 0, "width", Value::from_int(80)).integer;
    in.check_width(width, "center width", line);
    const std::string s = to_str(v);
    const auto n = static_cast<int64_t>(text::length(s));
    if (width <= n) return Value::from_string(s);
    const int64_t margin = width - n;
    const int64_t left = margin / 2 + (margin & width & 1);  // CPython's str.center split
    return Value::from_string(std::string(static_cast<size_t>(left), ' ') + s +
                              std::string(static_cast<size_t>(margin - left), ' '));
  }
  if (name == "wordcount") {
    int64_t words = 0;
    bool in_word = false;
    for (char32_t c : text::decode(to_str(v))) {
      const bool word_char = c == U'_' || text::is_alnum(c);  // Python's \w
      if (word_char && !in_word) ++words;
      in_word = word_char;
    }
    return Value::from_int(words);
  }
  in.fail(line, "filter '" + name + "' is not supported", ErrorCategory::kUnsupported);
}

}  // namespace qwenrt::chat_template

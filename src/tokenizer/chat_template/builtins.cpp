// Tests, methods of str/list/dict and global functions, with the semantics of jinja2's
// builtins and of Python's methods (transformers' templates call str.startswith, .split,
// .strip, dict.get, dict.items, ... directly).
#include "tokenizer/chat_template/gcc_workarounds.h"  // first: see there

#include <chrono>
#include <ctime>

#include "tokenizer/chat_template/interpreter.h"
#include "tokenizer/chat_template/text.h"

namespace qwenrt::chat_template {

namespace {

// The sandbox's range() limit (jinja2.sandbox.MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

const Value& arg(Interpreter& in, CallArgs& args, size_t index, const char* name, int line) {
  if (const Value* v = args.find(index, name)) return *v;
  in.fail(line, std::string("missing argument '") + name + "'");
}

const std::string& string_arg(Interpreter& in, const Value& v, const char* what, int line) {
  in.check_defined(v, line);
  if (v.kind != Kind::kString) in.fail(line, std::string(what) + " must be str, not " + type_name(v));
  return v.text;
}

int64_t int_arg(Interpreter& in, const Value& v, const char* what, int line) {
  in.check_defined(v, line);
  if (v.kind == Kind::kBigInt) {
    in.fail(line, std::string(what) + ": " + kBigIntPrintOnly, ErrorCategory::kUnsupported);
  }
  if (!is_int_like(v)) in.fail(line, std::string(what) + " must be an integer, not " + type_name(v));
  return int_of(v);
}

// Python's code-point index of a byte offset.
int64_t code_point_index(const std::string& s, size_t byte_offset) {
  return static_cast<int64_t>(text::length(std::string_view(s).substr(0, byte_offset)));
}

bool affix_matches(Interpreter& in, const std::string& s, const Value& affix, bool prefix, int line) {
  auto one = [&](const Value& v) {
    const std::string& a = string_arg(in, v, prefix ? "startswith first arg" : "endswith first arg", line);
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.kind == Kind::kTuple) {
    for (const Value& v : *affix.items) {
      if (one(v)) return true;
    }
    return false;
  }
  return one(affix);
}

bool all_code_points(const std::string& s, bool (*pred)(char32_t)) {
  const std::u32string cps = text::decode(s);
  if (cps.empty()) return false;
  for (char32_t c : cps) {
    if (!pred(c)) return false;
  }
  return true;
}

Value string_method(Interpreter& in, const std::string& s, const std::string& name, CallArgs& args, int line) {
  const size_t n = args.positional.size();
  auto strip_chars = [&](const char* label) -> const std::string* {
    const Value* chars = args.find(0, "chars");
    if (chars == nullptr || chars->is_none()) return nullptr;
    return &string_arg(in, *chars, label, line);
  };
  if (name == "startswith" || name == "endswith") {
    const Value* start = args.find(1, "start");
    const Value* end = args.find(2, "end");
    const bool none_start = start == nullptr || start->is_none();
    const bool none_end = end == nullptr || end->is_none();
    if (none_start && none_end) {
      return Value::from_bool(affix_matches(in, s, arg(in, args, 0, "prefix", line), name == "startswith", line));
    }
    // s[start:end] in code points, as a slice clamps them; a start past the end, or an end
    // before the start, matches nothing.
    const std::u32string cps = text::decode(s);
    const auto size = static_cast<int64_t>(cps.size());
    const auto index = [&](const Value* v, int64_t fallback) {
      if (v == nullptr || v->is_none()) return fallback;
      const int64_t at = int_arg(in, *v, "slice index", line);
      return at < 0 ? std::max<int64_t>(at + size, 0) : at;
    };
    const int64_t from = index(start, 0);
    const int64_t to = std::min(index(end, size), size);
    if (from > size || to < from) return Value::from_bool(false);  // Python: no match, not even of ''
    const std::string part = text::encode(std::u32string_view(cps).substr(static_cast<size_t>(from), static_cast<size_t>(to - from)));
    return Value::from_bool(affix_matches(in, part, arg(in, args, 0, "prefix", line), name == "startswith", line));
  }
  if (name == "strip") return Value::from_string(text::strip(s, strip_chars("strip arg"), true, true));
  if (name == "lstrip") return Value::from_string(text::strip(s, strip_chars("lstrip arg"), true, false));
  if (name == "rstrip") return Value::from_string(text::strip(s, strip_chars("rstrip arg"), false, true));
  if (name == "split" || name == "rsplit") {
    const Value* sep = args.find(0, "sep");
    const Value* maxsplit = args.find(1, "maxsplit");
    const std::string* sep_text = (sep == nullptr || sep->is_none()) ? nullptr : &string_arg(in, *sep, "separator", line);
    const int64_t limit = maxsplit ? int_arg(in, *maxsplit, "maxsplit", line) : -1;
    std::vector<Value> parts;
    try {
      std::vector<std::string> pieces = text::split(s, sep_text, limit, name == "rsplit");
      in.check_size(s.size() + pieces.size() * sizeof(Value), line);
      in.charge(pieces.size(), line);
      for (auto& part : pieces) parts.push_back(Value::from_string(std::move(part)));
    } catch (const std::invalid_argument& e) {
      in.fail(line, e.what());
    }
    return Value::list(std::move(parts));
  }
  if (name == "replace") {
    const Value* count = args.find(2, "count");
    return Value::from_string(text::replace(s, string_arg(in, arg(in, args, 0, "old", line), "replace arg", line),
                                            string_arg(in, arg(in, args, 1, "new", line), "replace arg", line),
                                            count ? int_arg(in, *count, "count", line) : -1,
                                            in.limits().max_value_bytes));
  }
  if (name == "upper") return Value::from_string(text::upper(s));
  if (name == "lower") return Value::from_string(text::lower(s));
  if (name == "title") return Value::from_string(text::title(s));
  if (name == "capitalize") return Value::from_string(text::capitalize(s));
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    if (n > 1) in.fail(line, "str." + name + "() start/end arguments are not supported", ErrorCategory::kUnsupported);
    const std::string& sub = string_arg(in, arg(in, args, 0, "sub", line), "substring", line);
    if (name == "count") {
      if (sub.empty()) return Value::from_int(static_cast<int64_t>(text::length(s)) + 1);
      int64_t count = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++count;
      return Value::from_int(count);
    }
    const size_t at = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
    if (at == std::string::npos) {
      if (name == "index" || name == "rindex") in.fail(line, "substring not found");
      return Value::from_int(-1);
    }
    return Value::from_int(code_point_index(s, at));
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const Value& item : in.iterate(arg(in, args, 0, "iterable", line), line)) {
      if (item.kind != Kind::kString) in.fail(line, "sequence item: expected str instance, " + type_name(item) + " found");
      in.check_size(out.size() + s.size() + item.text.size(), line);
      if (!first) out += s;
      first = false;
      out += item.text;
    }
    return Value::from_string(std::move(out));
  }
  if (name == "isdigit") return Value::from_bool(all_code_points(s, text::is_digit));
  if (name == "isdecimal") return Value::from_bool(all_code_points(s, text::is_decimal));
  if (name == "isnumeric") return Value::from_bool(all_code_points(s, text::is_numeric));
  if (name == "isspace") return Value::from_bool(all_code_points(s, text::is_space));
  if (name == "isalpha") return Value::from_bool(all_code_points(s, text::is_alpha));
  if (name == "isalnum") return Value::from_bool(all_code_points(s, text::is_alnum));
  if (name == "islower" || name == "isupper") {
    const bool want_lower = name == "islower";
    const bool has_cased = text::upper(s) != text::lower(s);
    return Value::from_bool(has_cased && (want_lower ? text::lower(s) == s : text::upper(s) == s));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string& affix = string_arg(in, arg(in, args, 0, "affix", line), name.c_str(), line);
    const Value affix_value = Value::from_string(affix);
    if (!affix_matches(in, s, affix_value, name == "removeprefix", line)) return Value::from_string(s);
    return Value::from_string(name == "removeprefix" ? s.substr(affix.size()) : s.substr(0, s.size() - affix.size()));
  }
  if (name == "splitlines") {
    const Value* keepends = args.find(0, "keepends");
    std::vector<Value> lines;
    for (std::string& one : text::splitlines(s, keepends != nullptr && truthy(*keepends))) {
      lines.push_back(Value::from_string(std::move(one)));
    }
    in.charge(lines.size(), line);
    return Value::list(std::move(lines));
  }
  in.fail(line, "str." + name + "() is not supported", ErrorCategory::kUnsupported);
}

Value container_method(Interpreter& in, const Value& obj, const std::string& name, CallArgs& args, int line) {
  if (obj.kind == Kind::kDict) {
    if (name == "get") {
      const Value& key = arg(in, args, 0, "key", line);
      if (const Value* v = obj.dict->find(key)) return *v;
      const Value* fallback = args.find(1, "default");
      return fallback ? *fallback : Value::none();
    }
    std::vector<Value> out;
    for (const auto& [k, v] : obj.dict->entries) {
      if (name == "items") out.push_back(Value::tuple({k, v}));
      if (name == "keys") out.push_back(k);
      if (name == "values") out.push_back(v);
    }
    if (name == "copy") return Value::dictionary(*obj.dict);
    return Value::list(std::move(out));
  }
  if (name == "copy") return Value::list(*obj.items);
  const Value& needle = arg(in, args, 0, "value", line);
  int64_t count = 0;
  for (size_t i = 0; i < obj.items->size(); ++i) {
    if (!equals((*obj.items)[i], needle)) continue;
    if (name == "index") return Value::from_int(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") in.fail(line, repr(needle) + " is not in " + type_name(obj));
  return Value::from_int(count);
}

}  // namespace

Value find_method(const Value& obj, const std::string& name) {
  if (!name.empty() && name[0] == '_') {
    return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.", true);
  }
  static const char* const kStringMethods[] = {
      "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit", "replace", "upper", "lower",
      "title", "capitalize", "find", "rfind", "index", "rindex", "count", "join", "isdigit", "isdecimal",
      "isnumeric", "isspace",
      "isalpha", "isalnum", "islower", "isupper", "removeprefix", "removesuffix", "splitlines"};
  static const char* const kDictMethods[] = {"get", "items", "keys", "values", "copy"};
  static const char* const kDictMutators[] = {"pop", "popitem", "setdefault", "update", "clear"};
  static const char* const kListMethods[] = {"index", "count", "copy"};
  static const char* const kListMutators[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
  auto in_list = [&name](const auto& names) {
    for (const char* n : names) {
      if (name == n) return true;
    }
    return false;
  };
  auto bind = [&obj, &name](bool is_string) {
    const Value self = obj;
    const std::string method = name;
    return Value::callable(type_name(obj) + "." + name, [self, method, is_string](Interpreter& in, CallArgs& args, int line) {
      return is_string ? string_method(in, self.text, method, args, line) : container_method(in, self, method, args, line);
    });
  };
  auto unsafe = [&]() {
    return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.", true);
  };
  switch (obj.kind) {
    case Kind::kString:
      if (in_list(kStringMethods)) return bind(true);
      break;
    case Kind::kDict:
      if (in_list(kDictMethods)) return bind(false);
      if (in_list(kDictMutators)) return unsafe();
      break;
    case Kind::kList:
      if (in_list(kListMethods)) return bind(false);
      if (in_list(kListMutators)) return unsafe();
      break;
    case Kind::kTuple:
      if (name == "index" || name == "count") return bind(false);
      break;
    default: break;
  }
  std::string reason = "'";  // built by appending: GCC 12 misreports a chained `+` here
  reason.append(type_name(obj)).append(" object' has no attribute '").append(name).append("'");
  return Value::undefined(std::move(reason));
}

// ---- tests ----

namespace {

const char* const kTests[] = {"defined", "undefined", "none", "true", "false", "boolean", "string", "number",
                              "integer", "float", "mapping", "sequence", "iterable", "callable", "odd", "even",
                              "divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le",
                              "<=", "gt", "greaterthan", ">", "ge", ">=", "in", "lower", "upper", "sameas",
                              "escaped", "filter", "test"};

}  // namespace

bool has_test(const std::string& name) {
  for (const char* t : kTests) {
    if (name == t) return true;
  }
  return false;
}

bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& args, int line) {
  auto other = [&]() -> const Value& { return arg(in, args, 0, "other", line); };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "true") return v.kind == Kind::kBool && v.boolean;
  if (name == "false") return v.kind == Kind::kBool && !v.boolean;
  if (name == "boolean") return v.kind == Kind::kBool;
  if (name == "string") return v.kind == Kind::kString;
  if (name == "number") return v.is_number() || v.kind == Kind::kBigInt;
  if (name == "integer") return v.kind == Kind::kInt || v.kind == Kind::kBigInt;
  if (name == "float") return v.kind == Kind::kFloat;
  if (name == "mapping") return v.kind == Kind::kDict;
  // Undefined has __len__, __getitem__ and __iter__, so jinja2 calls it a sequence/iterable.
  if (name == "sequence") return v.kind == Kind::kString || v.is_sequence() || v.kind == Kind::kDict || v.is_undefined();
  if (name == "iterable") return v.kind == Kind::kString || v.is_sequence() || v.kind == Kind::kDict || v.is_undefined();
  if (name == "callable") return v.kind == Kind::kFunction;
  if (name == "odd" || name == "even") {
    const int64_t x = int_arg(in, v, "value", line);
    return ((x % 2 + 2) % 2 == 1) == (name == "odd");
  }
  if (name == "divisibleby") {
    const int64_t d = int_arg(in, other(), "divisor", line);
    if (d == 0) in.fail(line, "integer division or modulo by zero");
    if (d == -1) return true;  // INT64_MIN % -1 traps; every integer is divisible by -1
    return int_arg(in, v, "value", line) % d == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, other());
  if (name == "ne" || name == "!=") return !equals(v, other());
  if (name == "lt" || name == "lessthan" || name == "<" || name == "le" || name == "<=" || name == "gt" ||
      name == "greaterthan" || name == ">" || name == "ge" || name == ">=") {
    const Value& o = other();
    in.check_defined(v, line);
    in.check_defined(o, line);
    if (name == "lt" || name == "lessthan" || name == "<") return less_than(v, o);
    if (name == "le" || name == "<=") return less_than(v, o) || equals(v, o);
    if (name == "gt" || name == "greaterthan" || name == ">") return less_than(o, v);
    return less_than(o, v) || equals(v, o);
  }
  if (name == "in") {
    const Value& seq = arg(in, args, 0, "seq", line);
    if (seq.kind == Kind::kString) {
      if (v.kind != Kind::kString) in.fail(line, "'in <string>' requires string as left operand");
      return seq.text.find(v.text) != std::string::npos;
    }
    if (seq.kind == Kind::kDict) return seq.dict->find(v) != nullptr;
    for (const Value& item : in.iterate(seq, line)) {
      if (equals(item, v)) return true;
    }
    return false;
  }
  if (name == "lower" || name == "upper") {
    // jinja2's test_lower/test_upper: str(value).islower() (['a'] is lower: its repr is).
    const std::string s = to_str(v);
    const bool has_cased = text::upper(s) != text::lower(s);
    return has_cased && (name == "lower" ? text::lower(s) == s : text::upper(s) == s);
  }
  if (name == "sameas") {
    const Value& o = other();
    if (v.kind != o.kind) return false;
    if (v.is_sequence()) return v.items == o.items;
    if (v.kind == Kind::kDict || v.kind == Kind::kObject) return v.dict == o.dict;
    return equals(v, o);
  }
  if (name == "escaped") return false;
  if (name == "filter" || name == "test") {
    const Value& n = arg(in, args, 0, "name", line);
    return n.kind == Kind::kString && (name == "filter" ? has_filter(n.text) : has_test(n.text));
  }
  in.fail(line, "test '" + name + "' is not supported", ErrorCategory::kUnsupported);
}

// ---- globals ----

void add_builtin_globals(Scope& globals) {
  globals.vars["namespace"] = Value::callable("namespace", [](Interpreter& in, CallArgs& args, int line) {
    Dict attributes;
    for (const Value& a : args.positional) {
      if (a.kind != Kind::kDict) in.fail(line, "namespace() positional arguments must be dicts");
      for (const auto& [k, v] : a.dict->entries) attributes.set(k, v);
    }
    for (const auto& [k, v] : args.keyword) attributes.set(Value::from_string(k), v);
    Value ns = Value::object("Namespace", std::move(attributes));
    in.adopt_namespace(ns);
    return ns;
  });
  globals.vars["dict"] = Value::callable("dict", [](Interpreter& in, CallArgs& args, int line) {
    Dict d;
    for (const Value& a : args.positional) {
      if (a.kind != Kind::kDict) in.fail(line, "dict() positional arguments must be dicts");
      for (const auto& [k, v] : a.dict->entries) d.set(k, v);
    }
    for (const auto& [k, v] : args.keyword) d.set(Value::from_string(k), v);
    return Value::dictionary(std::move(d));
  });
  globals.vars["range"] = Value::callable("range", [](Interpreter& in, CallArgs& args, int line) {
    if (args.positional.empty() || args.positional.size() > 3) in.fail(line, "range expected 1 to 3 arguments");
    int64_t start = 0;
    int64_t step = 1;
    int64_t stop = 0;
    if (args.positional.size() == 1) {
      stop = int_arg(in, args.positional[0], "range() argument", line);
    } else {
      start = int_arg(in, args.positional[0], "range() argument", line);
      stop = int_arg(in, args.positional[1], "range() argument", line);
      if (args.positional.size() == 3) step = int_arg(in, args.positional[2], "range() argument", line);
    }
    if (step == 0) in.fail(line, "range() arg 3 must not be zero");
    std::vector<Value> items;
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
      if (static_cast<int64_t>(items.size()) >= kMaxRange) {
        in.fail(line, "range too big, maximum size for range is " + std::to_string(kMaxRange));
      }
      items.push_back(Value::from_int(i));
      if (__builtin_add_overflow(i, step, &i)) break;  // the next value is past `stop` anyway
    }
    return Value::list(std::move(items));
  });
  globals.vars["raise_exception"] = Value::callable("raise_exception", [](Interpreter& in, CallArgs& args, int line) {
    const Value* message = args.find(0, "message");
    in.fail(line, "raise_exception: " + (message ? to_str(*message) : std::string()));
    return Value::none();
  });
  globals.vars["strftime_now"] = Value::callable("strftime_now", [](Interpreter& in, CallArgs& args, int line) {
    const std::string& format = string_arg(in, arg(in, args, 0, "format", line), "format", line);
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm local{};
    localtime_r(&now, &local);
    char buffer[512];
    const size_t n = std::strftime(buffer, sizeof(buffer), format.c_str(), &local);
    return Value::from_string(std::string(buffer, n));
  });
}

}  // namespace qwenrt::chat_template

#include "tokenizer/chat_template/gcc_workarounds.h"  // first: see there

#include "tokenizer/chat_template/interpreter.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>

#include "tokenizer/chat_template/text.h"

namespace qwenrt::chat_template {

Interpreter::Interpreter(const Template& tmpl, std::shared_ptr<Scope> globals, const RenderLimits& limits)
    : template_(tmpl),
      scope_(std::move(globals)),
      limits_(limits),
      steps_left_(static_cast<int64_t>(std::min<uint64_t>(limits.max_steps, INT64_MAX))) {}

Interpreter::~Interpreter() {
  for (const auto& ns : namespaces_) ns->entries.clear();
}

std::string Interpreter::render() {
  std::string out;
  start_budget(out);
  exec_body(template_.body, out);
  output_ = nullptr;
  return out;
}

void Interpreter::fail(int line, const std::string& message, ErrorCategory category) const {
  throw Error(category, "chat template error at line " + std::to_string(line) + ": " + message);
}

void Interpreter::fail_undefined(const Value& undefined, int line) const {
  if (undefined.unsafe) fail(line, "security error: " + undefined.text);
  fail(line, undefined.text.empty() ? "undefined value" : undefined.text);
}

Value Interpreter::lookup(const std::string& name) const {
  for (const Scope* s = scope_.get(); s != nullptr; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  return Value::undefined("'" + name + "' is undefined");
}

// ---- statements ----

// Inlined into exec_body, its one caller.
[[gnu::always_inline]] inline Interpreter::Flow Interpreter::exec(const Stmt& s, std::string& out) {
  charge(1, s.line);
  try {
    return exec_inner(s, out);
  } catch (const std::invalid_argument& err) {
    fail(s.line, err.what());
  } catch (const std::length_error& err) {
    fail(s.line, err.what());
  }
}

// Every statement that nests runs its body here, so this is where the stack is checked:
// the body's statements all run from this frame, so one check before the first covers them.
Interpreter::Flow Interpreter::exec_body(const Body& body, std::string& out) {
  if (!body.empty()) check_stack(body.front()->line);
  for (const auto& stmt : body) {
    const Flow flow = exec(*stmt, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_inner(const Stmt& s, std::string& out) {
  switch (s.kind) {
    case StmtKind::kText: emit(out, s.text, s.line); return Flow::kNormal;
    case StmtKind::kOutput: {
      const Value v = eval(*s.expr);
      check_size(v.bytes, s.line);  // printing a container costs at least its size
      emit(out, to_str(v), s.line);
      return Flow::kNormal;
    }
    case StmtKind::kIf:
      for (size_t i = 0; i < s.conditions.size(); ++i) {
        if (truthy(eval(*s.conditions[i]))) return exec_body(s.bodies[i], out);
      }
      return exec_body(s.else_body, out);
    case StmtKind::kFor: return exec_for(s, out);
    case StmtKind::kSet: exec_set(s); return Flow::kNormal;
    case StmtKind::kSetBlock: {
      std::string captured;
      exec_body(s.body, captured);
      Value v = Value::from_string(std::move(captured));
      if (s.expr) {
        // The filter chain's innermost operand is null: feed it the captured text.
        std::vector<const Expr*> chain;
        for (const Expr* f = s.expr.get(); f != nullptr; f = f->children[0].get()) chain.push_back(f);
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
          CallArgs args = eval_args(**it, 1);
          v = apply_filter(*this, (*it)->name, v, args, (*it)->line);
        }
      }
      scope_->vars[s.name] = std::move(v);
      return Flow::kNormal;
    }
    case StmtKind::kMacro: scope_->vars[s.name] = make_macro(s, scope_, Value::undefined("'caller' is undefined")); return Flow::kNormal;
    case StmtKind::kCallBlock: {
      // `caller` is a macro whose body is the call block's body.
      const Value caller = make_macro(s, scope_, Value::undefined("'caller' is undefined"));
      const Expr& call = *s.expr;
      Value callee = eval(*call.children[0]);
      CallArgs args = eval_args(call, 1);
      args.keyword.emplace_back("caller", caller);
      emit(out, to_str(this->call(callee, args, s.line)), s.line);
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      std::string captured;
      exec_body(s.body, captured);
      Value v = Value::from_string(std::move(captured));
      std::vector<const Expr*> chain;
      for (const Expr* f = s.expr.get(); f != nullptr; f = f->children[0].get()) chain.push_back(f);
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        CallArgs args = eval_args(**it, 1);
        v = apply_filter(*this, (*it)->name, v, args, (*it)->line);
      }
      emit(out, to_str(v), s.line);
      return Flow::kNormal;
    }
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
    case StmtKind::kBlock: return exec_body(s.body, out);
    case StmtKind::kWith: {
      // Values are evaluated in the enclosing scope, then bound in a new one.
      auto scope = std::make_shared<Scope>();
      scope->parent = scope_;
      for (size_t i = 0; i < s.targets.size(); ++i) scope->vars[s.targets[i]] = eval(*s.conditions[i]);
      const std::shared_ptr<Scope> outer = scope_;
      scope_ = scope;
      Flow flow = Flow::kNormal;
      try {
        flow = exec_body(s.body, out);
      } catch (...) {
        scope_ = outer;
        throw;
      }
      scope_ = outer;
      return flow;
    }
  }
  return Flow::kNormal;
}

void Interpreter::assign_targets(Scope& scope, const std::vector<std::string>& targets, bool unpack,
                                 const Value& v, int line) {
  if (!unpack) {
    scope.vars[targets[0]] = v;
    return;
  }
  const std::vector<Value> parts = iterate(v, line);
  if (parts.size() != targets.size()) {
    fail(line, parts.size() < targets.size()
                   ? "not enough values to unpack (expected " + std::to_string(targets.size()) + ", got " + std::to_string(parts.size()) + ")"
                   : "too many values to unpack (expected " + std::to_string(targets.size()) + ")");
  }
  for (size_t i = 0; i < targets.size(); ++i) scope.vars[targets[i]] = parts[i];
}

void Interpreter::exec_set(const Stmt& s) {
  Value v = eval(*s.expr);
  if (!s.attribute.empty()) {
    const Value ns = lookup(s.name);
    if (ns.kind != Kind::kObject || ns.text != "Namespace") {
      fail(s.line, "cannot assign attribute on non-namespace object");
    }
    ns.dict->set(Value::from_string(s.attribute), std::move(v));
    return;
  }
  assign_targets(*scope_, s.targets, s.unpack, v, s.line);
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, std::string& out) {
  const std::vector<Value> source = iterate(eval(*s.expr), s.line);
  const std::shared_ptr<Scope> outer = scope_;
  std::vector<Value> items;
  if (s.condition) {
    for (const Value& item : source) {
      charge(kIterationSteps, s.line);
      scope_ = std::make_shared<Scope>();
      scope_->parent = outer;
      assign_targets(*scope_, s.targets, s.unpack, item, s.line);
      const bool keep = truthy(eval(*s.condition));
      scope_ = outer;
      if (keep) items.push_back(item);
    }
  } else {
    items = source;
  }
  const auto length = static_cast<int64_t>(items.size());
  // loop.changed(*values) remembers the previous call's values across iterations.
  auto last_changed = std::make_shared<std::optional<Value>>();
  const Value changed = Value::callable("changed", [last_changed](Interpreter&, CallArgs& args, int) {
    Value current = Value::tuple(args.positional);
    if (*last_changed && equals(**last_changed, current)) return Value::from_bool(false);
    *last_changed = std::move(current);
    return Value::from_bool(true);
  });
  bool completed = false;
  for (int64_t i = 0; i < length; ++i) {
    charge(kIterationSteps, s.line);
    auto iteration = std::make_shared<Scope>();
    iteration->parent = outer;
    assign_targets(*iteration, s.targets, s.unpack, items[static_cast<size_t>(i)], s.line);
    Dict loop;
    loop.entries.reserve(13);  // the attributes below: the vector is not regrown as they go in
    auto put = [&loop](const char* key, Value v) { loop.entries.emplace_back(Value::from_string(key), std::move(v)); };
    put("index", Value::from_int(i + 1));
    put("index0", Value::from_int(i));
    put("revindex", Value::from_int(length - i));
    put("revindex0", Value::from_int(length - i - 1));
    put("first", Value::from_bool(i == 0));
    put("last", Value::from_bool(i == length - 1));
    put("length", Value::from_int(length));
    put("depth", Value::from_int(1));
    put("depth0", Value::from_int(0));
    put("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item"));
    put("nextitem", i + 1 < length ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item"));
    put("cycle", Value::callable("cycle", [i](Interpreter& in, CallArgs& args, int line) {
          if (args.positional.empty()) in.fail(line, "no items for cycling given");
          return args.positional[static_cast<size_t>(i) % args.positional.size()];
        }));
    put("changed", changed);
    iteration->vars["loop"] = Value::object("LoopContext", std::move(loop));
    scope_ = iteration;
    Flow flow = Flow::kNormal;
    try {
      flow = exec_body(s.body, out);
    } catch (...) {
      scope_ = outer;
      throw;
    }
    scope_ = outer;
    if (flow == Flow::kBreak) break;
    completed = completed || flow == Flow::kNormal;
  }
  // As jinja2 compiles it: `else` runs unless some iteration reached the end of the body (an
  // empty loop, or one whose every iteration ended in break or continue).
  if (!completed) return exec_body(s.else_body, out);
  return Flow::kNormal;
}

Value Interpreter::make_macro(const Stmt& s, std::shared_ptr<Scope> closure, Value caller) {
  const Stmt* def = &s;
  const std::string name = s.kind == StmtKind::kMacro ? s.name : "caller";
  // Weak: the defining scope holds the macro, a strong reference would be a cycle.
  std::weak_ptr<Scope> weak_closure = closure;
  return Value::callable(name, [this, def, weak_closure, caller, name](Interpreter&, CallArgs& args, int line) {
    check_stack(line);
    charge(1, line);
    auto frame = std::make_shared<Scope>();
    frame->parent = weak_closure.lock();
    std::vector<Value> varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < def->params.size()) {
        frame->vars[def->params[i].name] = args.positional[i];
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    Dict kwargs;
    frame->vars["caller"] = caller;
    for (auto& [key, value] : args.keyword) {
      bool is_param = false;
      for (const auto& p : def->params) is_param = is_param || p.name == key;
      if (is_param) {
        if (frame->vars.count(key) != 0) fail(line, "macro '" + name + "' got multiple values for argument '" + key + "'");
        frame->vars[key] = value;
      } else if (key == "caller") {
        frame->vars["caller"] = value;
      } else {
        kwargs.entries.emplace_back(Value::from_string(key), value);
      }
    }
    frame->vars["varargs"] = Value::tuple(std::move(varargs));
    frame->vars["kwargs"] = Value::dictionary(std::move(kwargs));
    const std::shared_ptr<Scope> saved = scope_;
    scope_ = frame;
    std::string out;
    try {
      for (const auto& p : def->params) {
        if (frame->vars.count(p.name) != 0) continue;
        frame->vars[p.name] = p.default_value ? eval(*p.default_value)
                                              : Value::undefined("parameter '" + p.name + "' was not provided");
      }
      exec_body(def->body, out);
    } catch (...) {
      scope_ = saved;
      throw;
    }
    scope_ = saved;
    return Value::from_string(std::move(out));
  });
}

// ---- expressions ----

// Inlined into eval, where its result is eval's own (a local inside a try block would be
// moved to the result, not built there).
[[gnu::always_inline]] inline Value Interpreter::eval_guarded(const Expr& e) {
  try {
    return eval_inner(e);
  } catch (const std::invalid_argument& err) {
    fail(e.line, err.what());
  } catch (const std::out_of_range& err) {
    fail(e.line, err.what());
  } catch (const std::length_error& err) {
    fail(e.line, err.what());
  }
}

// The stack is checked where recursion is unbounded (statements, calls); an expression's
// own depth is bounded by the parser.
Value Interpreter::eval(const Expr& e) {
  charge(1, e.line);
  Value v = eval_guarded(e);
  if (v.bytes >= kBytesPerStep) account(e, v);  // smaller values cost nothing more
  return v;
}

CallArgs Interpreter::eval_args(const Expr& e, size_t first_positional) {
  CallArgs args;
  for (size_t i = first_positional; i < e.children.size(); ++i) args.positional.push_back(eval(*e.children[i]));
  for (const auto& [key, value] : e.keywords) args.keyword.emplace_back(key, eval(*value));
  return args;
}

Value Interpreter::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral: return e.value;
    case ExprKind::kName: return lookup(e.name);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      uint64_t bytes = 0;
      for (const auto& child : e.children) {
        items.push_back(eval(*child));
        bytes += items.back().bytes + sizeof(Value);
        check_size(bytes, e.line);
      }
      return e.kind == ExprKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
        Value key = eval(*e.children[i]);
        if (key.kind == Kind::kList || key.kind == Kind::kDict || key.is_undefined()) {
          fail(e.line, "unhashable type: '" + type_name(key) + "'");
        }
        d.set(key, eval(*e.children[i + 1]));
      }
      return Value::dictionary(std::move(d));
    }
    case ExprKind::kGetAttr: return get_attr(eval(*e.children[0]), e.name, e.line);
    case ExprKind::kGetItem: return get_item(eval(*e.children[0]), eval(*e.children[1]), e.line);
    case ExprKind::kSlice: return eval_slice(e);
    case ExprKind::kCall: return eval_call(e);
    case ExprKind::kFilter: {
      const Value operand = eval(*e.children[0]);
      CallArgs args = eval_args(e, 1);
      return apply_filter(*this, e.name, operand, args, e.line);
    }
    case ExprKind::kTest: {
      const Value operand = eval(*e.children[0]);
      CallArgs args = eval_args(e, 1);
      return Value::from_bool(apply_test(*this, e.name, operand, args, e.line) != e.negated);
    }
    case ExprKind::kNot: return Value::from_bool(!truthy(eval(*e.children[0])));
    case ExprKind::kNegate:
    case ExprKind::kPlus: {
      const Value v = eval(*e.children[0]);
      check_defined(v, e.line);
      if (!v.is_number()) fail(e.line, "bad operand type for unary " + std::string(e.kind == ExprKind::kNegate ? "-" : "+") + ": '" + type_name(v) + "'");
      if (e.kind == ExprKind::kPlus) return v.kind == Kind::kBool ? Value::from_int(int_of(v)) : v;
      if (v.kind == Kind::kFloat) return Value::from_float(-v.number);
      // Python's ints are unbounded; -(-2**63) is not a 64-bit integer.
      if (int_of(v) == INT64_MIN) fail(e.line, "integer overflow in unary '-': the result does not fit in 64 bits", ErrorCategory::kUnsupported);
      return Value::from_int(-int_of(v));
    }
    case ExprKind::kBinary: return eval_binary(e.name, eval(*e.children[0]), eval(*e.children[1]), e.line);
    case ExprKind::kAnd: {
      Value left = eval(*e.children[0]);
      return truthy(left) ? eval(*e.children[1]) : left;
    }
    case ExprKind::kOr: {
      Value left = eval(*e.children[0]);
      return truthy(left) ? left : eval(*e.children[1]);
    }
    case ExprKind::kCompare: return eval_compare(e);
    case ExprKind::kConcat: {
      std::string out;
      for (const auto& child : e.children) {
        const Value part = eval(*child);
        check_size(out.size() + part.bytes, e.line);
        out += to_str(part);
      }
      return Value::from_string(std::move(out));
    }
    case ExprKind::kCondition: {
      if (truthy(eval(*e.children[0]))) return eval(*e.children[1]);
      if (e.children[2]) return eval(*e.children[2]);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  fail(e.line, "unknown expression");
}

Value Interpreter::eval_call(const Expr& e) {
  const Value callee = eval(*e.children[0]);
  CallArgs args = eval_args(e, 1);
  return call(callee, args, e.line);
}

Value Interpreter::call(const Value& callee, CallArgs& args, int line) {
  if (callee.is_undefined()) fail_undefined(callee, line);
  if (callee.kind != Kind::kFunction) fail(line, "'" + type_name(callee) + "' object is not callable");
  return callee.function->call(*this, args, line);
}

Value Interpreter::get_attr(const Value& obj, const std::string& name, int line) {
  switch (obj.kind) {
    case Kind::kUndefined: fail_undefined(obj, line);
    case Kind::kObject: {
      if (const Value* v = obj.dict->find(Value::from_string(name))) return *v;
      return Value::undefined("'" + obj.text + " object' has no attribute '" + name + "'");
    }
    case Kind::kDict: {
      Value method = find_method(obj, name);
      if (!method.is_undefined() || method.unsafe) return method;
      if (const Value* v = obj.dict->find(Value::from_string(name))) return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    default: {
      Value method = find_method(obj, name);
      if (!method.is_undefined() || method.unsafe) return method;
      return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
    }
  }
}

Value Interpreter::get_item(const Value& obj, const Value& key, int line) {
  switch (obj.kind) {
    case Kind::kUndefined: fail_undefined(obj, line);
    case Kind::kDict:
      if (key.kind == Kind::kList || key.kind == Kind::kDict) fail(line, "unhashable type: '" + type_name(key) + "'");
      if (const Value* v = obj.dict->find(key)) return *v;
      break;
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kString:
      if (is_int_like(key)) {
        int64_t index = int_of(key);
        if (obj.kind == Kind::kString) {
          const std::u32string cps = text::decode(obj.text);
          const auto n = static_cast<int64_t>(cps.size());
          if (index < 0) index += n;
          if (index >= 0 && index < n) return Value::from_string(text::encode(cps.substr(static_cast<size_t>(index), 1)));
        } else {
          const auto n = static_cast<int64_t>(obj.items->size());
          if (index < 0) index += n;
          if (index >= 0 && index < n) return (*obj.items)[static_cast<size_t>(index)];
        }
        return Value::undefined(type_name(obj) + " index out of range");
      }
      break;
    default: break;
  }
  // jinja2 falls back to attribute lookup for string keys.
  if (key.kind == Kind::kString) {
    Value attr = obj.kind == Kind::kDict ? find_method(obj, key.text) : get_attr(obj, key.text, line);
    if (!attr.is_undefined() || attr.unsafe) return attr;
  }
  return Value::undefined("'" + type_name(obj) + " object' has no attribute " + repr(key));
}

std::vector<Value> Interpreter::iterate(const Value& v, int line) {
  switch (v.kind) {
    case Kind::kUndefined: return {};
    case Kind::kList:
    case Kind::kTuple: charge(v.items->size(), line); return *v.items;
    case Kind::kDict: {
      charge(v.dict->entries.size(), line);
      std::vector<Value> keys;
      for (const auto& entry : v.dict->entries) keys.push_back(entry.first);
      return keys;
    }
    case Kind::kString: {
      const uint64_t n = text::length(v.text);
      check_size(n * sizeof(Value), line);  // one Value per code point
      charge(n, line);
      std::vector<Value> chars;
      for (char32_t c : text::decode(v.text)) chars.push_back(Value::from_string(text::encode(std::u32string(1, c))));
      return chars;
    }
    default: fail(line, "'" + type_name(v) + "' object is not iterable");
  }
}

bool Interpreter::contains(const Value& container, const Value& item, int line) {
  switch (container.kind) {
    case Kind::kString:
      if (item.kind != Kind::kString) fail(line, "'in <string>' requires string as left operand, not " + type_name(item));
      return container.text.find(item.text) != std::string::npos;
    case Kind::kDict: return container.dict->find(item) != nullptr;
    case Kind::kUndefined: return false;
    case Kind::kList:
    case Kind::kTuple:
      for (const Value& v : *container.items) {
        if (equals(v, item)) return true;
      }
      return false;
    default: fail(line, "argument of type '" + type_name(container) + "' is not iterable");
  }
}

Value Interpreter::eval_compare(const Expr& e) {
  Value left = eval(*e.children[0]);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.children[i + 1]);
    const std::string& op = e.ops[i];
    bool result = false;
    if (op == "==") {
      result = equals(left, right);
    } else if (op == "!=") {
      result = !equals(left, right);
    } else if (op == "in" || op == "not in") {
      result = contains(right, left, e.line) == (op == "in");
    } else {
      check_defined(left, e.line);
      check_defined(right, e.line);
      if (op == "<") result = less_than(left, right);
      if (op == ">") result = less_than(right, left);
      if (op == "<=") result = less_than(left, right) || equals(left, right);
      if (op == ">=") result = less_than(right, left) || equals(left, right);
    }
    if (!result) return Value::from_bool(false);
    left = std::move(right);
  }
  return Value::from_bool(true);
}

Value Interpreter::eval_binary(const std::string& op, const Value& a, const Value& b, int line) {
  check_defined(a, line);
  check_defined(b, line);
  auto unsupported_operands = [&]() {
    if (a.kind == Kind::kBigInt || b.kind == Kind::kBigInt) {
      fail(line, std::string(kBigIntPrintOnly) + ": no '" + op + "' with them", ErrorCategory::kUnsupported);
    }
    fail(line, "unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
  };
  auto overflow = [&]() { fail(line, "integer overflow in '" + op + "': the result does not fit in 64 bits", ErrorCategory::kUnsupported);
  };
  if (a.is_number() && b.is_number()) {
    const bool ints = is_int_like(a) && is_int_like(b);
    const int64_t x = int_of(a);
    const int64_t y = int_of(b);
    const double fx = float_of(a);
    const double fy = float_of(b);
    int64_t r = 0;
    if (op == "+") {
      if (!ints) return Value::from_float(fx + fy);
      if (__builtin_add_overflow(x, y, &r)) overflow();
      return Value::from_int(r);
    }
    if (op == "-") {
      if (!ints) return Value::from_float(fx - fy);
      if (__builtin_sub_overflow(x, y, &r)) overflow();
      return Value::from_int(r);
    }
    if (op == "*") {
      if (!ints) return Value::from_float(fx * fy);
      if (__builtin_mul_overflow(x, y, &r)) overflow();
      return Value::from_int(r);
    }
    if (op == "/") {
      if (fy == 0.0) fail(line, "division by zero");
      return Value::from_float(fx / fy);
    }
    if (op == "//" || op == "%") {
      if (ints ? y == 0 : fy == 0.0) fail(line, op == "//" ? "integer division or modulo by zero" : "modulo by zero");
      if (ints) {
        if (x == INT64_MIN && y == -1) overflow();
        int64_t q = x / y;
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        return op == "//" ? Value::from_int(q) : Value::from_int(m);
      }
      // CPython's float divmod.
      double mod = std::fmod(fx, fy);
      double div = (fx - mod) / fy;
      if (mod != 0.0 && ((fy < 0) != (mod < 0))) {
        mod += fy;
        div -= 1.0;
      }
      if (op == "%") return Value::from_float(mod != 0.0 ? mod : std::copysign(0.0, fy));
      double floor_div = std::floor(div);
      if (div - floor_div > 0.5) floor_div += 1.0;
      return Value::from_float(div != 0.0 ? floor_div : std::copysign(0.0, fx / fy));
    }
    if (op == "**") {
      if (ints && y >= 0) {
        // Square and multiply: O(log y) steps, each checked.
        int64_t result = 1;
        int64_t base = x;
        for (int64_t e = y; e > 0; e >>= 1) {
          if ((e & 1) != 0 && __builtin_mul_overflow(result, base, &result)) overflow();
          // base**2 overflowing means the result would (it has that factor, |x| >= 2).
          if (e > 1 && __builtin_mul_overflow(base, base, &base)) overflow();
        }
        return Value::from_int(result);
      }
      if (fx == 0.0 && fy < 0) fail(line, "zero to a negative power (ZeroDivisionError)");
      if (fx < 0 && std::isfinite(fy) && fy != std::floor(fy)) {
        fail(line, "a negative number to a fractional power is complex", ErrorCategory::kUnsupported);
      }
      const double power = std::pow(fx, fy);
      if (std::isinf(power) && std::isfinite(fx) && std::isfinite(fy)) fail(line, "numerical result out of range (OverflowError)");
      return Value::from_float(power);
    }
    unsupported_operands();
  }
  if (op == "+") {
    if ((a.kind == Kind::kString && b.kind == Kind::kString) || (a.is_sequence() && a.kind == b.kind)) {
      check_size(a.bytes + b.bytes, line);
    }
    if (a.kind == Kind::kString && b.kind == Kind::kString) return Value::from_string(a.text + b.text);
    if (a.is_sequence() && a.kind == b.kind) {
      std::vector<Value> items = *a.items;
      items.insert(items.end(), b.items->begin(), b.items->end());
      return a.kind == Kind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
  }
  if (op == "*") {
    const bool a_repeats = (a.kind == Kind::kString || a.is_sequence()) && is_int_like(b);
    const bool b_repeats = (b.kind == Kind::kString || b.is_sequence()) && is_int_like(a);
    if (a_repeats || b_repeats) {
      const Value& seq = a_repeats ? a : b;
      const int64_t times = a_repeats ? int_of(b) : int_of(a);
      // Bytes, not items: ['x' * 60000000] * 60 is one item repeated, 3.5 GB of text.
      const uint64_t unit = seq.kind == Kind::kString ? seq.text.size() : seq.bytes;
      uint64_t total = 0;
      if (times > 0 && __builtin_mul_overflow(unit, static_cast<uint64_t>(times), &total)) {
        fail(line, "a value of more than 2**64 bytes is larger than max_value_bytes");
      }
      check_size(total, line);
      if (seq.kind == Kind::kString) {
        std::string out;
        for (int64_t i = 0; i < times; ++i) out += seq.text;
        return Value::from_string(std::move(out));
      }
      std::vector<Value> items;
      for (int64_t i = 0; i < times; ++i) items.insert(items.end(), seq.items->begin(), seq.items->end());
      return seq.kind == Kind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
  }
  if (op == "%" && a.kind == Kind::kString) fail(line, "printf-style string formatting ('%' on a string)", ErrorCategory::kUnsupported);
  unsupported_operands();
  return {};
}

Value Interpreter::eval_slice(const Expr& e) {
  const Value obj = eval(*e.children[0]);
  check_defined(obj, e.line);
  std::optional<int64_t> parts[3];
  for (int i = 0; i < 3; ++i) {
    if (!e.children[static_cast<size_t>(i) + 1]) continue;
    const Value v = eval(*e.children[static_cast<size_t>(i) + 1]);
    if (v.is_none()) continue;
    if (!is_int_like(v)) fail(e.line, "slice indices must be integers or None");
    parts[i] = int_of(v);
  }
  const int64_t step = parts[2].value_or(1);
  if (step == 0) fail(e.line, "slice step cannot be zero");
  std::u32string cps;
  int64_t n = 0;
  if (obj.kind == Kind::kString) {
    cps = text::decode(obj.text);
    n = static_cast<int64_t>(cps.size());
  } else if (obj.is_sequence()) {
    n = static_cast<int64_t>(obj.items->size());
  } else {
    return Value::undefined("'" + type_name(obj) + "' object is not subscriptable");
  }
  auto adjust = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t start = adjust(parts[0], step < 0 ? n - 1 : 0);
  const int64_t stop = adjust(parts[1], step < 0 ? -1 : n);
  std::vector<int64_t> indices;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) indices.push_back(i);
  if (obj.kind == Kind::kString) {
    std::u32string out;
    for (int64_t i : indices) out.push_back(cps[static_cast<size_t>(i)]);
    return Value::from_string(text::encode(out));
  }
  std::vector<Value> items;
  for (int64_t i : indices) items.push_back((*obj.items)[static_cast<size_t>(i)]);
  return obj.kind == Kind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
}

}  // namespace qwenrt::chat_template

// Tree-walking interpreter for a parsed template, with jinja2's runtime semantics as
// transformers configures them: default Undefined (prints "", falsy, errors when used as a
// value), for-loop scoping (a `set` inside a loop stays inside the iteration; namespaces
// carry state out), loop controls, macros, and the sandbox's refusal to mutate lists/dicts.
// Every render runs within a RenderLimits budget (limits.h), checked as it goes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/chat_template/ast.h"
#include "tokenizer/chat_template/limits.h"
#include "tokenizer/chat_template/value.h"

namespace qwenrt::chat_template {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};

class Interpreter {
 public:
  // `globals` holds the render variables (messages, tools, ...) and builtins (namespace,
  // range, raise_exception, ...); the template's top-level `set`s go there too.
  Interpreter(const Template& tmpl, std::shared_ptr<Scope> globals, const RenderLimits& limits = {});
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  std::string render();
  RenderStats stats() const;

  // ---- the budget (limits.h); each fails with the limit's name and the line ----
  // Adds `steps` units of work: the steps left count down, and the render fails when they
  // are spent (more than max_steps taken).
  void charge(uint64_t steps, int line) {
    steps_left_ -= steps > uint64_t{INT64_MAX} ? INT64_MAX : static_cast<int64_t>(steps);
    if (steps_left_ < 0) [[unlikely]] fail_steps(line);
  }
  // Work for copying or building `bytes` bytes (one step per 16).
  void charge_bytes(uint64_t bytes, int line) { charge(bytes / kBytesPerStep, line); }
  // A value of `bytes` bytes is about to be built.
  void check_size(uint64_t bytes, int line) const {
    if (bytes > limits_.max_value_bytes) [[unlikely]] fail_size(bytes, line);
  }
  // A width or count given to `what` (a filter).
  void check_width(int64_t width, const char* what, int line) const;
  const RenderLimits& limits() const { return limits_; }
  static constexpr uint64_t kBytesPerStep = 16;
  // A loop iteration builds a scope and the loop object: measured, about as much work as
  // twenty simple expressions, so it counts as twenty steps.
  static constexpr uint64_t kIterationSteps = 20;

  Value call(const Value& callee, CallArgs& args, int line);
  Value get_attr(const Value& obj, const std::string& name, int line);
  Value get_item(const Value& obj, const Value& key, int line);
  std::vector<Value> iterate(const Value& v, int line);

  [[noreturn]] void fail(int line, const std::string& message,
                         ErrorCategory category = ErrorCategory::kInvalidArgument) const;
  // Using an Undefined as a value: jinja2 raises UndefinedError (SecurityError for values
  // the sandbox refused).
  [[noreturn]] void fail_undefined(const Value& undefined, int line) const;
  void check_defined(const Value& v, int line) const {
    if (v.is_undefined()) fail_undefined(v, line);
  }

  Value eval(const Expr& e);

  // Namespaces are the one mutable value and can be made to contain themselves; the
  // interpreter empties them when the render ends so such cycles are not leaked.
  void adopt_namespace(const Value& ns) { namespaces_.push_back(ns.dict); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  // Notes where the stack and the output begin (budget.cpp).
  void start_budget(const std::string& output);
  // Fails when the render has used its share of the thread's stack. The deepest address
  // seen is never below the floor, so one comparison decides whether there is more to do.
  void check_stack(int line) {
    const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    if (here < stack_lowest_) [[unlikely]] deeper_stack(here, line);
  }
  // The render reached `here`, below any address seen before: note it, fail below the floor.
  void deeper_stack(uintptr_t here, int line);
  [[noreturn]] void fail_steps(int line) const;
  [[noreturn]] void fail_size(uint64_t bytes, int line) const;
  [[noreturn]] void fail_output(int line) const;
  // Charges and size-checks the value `e` produced (values of 16 bytes or more). Strings
  // are copied by value: each costs the copy (or the building) of its text. Values that
  // `e` made anew (not a variable, an item of one, or a literal) are size-checked too.
  void account(const Expr& e, const Value& v) {
    if (v.kind == Kind::kString) charge_bytes(v.text.size(), e.line);
    if (e.kind != ExprKind::kLiteral && e.kind != ExprKind::kName && e.kind != ExprKind::kGetAttr &&
        e.kind != ExprKind::kGetItem) {
      check_size(v.bytes, e.line);
      if (v.kind != Kind::kString) charge_bytes(v.bytes, e.line);
    }
  }
  // Appends to the output or to a captured block, within max_output_bytes/max_value_bytes.
  [[gnu::always_inline]] void emit(std::string& out, std::string_view text, int line) {
    const uint64_t size = out.size() + text.size();
    if (&out == output_) {
      if (size > limits_.max_output_bytes) [[unlikely]] fail_output(line);
      output_bytes_ = size;
    } else {
      check_size(size, line);
    }
    charge_bytes(text.size(), line);
    out += text;
  }

  Flow exec_body(const Body& body, std::string& out);
  inline Flow exec(const Stmt& s, std::string& out);  // inline in interpreter.cpp, its one user
  Flow exec_inner(const Stmt& s, std::string& out);
  Flow exec_for(const Stmt& s, std::string& out);
  void exec_set(const Stmt& s);
  Value make_macro(const Stmt& s, std::shared_ptr<Scope> closure, Value caller);
  void assign_targets(Scope& scope, const std::vector<std::string>& targets, bool unpack, const Value& v,
                      int line);

  // eval_inner, library exceptions as template errors; inline in interpreter.cpp, its one user.
  inline Value eval_guarded(const Expr& e);
  Value eval_inner(const Expr& e);
  Value eval_compare(const Expr& e);
  Value eval_binary(const std::string& op, const Value& a, const Value& b, int line);
  Value eval_slice(const Expr& e);
  Value eval_call(const Expr& e);
  CallArgs eval_args(const Expr& e, size_t first_positional);
  bool contains(const Value& container, const Value& item, int line);
  Value lookup(const std::string& name) const;

  const Template& template_;
  std::shared_ptr<Scope> scope_;
  const RenderLimits limits_;
  // max_steps (at most INT64_MAX) less the steps taken; below zero the render has failed.
  int64_t steps_left_;
  uint64_t comparisons_at_start_ = 0;
  const std::string* output_ = nullptr;  // the render's output (not a captured block) while it runs
  uint64_t output_bytes_ = 0;
  uintptr_t stack_base_ = 0;             // stack address when the render began
  uintptr_t stack_floor_ = 0;            // the render fails below this address
  uintptr_t stack_lowest_ = 0;           // deepest address seen
  std::vector<std::shared_ptr<Dict>> namespaces_;
};

// Filters, tests and methods (builtins.cpp).
bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value apply_filter(Interpreter& in, const std::string& name, const Value& operand, CallArgs& args, int line);
bool apply_test(Interpreter& in, const std::string& name, const Value& operand, CallArgs& args, int line);
// A bound method of a str/list/dict, or an Undefined when there is none (unsafe for the
// mutating methods the sandbox refuses).
Value find_method(const Value& obj, const std::string& name);
// Global functions available to every template (namespace, range, dict, raise_exception, ...).
void add_builtin_globals(Scope& globals);

}  // namespace qwenrt::chat_template

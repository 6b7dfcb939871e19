// The interpreter's resource budget (limits.h): where the render's stack began and where it
// must stop, the step count, size checks, and the output it may write.
#include "tokenizer/chat_template/gcc_workarounds.h"  // first: see there

#include <pthread.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "tokenizer/chat_template/interpreter.h"

namespace qwenrt::chat_template {

void Interpreter::start_budget(const std::string& output) {
  output_ = &output;
  comparisons_at_start_ = comparison_count();
  // The stack grows down from here. Stop at max_stack_bytes below, or stack_reserve_bytes
  // above the end of this thread's stack when that is nearer (a worker thread's small stack).
  stack_base_ = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  stack_lowest_ = stack_base_;
  stack_floor_ = stack_base_ > limits_.max_stack_bytes ? stack_base_ - limits_.max_stack_bytes : 0;
  pthread_attr_t attributes;
  if (pthread_getattr_np(pthread_self(), &attributes) == 0) {
    void* stack_low = nullptr;
    size_t stack_size = 0;
    if (pthread_attr_getstack(&attributes, &stack_low, &stack_size) == 0) {
      stack_floor_ = std::max(stack_floor_, reinterpret_cast<uintptr_t>(stack_low) + limits_.stack_reserve_bytes);
    }
    pthread_attr_destroy(&attributes);
  }
  check_stack(1);
}

RenderStats Interpreter::stats() const {
  RenderStats stats;
  stats.steps = steps_;
  stats.comparisons = comparison_count() - comparisons_at_start_;
  stats.stack_bytes = stack_base_ - stack_lowest_;
  stats.output_bytes = output_bytes_;
  return stats;
}

namespace {

std::string mebibytes(uint64_t bytes) {
  return bytes % (uint64_t{1} << 20) == 0 ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
}

}  // namespace

void Interpreter::check_stack(int line) {
  const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if (here < stack_lowest_) stack_lowest_ = here;
  if (here < stack_floor_) {
    fail(line, "recursion too deep: the render used " + std::to_string((stack_base_ - here) >> 10) +
                   " KiB of stack (limit max_stack_bytes " + mebibytes(limits_.max_stack_bytes) +
                   ", or the thread's stack less stack_reserve_bytes)");
  }
}

void Interpreter::fail_steps(int line) const {
  fail(line, "the render takes too long: more than max_steps " + std::to_string(limits_.max_steps) + " steps");
}

void Interpreter::check_size(uint64_t bytes, int line) const {
  if (bytes > limits_.max_value_bytes) {
    fail(line, "a value of " + std::to_string(bytes) + " bytes is larger than max_value_bytes " +
                   mebibytes(limits_.max_value_bytes));
  }
}

void Interpreter::check_width(int64_t width, const char* what, int line) const {
  if (width > limits_.max_width) {
    fail(line, std::string(what) + " " + std::to_string(width) + " is larger than max_width " +
                   std::to_string(limits_.max_width));
  }
}

void Interpreter::emit(std::string& out, std::string_view text, int line) {
  const uint64_t size = out.size() + text.size();
  if (&out == output_) {
    if (size > limits_.max_output_bytes) {
      fail(line, "the output is larger than max_output_bytes " + mebibytes(limits_.max_output_bytes));
    }
    output_bytes_ = size;
  } else {
    check_size(size, line);
  }
  charge_bytes(text.size(), line);
  out += text;
}

namespace {

// Expressions whose value is new (not a variable, an item of one, or a literal): the
// budget checks their size.
bool builds_value(ExprKind kind) {
  switch (kind) {
    case ExprKind::kLiteral:
    case ExprKind::kName:
    case ExprKind::kGetAttr:
    case ExprKind::kGetItem: return false;
    default: return true;
  }
}

}  // namespace

void Interpreter::account(const Expr& e, const Value& v) {
  // Strings are copied by value: charge for the copy (or the building) of their text.
  if (v.kind == Kind::kString) charge_bytes(v.text.size(), e.line);
  if (builds_value(e.kind)) {
    check_size(v.bytes, e.line);
    if (v.kind != Kind::kString) charge_bytes(v.bytes, e.line);
  }
}

}  // namespace qwenrt::chat_template

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
  if (stack_base_ < stack_floor_) deeper_stack(stack_base_, 1);  // a thread whose stack is nearly used
}

RenderStats Interpreter::stats() const {
  RenderStats stats;
  stats.steps = std::min<uint64_t>(limits_.max_steps, INT64_MAX) - static_cast<uint64_t>(steps_left_);
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

void Interpreter::deeper_stack(uintptr_t here, int line) {
  stack_lowest_ = here;
  if (here < stack_floor_) {
    fail(line, "recursion too deep: the render used " + std::to_string((stack_base_ - here) >> 10) +
                   " KiB of stack (limit max_stack_bytes " + mebibytes(limits_.max_stack_bytes) +
                   ", or the thread's stack less stack_reserve_bytes)");
  }
}

void Interpreter::fail_steps(int line) const {
  fail(line, "the render takes too long: more than max_steps " + std::to_string(limits_.max_steps) + " steps");
}

void Interpreter::fail_size(uint64_t bytes, int line) const {
  fail(line, "a value of " + std::to_string(bytes) + " bytes is larger than max_value_bytes " +
                 mebibytes(limits_.max_value_bytes));
}

void Interpreter::check_width(int64_t width, const char* what, int line) const {
  if (width > limits_.max_width) {
    fail(line, std::string(what) + " " + std::to_string(width) + " is larger than max_width " +
                   std::to_string(limits_.max_width));
  }
}

void Interpreter::fail_output(int line) const {
  fail(line, "the output is larger than max_output_bytes " + mebibytes(limits_.max_output_bytes));
}

}  // namespace qwenrt::chat_template

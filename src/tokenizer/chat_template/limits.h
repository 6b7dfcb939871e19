// The resource budget of one chat-template render. A chat template comes with a model folder
// from a hub and is a program; messages come from users (and, in the server, from the
// network). Whatever they contain, a render ends in output or in a qwenrt::Error naming the
// limit and the template line, within the budget below. docs/SECURITY.md lists the defaults
// and why; real Qwen templates on tens of thousands of messages use a small part of each.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qwenrt::chat_template {

struct RenderLimits {
  // The rendered text. 64 MiB is some 16 million tokens, far beyond any context length.
  uint64_t max_output_bytes = uint64_t{64} << 20;
  // One string, list or dict that the template builds (`~`, `+`, `*`, join, replace,
  // captured blocks, ...), counted as Value::bytes; values passed in are not limited.
  uint64_t max_value_bytes = uint64_t{64} << 20;
  // Work: one step per statement, expression, call and item a filter visits, twenty per loop
  // iteration, and one per 16 bytes of text the template copies or builds. 100 million steps
  // are one to a few seconds of one core.
  uint64_t max_steps = 100'000'000;
  // Widths and counts given to filters (center, indent, tojson's indent, batch with a fill).
  int64_t max_width = 100'000;
  // Stack: a render stops when it has used this much of its thread's stack, or earlier when
  // the thread's stack has less than `stack_reserve_bytes` left, whichever comes first.
  uint64_t max_stack_bytes = uint64_t{2} << 20;
  uint64_t stack_reserve_bytes = uint64_t{256} << 10;
};

// What a render used, for tests and for choosing limits.
struct RenderStats {
  uint64_t steps = 0;
  uint64_t comparisons = 0;  // value comparisons (==, <, dict lookups, sorting, unique)
  uint64_t stack_bytes = 0;  // the deepest stack use seen
  uint64_t output_bytes = 0;
};

}  // namespace qwenrt::chat_template

// Qwen's structured output in a stream of generated text: `<think>…</think>` at the start
// becomes reasoning_content, and `<tool_call>{"name": …, "arguments": …}</tool_call>` blocks
// become OpenAI tool calls (arguments as JSON text). Text that could still turn out to be
// the start of a tag is held back, so a tag split across tokens is never shown as content.
// A block that is not valid JSON is passed through as content, unchanged.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qwenrt::server {

// How Qwen's templates open and close a call.
inline constexpr std::string_view kToolCallOpen = "<tool_call>", kToolCallClose = "</tool_call>";

struct ToolCall {
  std::string id;         // "call_…", unique per server run
  std::string name;
  std::string arguments;  // JSON text
};

struct ParsedDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
};

class OutputParser {
 public:
  // reasoning_open: the text starts inside <think> (the prompt opened it).
  // single_tool_call: calls after the first are dropped (parallel_tool_calls: false).
  OutputParser(bool parse_reasoning, bool parse_tool_calls, bool reasoning_open = false,
               bool single_tool_call = false);
  ParsedDelta push(std::string_view text);
  // The end of the output: whatever is held back is released.
  ParsedDelta flush();
  bool saw_tool_call() const { return tool_calls_ > 0; }

 private:
  enum class State { kStart, kReasoning, kContent, kToolCall };
  void run(ParsedDelta& out, bool at_end);
  void emit_content(ParsedDelta& out, std::string_view text);

  bool parse_reasoning_, parse_tool_calls_, single_tool_call_;
  State state_;
  std::string buffer_;       // text not yet classified
  std::string held_space_;   // trailing whitespace of content, shown once more content follows
  bool strip_newlines_ = false;  // after </think>: the blank lines before the answer
  int tool_calls_ = 0;
};

}  // namespace qwenrt::server

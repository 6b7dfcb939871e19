// Qwen's structured output in a stream of generated text: `<think>…</think>` at the start
// becomes reasoning_content, and `<tool_call>{"name": …, "arguments": …}</tool_call>` blocks
// become OpenAI tool calls (arguments as JSON text). Text that could still turn out to be
// the start of a tag is held back, so a tag split across tokens is never shown as content.
//
// A block that opens as `{"name": "…", "arguments": {` is a call from there on: its start
// is given at once and its arguments as the model writes them (the model's own text, up to
// the object's matching brace; text after the call's own closing brace is content), so a
// streamed call grows token by token. Such a call is kept even where its arguments turn out
// not to be valid JSON (cut off by max_tokens, say): streamed and whole answers agree. Any
// other block is read whole at its close: a call if it is valid JSON with a name and no key
// but "arguments" beside it (arguments then as the model wrote them, or the string the model
// gave), else passed through as content, unchanged. A tag inside one of the block's JSON
// strings is text of that string, not the block's close or the next call's opening.
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

// A piece of a tool call: its start (id and name, perhaps with the first arguments text),
// or more of its arguments text.
struct ToolCallDelta {
  int index = 0;     // the call's place among the answer's calls
  bool starts = false;
  std::string id, name;  // with `starts`
  std::string arguments;
};

struct ParsedDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
};

class OutputParser {
 public:
  // reasoning_open: the text starts inside <think> (the prompt opened it).
  // single_tool_call: calls after the first are dropped (parallel_tool_calls: false).
  OutputParser(bool parse_reasoning, bool parse_tool_calls, bool reasoning_open = false,
               bool single_tool_call = false);
  ParsedDelta push(std::string_view text);
  // The server ended the prompt with a call's opening (tool_choice forced a call): `opening`
  // is pushed as the text before the model's. The answer is then calls alone (its grammar
  // allows nothing else): a block stays a call even if the output breaks off before its
  // arguments begin (its name as far as it was written).
  void push_forced_opening(std::string_view opening);
  // The end of the output (its last text, if any): whatever is held back is released.
  ParsedDelta flush(std::string_view last = {});
  bool saw_tool_call() const { return tool_calls_ > 0; }

 private:
  enum class State { kStart, kReasoning, kContent, kToolCall };
  // Inside a call block: reading its head up to the arguments' first character, inside the
  // arguments object, after it (the block's own close), or reading the whole block at its end.
  enum class Block { kHead, kArguments, kAfter, kWhole };
  void run(ParsedDelta& out, bool at_end);
  void emit_content(ParsedDelta& out, std::string_view text);
  void open_block();
  size_t read_block(ParsedDelta& out, std::string_view text);
  void end_block(ParsedDelta& out, bool closed);
  void add_arguments(ParsedDelta& out, std::string_view text);
  // The block's JSON strings: follow_string takes the next character (true: it is part of a
  // string, its quotes included), follow_strings a text; find_outside_strings finds `tag`
  // in text that follows the block, where it is not inside a string.
  bool follow_string(char c);
  void follow_strings(std::string_view text);
  size_t find_outside_strings(std::string_view text, std::string_view tag) const;
  static constexpr size_t kMaxHead = 512;  // bytes a call's head may take before its arguments

  bool parse_reasoning_, parse_tool_calls_, single_tool_call_, reasoning_open_;
  State state_;
  std::string buffer_;       // text not yet classified
  std::string held_space_;   // trailing whitespace of content, shown once more content follows
  bool strip_newlines_ = false;  // after </think>: the blank lines before the answer
  int tool_calls_ = 0;
  // The block being read: its text so far, where it is, and the arguments' nesting.
  std::string block_;
  Block block_state_ = Block::kHead;
  std::string open_brackets_;  // the arguments' unclosed { and [, innermost last
  bool dropping_ = false;      // a call after the first with parallel calls off: read, not given out
  bool forced_calls_ = false;  // the answer is forced calls (push_forced_opening): every block is one
  bool in_string_ = false, escaped_ = false;  // where the block's text ends: inside a JSON string
};

}  // namespace qwenrt::server

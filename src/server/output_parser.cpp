#include "server/output_parser.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <span>
#include <nlohmann/json.hpp>

#include "server/api.h"

namespace qwenrt::server {
namespace {

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";

// Length of the longest end of `text` that is a proper prefix of `tag` (could still become it).
size_t partial_tag(std::string_view text, std::string_view tag) {
  for (size_t length = std::min(text.size(), tag.size() - 1); length > 0; --length) {
    if (text.substr(text.size() - length) == tag.substr(0, length)) return length;
  }
  return 0;
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string new_call_id() {
  const uint64_t bits = process_unique_bits();
  char text[32];
  std::snprintf(text, sizeof(text), "call_%016llx", static_cast<unsigned long long>(bits));
  return text;
}

// Where a JSON string whose text starts at `i` (past its opening quote) ends: its closing
// quote, or text.size() while it is unfinished.
size_t string_end(std::string_view text, size_t i) {
  for (bool escaped = false; i < text.size() && (escaped || text[i] != '"'); ++i) escaped = !escaped && text[i] == '\\';
  return i;
}

// From text[i] on, outside strings and the brackets opened there: the first closing bracket
// (with `at_comma`, also the first ','); text.size() where there is none.
size_t unmatched_close(std::string_view text, size_t i, bool at_comma) {
  for (int depth = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      i = string_end(text, i + 1);
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (depth-- == 0) return i;
    } else if (c == ',' && at_comma && depth == 0) {
      return i;
    }
  }
  return text.size();
}

// The text of the value of the last member `key` of the JSON object `body` (valid JSON,
// as parsed), as written: a number keeps all its digits, an object its layout.
std::string_view member_text(std::string_view body, std::string_view key) {
  std::string_view found;
  size_t i = body.find('{') + 1;
  while (i < body.size()) {
    const size_t quote = body.find('"', i);
    if (quote == std::string_view::npos) break;
    const size_t key_end = string_end(body, quote + 1);
    const nlohmann::json name = nlohmann::json::parse(body.substr(quote, key_end + 1 - quote), nullptr, false);
    size_t start = body.find(':', key_end + 1) + 1;
    while (start < body.size() && is_space(body[start])) ++start;
    const size_t end = unmatched_close(body, start, /*at_comma=*/true);  // the value's end
    size_t trimmed = end;
    while (trimmed > start && is_space(body[trimmed - 1])) --trimmed;
    if (name.is_string() && name.get<std::string>() == key) found = body.substr(start, trimmed - start);
    if (end >= body.size() || body[end] == '}') break;
    i = end + 1;
  }
  return found;
}

bool parse_tool_call(std::string_view body, ToolCall& call) {
  if (body.find('\0') != std::string_view::npos) return false;  // the parser would stop there
  const nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object() || !parsed.contains("name") || !parsed["name"].is_string()) return false;
  const auto arguments = parsed.find("arguments");
  // An object with other keys but no "arguments" (say "parameters") is not Qwen's call:
  // taken as one, its arguments would be lost. It stays text, as in vLLM.
  if (arguments == parsed.end() && parsed.size() > 1) return false;
  call.id = new_call_id();
  call.name = parsed["name"].get<std::string>();
  if (arguments == parsed.end() || arguments->is_null()) {
    call.arguments = "{}";
  } else if (arguments->is_string()) {
    call.arguments = arguments->get<std::string>();
  } else {
    // The model's own text (its key order and numbers: sent back in a later turn, it renders
    // to the tokens the model wrote), as a call read as it streams gives it.
    call.arguments = std::string(member_text(body, "arguments"));
  }
  return true;
}

// One character of JSON text, given whether the text before it ends inside a string (and
// after a backslash there): whether it is part of a string, its quotes included.
bool step_string(char c, bool& in_string, bool& escaped) {
  if (in_string) {
    if (escaped) {
      escaped = false;
    } else if (c == '\\') {
      escaped = true;
    } else if (c == '"') {
      in_string = false;
    }
    return true;
  }
  in_string = c == '"';
  return in_string;
}

enum class Head { kMore, kNo, kYes };

// Reads `literals` from text[i] on, any whitespace before each: kYes past them all, kNo at
// a character that differs, kMore where the text ends first.
Head expect_literals(std::string_view text, size_t& i, std::span<const std::string_view> literals) {
  for (std::string_view literal : literals) {
    while (i < text.size() && is_space(text[i])) ++i;
    for (char c : literal) {
      if (i == text.size()) return Head::kMore;
      if (text[i] != c) return Head::kNo;
      ++i;
    }
  }
  return Head::kYes;
}

// Where the call's object closes in `text`, read from inside it after its arguments (stray
// keys may come first): the index past its brace, or npos while it is open.
size_t object_end(std::string_view text) {
  const size_t close = unmatched_close(text, 0, /*at_comma=*/false);
  return close == text.size() ? std::string::npos : close + 1;
}

// A call's head: `{"name": "`, the name's string, then `, "arguments": {`.
constexpr std::array<std::string_view, 4> kNameOpening = {"{", "\"name\"", ":", "\""};
constexpr std::array<std::string_view, 4> kArgumentsOpening = {",", "\"arguments\"", ":", "{"};

// Whether `text` opens a call as `{"name": "…", "arguments": {` (any whitespace between):
// kYes with the name and where the arguments object starts, kMore while it still could.
Head match_head(std::string_view text, std::string& name, size_t& arguments_start) {
  size_t i = 0;
  if (const Head head = expect_literals(text, i, kNameOpening); head != Head::kYes) return head;
  const size_t quote = i - 1;
  i = string_end(text, i);
  if (i == text.size()) return Head::kMore;
  const nlohmann::json parsed = nlohmann::json::parse(text.substr(quote, i + 1 - quote), nullptr, false);
  if (!parsed.is_string()) return Head::kNo;
  ++i;
  if (const Head head = expect_literals(text, i, kArgumentsOpening); head != Head::kYes) return head;
  name = parsed.get<std::string>();
  arguments_start = i - 1;
  return Head::kYes;
}

// The name of a call's head cut off before its arguments: `{"name": "` and as much of the
// name's JSON string as was written (an escape or a character cut in the middle dropped);
// "" when the head does not open that way.
std::string cut_name(std::string_view text) {
  size_t i = 0;
  if (expect_literals(text, i, kNameOpening) != Head::kYes) return "";
  std::string raw(text.substr(i, string_end(text, i) - i));
  for (int cut = 0; cut <= 6 && !raw.empty(); ++cut, raw.pop_back()) {
    const nlohmann::json parsed = nlohmann::json::parse("\"" + raw + "\"", nullptr, false);
    if (parsed.is_string()) return parsed.get<std::string>();
  }
  return "";
}

}  // namespace

OutputParser::OutputParser(bool parse_reasoning, bool parse_tool_calls, bool reasoning_open, bool single_tool_call)
    : parse_reasoning_(parse_reasoning), parse_tool_calls_(parse_tool_calls), single_tool_call_(single_tool_call),
      reasoning_open_(reasoning_open),
      state_(!parse_reasoning ? State::kContent : State::kStart) {}

ParsedDelta OutputParser::push(std::string_view text) {
  buffer_ += text;
  ParsedDelta out;
  run(out, false);
  return out;
}

void OutputParser::push_forced_opening(std::string_view opening) {
  push(opening);  // the head is not complete without the model's text: nothing comes out
  forced_calls_ = state_ == State::kToolCall;  // the opening opened a block
}

ParsedDelta OutputParser::flush(std::string_view last) {
  buffer_ += last;
  ParsedDelta out;
  run(out, true);
  if (state_ == State::kToolCall) {
    // A block read up to the end without its close (run() ends at an empty buffer).
    end_block(out, false);
    state_ = State::kContent;
  }
  if (!held_space_.empty() && tool_calls_ == 0) out.content += held_space_;
  held_space_.clear();
  return out;
}

void OutputParser::emit_content(ParsedDelta& out, std::string_view text) {
  if (strip_newlines_) {
    while (!text.empty() && (text.front() == '\n' || text.front() == '\r')) text.remove_prefix(1);
    if (text.empty()) return;
    strip_newlines_ = false;
  }
  if (!parse_tool_calls_) {
    out.content += text;  // no call can follow: nothing to hold back
    return;
  }
  // Trailing whitespace waits: before a call it is layout, not answer text.
  size_t end = text.size();
  while (end > 0 && is_space(text[end - 1])) --end;
  if (end == 0) {
    held_space_ += text;
    return;
  }
  out.content += held_space_;
  held_space_.clear();
  out.content += text.substr(0, end);
  held_space_ = std::string(text.substr(end));
}

void OutputParser::run(ParsedDelta& out, bool at_end) {
  while (!buffer_.empty()) {
    switch (state_) {
      case State::kStart: {
        if (buffer_.rfind(kThinkOpen, 0) == 0) {
          buffer_.erase(0, kThinkOpen.size());
          state_ = State::kReasoning;
          continue;
        }
        if (!at_end && kThinkOpen.substr(0, buffer_.size()) == buffer_) return;  // may still become <think>
        // Where the prompt opened <think>, the model is inside it (and a <think> it writes
        // again at the start is not reasoning text, as vLLM's Qwen3 reasoning parser has it).
        state_ = reasoning_open_ ? State::kReasoning : State::kContent;
        continue;
      }
      case State::kReasoning: {
        const size_t close = buffer_.find(kThinkClose);
        if (close != std::string::npos) {
          out.reasoning += buffer_.substr(0, close);
          buffer_.erase(0, close + kThinkClose.size());
          state_ = State::kContent;
          strip_newlines_ = true;
          continue;
        }
        const size_t keep = at_end ? 0 : partial_tag(buffer_, kThinkClose);
        out.reasoning += buffer_.substr(0, buffer_.size() - keep);
        buffer_.erase(0, buffer_.size() - keep);
        return;
      }
      case State::kContent: {
        if (!parse_tool_calls_) {
          emit_content(out, buffer_);
          buffer_.clear();
          return;
        }
        const size_t open = buffer_.find(kToolCallOpen);
        if (open != std::string::npos) {
          emit_content(out, std::string_view(buffer_).substr(0, open));
          buffer_.erase(0, open + kToolCallOpen.size());
          state_ = State::kToolCall;
          open_block();
          continue;
        }
        const size_t keep = at_end ? 0 : partial_tag(buffer_, kToolCallOpen);
        emit_content(out, std::string_view(buffer_).substr(0, buffer_.size() - keep));
        buffer_.erase(0, buffer_.size() - keep);
        return;
      }
      case State::kToolCall: {
        // A tag inside one of the block's JSON strings is text of that string.
        const size_t close = find_outside_strings(buffer_, kToolCallClose);
        if (block_state_ != Block::kArguments) {
          // Outside the arguments the model may open the next call without closing this one:
          // the block ends there (unless its head completes before the tag: then the tag is
          // text of the arguments).
          const size_t open = find_outside_strings(buffer_, kToolCallOpen);
          if (open != std::string::npos && open < close) {
            const size_t read = read_block(out, std::string_view(buffer_).substr(0, open));
            buffer_.erase(0, read);
            if (block_state_ == Block::kArguments || read < open) continue;
            buffer_.erase(0, kToolCallOpen.size());
            end_block(out, false);
            open_block();
            continue;
          }
        }
        // Held back: what may be the close, split (after the arguments: or the next opening).
        const size_t keep = std::max(partial_tag(buffer_, kToolCallClose),
                                     block_state_ != Block::kArguments ? partial_tag(buffer_, kToolCallOpen) : 0);
        const size_t ready = close != std::string::npos ? close : at_end ? buffer_.size() : buffer_.size() - keep;
        const size_t read = read_block(out, std::string_view(buffer_).substr(0, ready));
        buffer_.erase(0, read);
        if (read < ready) continue;  // the arguments ended inside: the rest is read after them
        if (close != std::string::npos || at_end) {
          if (close != std::string::npos) buffer_.erase(0, kToolCallClose.size());
          end_block(out, close != std::string::npos);
          state_ = State::kContent;
          continue;
        }
        return;
      }
    }
  }
}

bool OutputParser::follow_string(char c) { return step_string(c, in_string_, escaped_); }

void OutputParser::follow_strings(std::string_view text) {
  for (char c : text) follow_string(c);
}

size_t OutputParser::find_outside_strings(std::string_view text, std::string_view tag) const {
  bool in_string = in_string_, escaped = escaped_;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!step_string(text[i], in_string, escaped) && text.substr(i, tag.size()) == tag) return i;
  }
  return std::string::npos;
}

// A block begins: with parallel calls off, a call after the first is read as any other but
// not given out.
void OutputParser::open_block() {
  block_state_ = Block::kHead;
  dropping_ = single_tool_call_ && tool_calls_ > 0;
}

void OutputParser::add_arguments(ParsedDelta& out, std::string_view text) {
  if (text.empty()) return;
  if (!out.tool_calls.empty() && out.tool_calls.back().index == tool_calls_ - 1) {
    out.tool_calls.back().arguments += text;
    return;
  }
  ToolCallDelta delta;
  delta.index = tool_calls_ - 1;
  delta.arguments = std::string(text);
  out.tool_calls.push_back(std::move(delta));
}

// Reads the start of `text` into the block; returns how much it took: all of it, except
// where the arguments end inside it (the rest is then read in the state after them).
size_t OutputParser::read_block(ParsedDelta& out, std::string_view text) {
  if (block_state_ == Block::kHead) {
    block_ += text;
    follow_strings(text);
    // A head is short: one not complete within kMaxHead bytes (whitespace without end, say)
    // is read whole at the block's close, not matched again at every token.
    std::string name;
    size_t start = 0;
    const Head head = match_head(std::string_view(block_).substr(0, kMaxHead), name, start);
    if (head == Head::kMore && block_.size() < kMaxHead) return text.size();
    if (head != Head::kYes) {
      block_state_ = Block::kWhole;
      return text.size();
    }
    // A call from here on: its start now, its arguments as they come.
    held_space_.clear();  // whitespace between the answer text and a call is layout
    if (!dropping_) {
      ToolCallDelta delta;
      delta.index = tool_calls_;
      delta.starts = true;
      delta.id = new_call_id();
      delta.name = std::move(name);
      out.tool_calls.push_back(std::move(delta));
    }
    ++tool_calls_;
    block_state_ = Block::kArguments;
    // The head is complete only once the arguments' "{" is seen, so it lies in `text`.
    const std::string rest = block_.substr(start);
    block_.clear();
    in_string_ = escaped_ = false;  // at that "{"
    return text.size() - rest.size() + read_block(out, rest);
  }
  if (block_state_ == Block::kWhole || block_state_ == Block::kAfter) {
    block_ += text;  // after the arguments: the block's own closing brace, kept until its close
    follow_strings(text);
    return text.size();
  }
  size_t end = 0;
  while (end < text.size() && block_state_ == Block::kArguments) {
    const char c = text[end++];
    if (follow_string(c)) {
      continue;
    } else if (c == '{' || c == '[') {
      open_brackets_ += c;
    } else if (c == '}' || c == ']') {
      // Only its own bracket closes one (a stray one is text of arguments that are not JSON).
      if (!open_brackets_.empty() && open_brackets_.back() == (c == '}' ? '{' : '[')) open_brackets_.pop_back();
      if (open_brackets_.empty()) block_state_ = Block::kAfter;
    }
  }
  if (!dropping_) add_arguments(out, text.substr(0, end));
  return end;
}

void OutputParser::end_block(ParsedDelta& out, bool closed) {
  if (block_state_ == Block::kHead || block_state_ == Block::kWhole) {
    ToolCall call;
    if (parse_tool_call(block_, call)) {
      held_space_.clear();
      if (!dropping_) {
        ToolCallDelta delta;
        delta.index = tool_calls_;
        delta.starts = true;
        delta.id = std::move(call.id);
        delta.name = std::move(call.name);
        delta.arguments = std::move(call.arguments);
        out.tool_calls.push_back(std::move(delta));
      }
      ++tool_calls_;
    } else if (forced_calls_ && block_state_ == Block::kHead && !dropping_) {
      // A forced call cut off before its arguments began (max_tokens, a stop string): the
      // first's opening is the server's text, and the grammar allows no other answer, so it
      // stays a call with no arguments; a later one cut before any of its name is dropped
      // (its text is the grammar's markup, and a call to "" helps no client).
      held_space_.clear();
      std::string name = cut_name(block_);
      if (!name.empty() || tool_calls_ == 0) {
        ToolCallDelta delta;
        delta.index = tool_calls_;
        delta.starts = true;
        delta.id = new_call_id();
        delta.name = std::move(name);
        out.tool_calls.push_back(std::move(delta));
        ++tool_calls_;
      }
    } else {
      emit_content(out, std::string(kToolCallOpen) + block_ + (closed ? std::string(kToolCallClose) : ""));
    }
  } else if (block_state_ == Block::kAfter) {
    // What follows the call's own closing brace, in the block or where the model went on
    // without closing it, is answer text, not lost (stray keys before that brace are the
    // call's; a close cut off at the very end is no text).
    const size_t end = object_end(block_);
    const std::string_view rest = end == std::string::npos ? std::string_view() : std::string_view(block_).substr(end);
    std::string_view trimmed = rest;
    while (!trimmed.empty() && is_space(trimmed.front())) trimmed.remove_prefix(1);
    if (!kToolCallClose.starts_with(trimmed)) emit_content(out, rest);
  }
  block_.clear();
  block_state_ = Block::kHead;
  open_brackets_.clear();
  in_string_ = escaped_ = false;
}

}  // namespace qwenrt::server

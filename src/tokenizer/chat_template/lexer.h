// Splits a template into tokens the way jinja2's lexer does with transformers' settings
// (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False): newlines are
// normalised to "\n", one trailing newline is dropped, `{%-`/`-%}` strip whitespace,
// a block/comment tag alone on its line takes its indentation and its newline with it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qwenrt::chat_template {

enum class TokenType {
  kData,        // literal text (also the body of {% raw %})
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,   // text holds the unescaped value
  kInteger,  // integer holds the value
  kFloat,    // number holds the value
  kOperator,
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;
  int64_t integer = 0;
  double number = 0.0;
  int line = 1;
  int column = 1;
};

// Throws qwenrt::Error (kInvalidModel) naming line and column on malformed input.
std::vector<Token> tokenize(const std::string& source);

// "line L, column C" for error messages.
std::string where(int line, int column);

}  // namespace qwenrt::chat_template

// Recursive-descent parser for the jinja2 subset chat templates use, following jinja2's
// grammar and operator precedence (jinja2/parser.py). Unsupported tags (extends, include,
// import, block, ...) are rejected with an error naming the tag, line and column.
#pragma once

#include <string>

#include "tokenizer/chat_template/ast.h"

namespace qwenrt::chat_template {

// Throws qwenrt::Error (kInvalidModel for syntax errors, kUnsupported for valid jinja2 this
// interpreter does not implement).
Template parse_template(const std::string& source);

}  // namespace qwenrt::chat_template

// Python string semantics on UTF-8 text: Python indexes, slices and measures strings by code
// point and its str.strip()/split() treat Unicode whitespace (str.isspace) as whitespace, so
// the interpreter works on code points wherever Python would.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qwenrt::chat_template::text {

// Decodes UTF-8; throws std::invalid_argument on malformed input.
std::u32string decode(std::string_view utf8);
std::string encode(std::u32string_view code_points);
size_t length(std::string_view utf8);  // number of code points

// Python's str.isspace() for one code point.
bool is_space(char32_t c);
// Python's str.isprintable() for one code point (repr escapes the others).
bool is_printable(char32_t c);

// Python's str.isalpha() (letters: Unicode categories L*), isdecimal(), isdigit(), isnumeric()
// and isalnum() for one code point.
bool is_alpha(char32_t c);
bool is_decimal(char32_t c);
bool is_digit(char32_t c);
bool is_numeric(char32_t c);
bool is_alnum(char32_t c);

// str.strip/lstrip/rstrip; `chars` null: strip whitespace.
std::string strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split(sep, maxsplit) / str.rsplit; sep null: runs of whitespace.
std::vector<std::string> split(std::string_view s, const std::string* sep, int64_t maxsplit,
                               bool from_right);
// str.splitlines(keepends): Python's line boundaries (\n, \r, \r\n, \v, \f, \x1c-\x1e, \x85,
// U+2028, U+2029).
std::vector<std::string> splitlines(std::string_view s, bool keepends);
// str.replace; throws std::length_error when the result would exceed `max_bytes`.
std::string replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                    int64_t count, uint64_t max_bytes = UINT64_MAX);
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);
std::string capitalize(std::string_view s);
// Python repr() of a str.
std::string repr(std::string_view s);
// A JSON string literal as Python's json.dumps writes it.
void append_json_string(std::string& out, std::string_view s, bool ensure_ascii);

}  // namespace qwenrt::chat_template::text

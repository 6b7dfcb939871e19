#include "tokenizer/chat_template/gcc_workarounds.h"  // first: see there

#include "tokenizer/chat_template/lexer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "tokenizer/chat_template/text.h"
#include "tokenizer/utf8.h"

namespace qwenrt::chat_template {

std::string where(int line, int column) {
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

namespace {

// jinja2 splits on \r\n, \r and \n, joins with "\n" and drops one trailing newline.
std::string normalise_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    try {
      text::decode(src_);
    } catch (const std::invalid_argument& e) {
      throw Error(ErrorCategory::kInvalidModel, std::string("chat template is not valid UTF-8: ") + e.what());
    }
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_root();
    push(TokenType::kEof, "", src_.size());
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(size_t offset, const std::string& message) const {
    const auto [line, column] = line_column(offset);
    throw Error(ErrorCategory::kInvalidModel, "chat template syntax error at " + where(line, column) + ": " + message);
  }

  std::pair<int, int> line_column(size_t offset) const {
    const size_t index =
        static_cast<size_t>(std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) - line_starts_.begin()) - 1;
    const int line = static_cast<int>(index) + 1;
    const size_t line_start = line_starts_[index];
    const size_t end = offset < src_.size() ? offset : src_.size();
    // Tokens arrive in order: count code points from the previous position on the same line
    // rather than from the line start, so a long single-line template stays linear.
    size_t from = line_start;
    int column = 1;
    if (column_cache_offset_ >= line_start && column_cache_offset_ <= end) {
      from = column_cache_offset_;
      column = column_cache_;
    }
    column += static_cast<int>(text::length(std::string_view(src_).substr(from, end - from)));
    column_cache_offset_ = end;
    column_cache_ = column;
    return {line, column};
  }

  Token& push(TokenType type, std::string value, size_t offset) {
    Token token;
    token.type = type;
    token.text = std::move(value);
    const auto [line, column] = line_column(offset);
    token.line = line;
    token.column = column;
    tokens_.push_back(std::move(token));
    return tokens_.back();
  }

  // Length of the Python-whitespace run (\s*) starting at `at`.
  size_t space_run(size_t at) const {
    size_t i = at;
    while (i < src_.size()) {
      const size_t len = char_length(i);
      const char32_t c = text::decode(std::string_view(src_).substr(i, len))[0];
      if (!text::is_space(c)) break;
      i += len;
    }
    return i - at;
  }

  size_t char_length(size_t at) const {
    const auto lead = static_cast<unsigned char>(src_[at]);
    if (lead < 0x80) return 1;
    if ((lead & 0xE0) == 0xC0) return 2;
    if ((lead & 0xF0) == 0xE0) return 3;
    return 4;
  }

  bool starts_with(size_t at, std::string_view s) const { return std::string_view(src_).substr(at, s.size()) == s; }

  // Text before a tag, with `{%-` (strip all whitespace) or lstrip_blocks applied.
  std::string strip_before_tag(std::string text, char sign, bool is_variable) const {
    if (sign == '-') return text::strip(text, nullptr, false, true);
    if (sign != '+' && !is_variable) {
      const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      if (l_pos > 0 || line_starting_) {
        const std::string tail = text.substr(l_pos);
        if (!tail.empty() && text::strip(tail, nullptr, true, false).empty()) text.resize(l_pos);
      }
    }
    return text;
  }

  // Matches a block end (`+%}`, `-%}\s*`, `%}` plus one newline: trim_blocks) at `at`.
  size_t match_block_end(size_t at) const {
    if (starts_with(at, "+%}")) return 3;
    if (starts_with(at, "-%}")) return 3 + space_run(at + 3);
    if (starts_with(at, "%}")) return starts_with(at + 2, "\n") ? 3 : 2;
    return 0;
  }

  void lex_root() {
    size_t tag = src_.size();
    for (size_t i = pos_; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        tag = i;
        break;
      }
    }
    if (tag == src_.size()) {
      push(TokenType::kData, src_.substr(pos_), pos_);
      pos_ = src_.size();
      return;
    }
    const char kind = src_[tag + 1];
    size_t after = tag + 2;
    char sign = 0;
    if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];

    std::string data = strip_before_tag(src_.substr(pos_, tag - pos_), sign, kind == '{');
    if (!data.empty()) push(TokenType::kData, std::move(data), pos_);

    if (kind == '#') {
      lex_comment(tag, after);
    } else if (kind == '%' && try_raw(tag, after)) {
      // handled
    } else {
      lex_tag(tag, after, kind == '%');
    }
  }

  void lex_comment(size_t tag, size_t at) {
    for (size_t i = at; i < src_.size(); ++i) {
      size_t end = 0;
      if (starts_with(i, "+#}")) {
        end = i + 3;
      } else if (starts_with(i, "-#}")) {
        end = i + 3 + space_run(i + 3);
      } else if (starts_with(i, "#}")) {
        end = i + (starts_with(i + 2, "\n") ? 3 : 2);
      }
      if (end != 0) {
        pos_ = end;
        line_starting_ = src_[end - 1] == '\n';
        return;
      }
    }
    fail(tag, "missing end of comment tag");
  }

  // `{% raw %}...{% endraw %}`: the body is data, untouched except for the whitespace control
  // of the two tags. Returns false when the tag at `tag` is not `raw`.
  bool try_raw(size_t tag, size_t at) {
    size_t i = at + space_run(at);
    if (!starts_with(i, "raw")) return false;
    i += 3;
    if (i < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[i])) || src_[i] == '_')) return false;
    i += space_run(i);
    // The raw start tag has no trim_blocks newline removal in jinja2.
    if (starts_with(i, "-%}")) {
      i += 3 + space_run(i + 3);
    } else if (starts_with(i, "%}")) {
      i += 2;
    } else {
      return false;
    }
    line_starting_ = src_[i - 1] == '\n';
    for (size_t j = i; j + 1 < src_.size(); ++j) {
      if (!starts_with(j, "{%")) continue;
      size_t k = j + 2;
      char sign = 0;
      if (k < src_.size() && (src_[k] == '-' || src_[k] == '+')) sign = src_[k++];
      k += space_run(k);
      if (!starts_with(k, "endraw")) continue;
      k += 6;
      k += space_run(k);
      const size_t end_len = match_block_end(k);
      if (end_len == 0) continue;
      std::string body = strip_before_tag(src_.substr(i, j - i), sign, false);
      if (!body.empty()) push(TokenType::kData, std::move(body), i);
      pos_ = k + end_len;
      line_starting_ = src_[pos_ - 1] == '\n';
      return true;
    }
    fail(tag, "missing end of raw directive");
  }

  void lex_tag(size_t tag, size_t at, bool is_block) {
    push(is_block ? TokenType::kBlockBegin : TokenType::kVarBegin, is_block ? "{%" : "{{", tag);
    std::string brackets;
    size_t i = at;
    while (true) {
      if (i >= src_.size()) fail(tag, std::string("unexpected end of template, missing '") + (is_block ? "%}" : "}}") + "'");
      if (brackets.empty()) {
        size_t end_len = 0;
        if (is_block) {
          end_len = match_block_end(i);
        } else if (starts_with(i, "-}}")) {
          end_len = 3 + space_run(i + 3);
        } else if (starts_with(i, "}}")) {
          end_len = 2;
        }
        if (end_len != 0) {
          push(is_block ? TokenType::kBlockEnd : TokenType::kVarEnd, is_block ? "%}" : "}}", i);
          pos_ = i + end_len;
          line_starting_ = src_[pos_ - 1] == '\n';
          return;
        }
      }
      const size_t spaces = space_run(i);
      if (spaces > 0) {
        i += spaces;
        continue;
      }
      i = lex_expression_token(i, brackets);
    }
  }

  size_t lex_expression_token(size_t i, std::string& brackets) {
    const char c = src_[i];
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number(i);
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[j])) || src_[j] == '_')) ++j;
      push(TokenType::kName, src_.substr(i, j - i), i);
      return j;
    }
    if (c == '\'' || c == '"') return lex_string(i);
    static constexpr const char* kTwoCharOps[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwoCharOps) {
      if (starts_with(i, op)) {
        push(TokenType::kOperator, op, i);
        return i + 2;
      }
    }
    if (std::strchr("+-/*%~[](){}><=.:|,;", c) != nullptr && c != '\0') {
      if (c == '(' || c == '[' || c == '{') {
        brackets.push_back(c);
      } else if (c == ')' || c == ']' || c == '}') {
        const char open = c == ')' ? '(' : (c == ']' ? '[' : '{');
        if (brackets.empty() || brackets.back() != open) fail(i, std::string("unexpected '") + c + "'");
        brackets.pop_back();
      }
      push(TokenType::kOperator, std::string(1, c), i);
      return i + 1;
    }
    const size_t len = char_length(i);
    fail(i, "unexpected character '" + src_.substr(i, len) + "'");
  }

  size_t scan_digits(size_t i, bool allow_hex) const {
    while (i < src_.size() &&
           (std::isdigit(static_cast<unsigned char>(src_[i])) || src_[i] == '_' ||
            (allow_hex && std::isxdigit(static_cast<unsigned char>(src_[i]))))) {
      ++i;
    }
    return i;
  }

  size_t lex_number(size_t i) {
    auto digits_of = [this](size_t from, size_t to) {
      std::string d;
      for (size_t k = from; k < to; ++k) {
        if (src_[k] != '_') d.push_back(src_[k]);
      }
      return d;
    };
    if (src_[i] == '0' && i + 1 < src_.size() && std::strchr("xXoObB", src_[i + 1]) != nullptr) {
      const int base = (src_[i + 1] == 'x' || src_[i + 1] == 'X') ? 16 : (src_[i + 1] == 'o' || src_[i + 1] == 'O') ? 8 : 2;
      const size_t j = scan_digits(i + 2, base == 16);
      const std::string d = digits_of(i + 2, j);
      if (d.empty()) fail(i, "malformed number");
      errno = 0;
      const long long value = std::strtoll(d.c_str(), nullptr, base);
      if (errno == ERANGE) fail(i, "number out of range");  // Python's ints are unbounded; ours are 64-bit
      push(TokenType::kInteger, src_.substr(i, j - i), i).integer = value;
      return j;
    }
    size_t j = scan_digits(i, false);
    bool is_float = false;
    const bool after_dot = i > 0 && src_[i - 1] == '.';  // `x.0.1` is attribute access, not a float
    if (!after_dot && j + 1 < src_.size() && src_[j] == '.' && std::isdigit(static_cast<unsigned char>(src_[j + 1]))) {
      j = scan_digits(j + 1, false);
      is_float = true;
    }
    if (!after_dot && j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
      size_t k = j + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
        j = scan_digits(k, false);
        is_float = true;
      }
    }
    const std::string d = digits_of(i, j);
    try {
      if (is_float) {
        // Like Python's float literals: 1e400 is inf and 1e-400 is 0.0, not errors.
        push(TokenType::kFloat, src_.substr(i, j - i), i).number = std::strtod(d.c_str(), nullptr);
      } else {
        push(TokenType::kInteger, src_.substr(i, j - i), i).integer = std::stoll(d);
      }
    } catch (const std::out_of_range&) {
      fail(i, "number out of range");
    }
    return j;
  }

  size_t lex_string(size_t i) {
    const char quote = src_[i];
    std::string value;
    size_t j = i + 1;
    while (true) {
      if (j >= src_.size()) fail(i, "unterminated string literal");
      const char c = src_[j];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++j;
        continue;
      }
      if (j + 1 >= src_.size()) fail(i, "unterminated string literal");
      const char e = src_[j + 1];
      j += 2;
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': value.push_back('\\'); break;
        case '\'': value.push_back('\''); break;
        case '"': value.push_back('"'); break;
        case 'a': value.push_back('\a'); break;
        case 'b': value.push_back('\b'); break;
        case 'f': value.push_back('\f'); break;
        case 'n': value.push_back('\n'); break;
        case 'r': value.push_back('\r'); break;
        case 't': value.push_back('\t'); break;
        case 'v': value.push_back('\v'); break;
        case 'x': case 'u': case 'U': {
          const size_t n = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          if (j + n > src_.size()) fail(j - 2, "truncated \\" + std::string(1, e) + " escape");
          const std::string hex = src_.substr(j, n);
          for (char h : hex) {
            if (!std::isxdigit(static_cast<unsigned char>(h))) fail(j - 2, "malformed \\" + std::string(1, e) + " escape");
          }
          const unsigned long code = std::stoul(hex, nullptr, 16);
          if (code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) fail(j - 2, "escape is not a valid code point");
          tok::append_utf8(static_cast<char32_t>(code), value);
          j += n;
          break;
        }
        case 'N': fail(j - 2, "\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            unsigned code = static_cast<unsigned>(e - '0');
            for (int k = 0; k < 2 && j < src_.size() && src_[j] >= '0' && src_[j] <= '7'; ++k) code = code * 8 + (src_[j++] - '0');
            tok::append_utf8(static_cast<char32_t>(code), value);
          } else {
            value.push_back('\\');  // Python keeps unknown escapes as written
            value.push_back(e);
          }
      }
    }
    push(TokenType::kString, std::move(value), i);
    return j + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  mutable size_t column_cache_offset_ = 0;
  mutable int column_cache_ = 1;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(normalise_newlines(source)).run(); }

}  // namespace qwenrt::chat_template
